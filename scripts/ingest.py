"""Ingest: read the raw table named by the config's `data` section (CSV, Parquet, or the
bundled US-GAAP mapping) and write the configured columns plus `source_row` to Parquet. A
malformed CSV record (too many or too few fields, an unclosed quote) is kept with its line and
problem, for clean to reject; repeated column names are refused."""

from pathlib import Path

from account_tax import cli
from account_tax.data.ingest import ingest
from account_tax.data.spec import DataSpec
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--input", type=Path, help="raw table (default: the config's data.path)")
    parser.add_argument("--output", type=Path, required=True, help="records Parquet to write")
    parser.add_argument(
        "--labels-optional",
        action="store_true",
        help="new records to predict: the label column may be absent",
    )
    args = parser.parse_args()
    rows = ingest(
        DataSpec.from_config(args.settings),
        args.output,
        args.input,
        require_label=not args.labels_optional,
    )
    log_stage(args.tracking, "ingest", {"rows": rows})


if __name__ == "__main__":
    cli.run(main)
