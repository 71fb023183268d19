"""Clean: enforce types by column role, normalise text (labels only trimmed), drop exact
duplicates. Unusable rows go to the rejects file, under the raw file's name, with a reason naming
the column, or the line of a malformed CSV record; in = out + rejects + duplicates, checked."""

from dataclasses import asdict
from pathlib import Path

import polars as pl

from account_tax import cli
from account_tax.data.clean import CleanSettings, clean, summary_table
from account_tax.data.spec import DataSpec
from account_tax.io import write_json
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--input", type=Path, required=True, help="ingested records Parquet")
    parser.add_argument("--output", type=Path, required=True, help="clean records Parquet")
    parser.add_argument("--rejects", type=Path, required=True, help="rejected rows Parquet")
    parser.add_argument("--counts", type=Path, required=True, help="row counts JSON")
    parser.add_argument("--summary", type=Path, required=True, help="counts and reasons TSV")
    parser.add_argument(
        "--no-label", action="store_true", help="records without labels (new records to predict)"
    )
    args = parser.parse_args()
    counts = clean(
        args.input,
        DataSpec.from_config(args.settings),
        args.output,
        args.rejects,
        CleanSettings.of(args.settings["clean"]),
        require_label=not args.no_label,
    )
    write_json(args.counts, asdict(counts))
    summary = summary_table(asdict(counts), pl.scan_parquet(args.rejects))
    args.summary.write_text(summary, encoding="utf-8")
    log_stage(args.tracking, "clean", asdict(counts), [args.counts, args.summary])


if __name__ == "__main__":
    cli.run(main)
