"""Serialize: each record of one split becomes `name: value | name: value` (fields, names and
template from the config's `serialize` section) plus its label id, ready for tokenization."""

from pathlib import Path

from account_tax import cli
from account_tax.data.serialize import SerializeSettings, serialize
from account_tax.data.spec import DataSpec
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--input", type=Path, required=True, help="one split's Parquet")
    parser.add_argument("--label-map", type=Path, required=True, help="label map JSON")
    parser.add_argument("--output", type=Path, required=True, help="serialized Parquet")
    parser.add_argument(
        "--split", required=True, help="the split's name: train gets serialize.class_texts"
    )
    args = parser.parse_args()
    options = SerializeSettings.of(args.settings["serialize"])
    rows = serialize(
        args.input,
        DataSpec.from_config(args.settings),
        options,
        args.label_map,
        args.output,
        with_class_texts=options.class_texts and args.split == "train",
    )
    log_stage(args.tracking, "serialize", {f"{args.output.stem}_rows": rows})


if __name__ == "__main__":
    cli.run(main)
