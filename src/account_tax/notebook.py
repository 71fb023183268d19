"""A stage's outputs and the MLflow runs, for a notebook: `account_tax.load("split", "test")`,
`account_tax.load("evaluate")`, `account_tax.load("train", "model")`, `account_tax.runs()`.

Outputs are found by the workflow's layout, `results/<stage>/<part>` with the file's own suffix,
so a new output is loadable without a change here. A stage that runs in segments (train) is read
from its last segment's folder, `results/<stage>/segment-<s>/`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import polars as pl

from account_tax.errors import DataError

RESULTS = "results"
SUFFIXES = (".parquet", ".json", ".jsonl", ".tsv")
# What `load(stage)` gives without a part, in this order of preference.
DEFAULT_PARTS = ("records", "metrics", "model")
KEY_METRICS = (
    "evaluate/test_macro_f1",
    "evaluate/baseline_test_macro_f1",
    "evaluate/macro_f1_difference",
    "evaluate/test_accuracy",
    "train/validation_macro_f1",
)


def stage_folder(stage: str, workdir: Path | str = ".") -> Path:
    """A stage's output folder; for a stage run in segments, its last segment's."""
    folder = Path(workdir) / RESULTS / stage
    if not folder.is_dir():
        raise DataError(f"{folder}: no outputs of stage '{stage}' (has the workflow run it?)")
    segments = [p for p in folder.glob("segment-*") if p.name.removeprefix("segment-").isdigit()]
    if segments:
        return max(segments, key=lambda p: int(p.name.removeprefix("segment-")))
    return folder


def parts(stage: str, workdir: Path | str = ".") -> list[str]:
    """The loadable parts of a stage's output folder."""
    folder = stage_folder(stage, workdir)
    names = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and path.name == "model":
            names.append(path.name)
        elif path.suffix in SUFFIXES:
            names.append(path.name.removesuffix(path.suffix))
    return names


def load(stage: str, part: str | None = None, workdir: Path | str = ".") -> Any:
    """A stage's output: a Parquet or TSV file as a polars DataFrame, JSON as a dict, JSON lines
    as a DataFrame, a trained model folder as a classifier whose `probabilities(texts)` gives
    calibrated class probabilities (`labels` names the columns)."""
    available = parts(stage, workdir)
    if part is None:
        preferred = [name for name in DEFAULT_PARTS if name in available]
        if preferred:
            part = preferred[0]
        elif len(available) == 1:
            part = available[0]
        else:
            raise DataError(f"stage '{stage}' has several outputs; name one of {available}")
    if part not in available:
        raise DataError(f"stage '{stage}' has no output '{part}'; it has {available}")
    folder = stage_folder(stage, workdir)
    if part == "model" and (folder / "model").is_dir():
        return classifier(folder / "model")
    path = next(
        folder / f"{part}{suffix}" for suffix in SUFFIXES if (folder / f"{part}{suffix}").is_file()
    )
    if path.suffix == ".parquet":
        return pl.read_parquet(path)
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    if path.suffix == ".jsonl":
        return pl.read_ndjson(path)
    return pl.read_csv(path, separator="\t")


def classifier(model_dir: Path):
    """The fine-tuned model alone, loaded once, temperature-calibrated."""
    from account_tax.evaluation.assessment import MODEL
    from account_tax.evaluation.predict import Candidate
    from account_tax.evaluation.shipped import ShippedCandidate

    return Candidate(model_dir, None, ShippedCandidate.from_dict({"candidate": MODEL}))


def runs(workdir: Path | str = ".", experiment: str = "account-tax") -> pl.DataFrame:
    """The experiment's workflow runs, newest first, with their key metrics."""
    from mlflow import MlflowClient

    database = Path(workdir) / RESULTS / "tracking" / "mlflow.db"
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri is None:
        if not database.is_file():
            raise DataError(f"{database}: no MLflow store (has the workflow run here?)")
        uri = f"sqlite:///{database.resolve()}"
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise DataError(f"no MLflow experiment '{experiment}' in {uri}")
    rows = []
    for run in client.search_runs([found.experiment_id], order_by=["attributes.start_time DESC"]):
        rows.append(
            {
                "run_id": run.info.run_id,
                "run_name": run.info.run_name,
                "status": run.info.status,
                "started": run.info.start_time,
                **{name: run.data.metrics.get(name) for name in KEY_METRICS},
            }
        )
    schema = {"run_id": pl.String, "run_name": pl.String, "status": pl.String, "started": pl.Int64}
    frame = pl.DataFrame(rows, schema=schema | dict.fromkeys(KEY_METRICS, pl.Float64))
    return frame.with_columns(pl.from_epoch("started", time_unit="ms"))
