"""The corrections tests' ledger and files: the small ledger cleaned, predict's rows to review,
and corrections applied with their outputs in one folder."""

import dataclasses

import polars as pl
from sample_ledger import ledger_config, small_ledger

from account_tax.data.clean import CleanSettings, clean
from account_tax.data.corrections import apply_corrections
from account_tax.data.ingest import ingest
from account_tax.data.spec import DataSpec
from account_tax.io import write_json
from account_tax.settings import complete

OPTIONS = CleanSettings.of({"case": "lower"})


CLEAN_COUNTS = "clean-counts.json"


def clean_ledger(folder, classes):
    """The small ledger through ingest and clean in `folder` (clean's counts in CLEAN_COUNTS, as
    the correct job reads them), and its spec with `classes`."""
    small_ledger(folder / "ledger.csv")
    config = complete(ledger_config(folder / "ledger.csv", classes=classes))
    spec = DataSpec.from_config(config)
    ingest(spec, folder / "ingested.parquet", folder / "ledger.csv")
    counts = clean(
        folder / "ingested.parquet",
        spec,
        folder / "clean.parquet",
        folder / "clean-rejects.parquet",
        CleanSettings.of(config["clean"]),
    )
    write_json(folder / CLEAN_COUNTS, dataclasses.asdict(counts))
    return spec, folder / "clean.parquet"


def apply_in(folder, records, files, spec):
    """apply_corrections, its outputs in `folder` (corrected, rejects and track_record.parquet),
    on `records` cleaned by `clean_ledger` (the ledger file's rows: ingest's, beside them)."""
    return apply_corrections(
        records,
        files,
        spec,
        OPTIONS,
        folder / "corrected.parquet",
        folder / "rejects.parquet",
        folder / "track_record.parquet",
        ledger_rows=pl.read_parquet(records.parent / "ingested.parquet").height,
    )


def review_file(ids, suggested, confidence, novel):
    """Predict's review file for records the ledger has (a re-scored period), account empty."""
    return pl.DataFrame(
        {
            "source_row": list(range(2, 2 + len(ids))),
            "id": ids,
            "text": [f"memo: office supplies no {i}" for i in range(len(ids))],
            "account": [None] * len(ids),
            "predicted_label": suggested,
            "confidence": pl.Series(confidence, dtype=pl.Float32),
            "novel": novel,
            "decision": ["review"] * len(ids),
        },
        schema_overrides={"account": pl.String},
    )
