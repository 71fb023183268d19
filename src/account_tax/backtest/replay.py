"""The backtest: the workflow replayed period by period, as a finance team lives it. Before
period k the ledger holds the history and what earlier periods posted; the whole workflow trains
on it and predicts k's records; those above the auto-post threshold are posted with the suggested
account (right or wrong), the others go to review, where a person books the true account. With
corrections the review files flow back as `data.corrections`; with a warm start each period's
training begins from the period before's model."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml

from account_tax.backtest.periods import PERIOD, BacktestSettings, Variant, replayed_periods
from account_tax.cpu_time import children_cpu_seconds
from account_tax.data.clean import written_columns
from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.serialize import TEXT
from account_tax.data.spec import NOVEL, DataSpec
from account_tax.errors import DataError
from account_tax.evaluation.assessment import BASELINE, ENSEMBLE, MODEL
from account_tax.evaluation.predict import AUTO_THRESHOLD, Candidate, check_record_columns
from account_tax.evaluation.review import (
    AUTO,
    DECISION,
    DECISION_REASON,
    LEDGER_RULE,
    decisions,
    precision_coverage_curve,
)
from account_tax.evaluation.shipped import ShippedCandidate
from account_tax.evaluation.tables import CONFIDENCE, PREDICTED_LABEL
from account_tax.io import PACKAGE_PREFIX
from account_tax.settings import SOURCE_ROW
from account_tax.training.settings import EXTENSIONS_DIR

log = logging.getLogger(__name__)

NEW_RECORDS = "period"
"""The name of each period's records in its run's `predict.inputs`."""
EVALUATION = "results/evaluate/metrics.json"
TARGETS = (EVALUATION, f"results/predict/{NEW_RECORDS}.parquet")
TRAINED_MODEL = "results/train/segment-{segments}/model"
BASELINE_MODEL = "results/baseline/model.joblib"
BASELINE_EVIDENCE = "results/baseline/evidence"
# The table's names of evaluate's candidates.
CANDIDATES = {"model": MODEL, "baseline": BASELINE, "ensemble": ENSEMBLE}
COLUMNS = (
    PERIOD,
    "rows",
    "auto_rows",
    "auto_share",
    "posted_precision",
    "rule_auto_rows",
    "hindsight_auto_share",
    "review_rows",
    "novel_rows",
    "novel_held_back",
    "novel_held_back_right",
    "new_accounts",
    "posted_wrong_new_accounts",
    "shipped",
    "corrections_applied",
    "corrections_added",
    "corrections_rejected",
    "track_record_rows",
    "supported_target",
    *(
        f"{column}_{figure}"
        for column in CANDIDATES
        for figure in (
            "auto_share",
            "posted_precision",
            "macro_f1",
            "macro_f1_low",
            "macro_f1_high",
        )
    ),
    "train_cpu_minutes",
    "cpu_minutes",
    "wall_minutes",
)


def write_records(frame: pl.DataFrame, spec: DataSpec, path: Path) -> None:
    """Records as the ledger's CSV: its columns, as read, label included; a date or number that a
    Parquet or Excel ledger typed in the config's formats, as the period's CSV is read with them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = written_columns(frame.schema, spec, spec.columns)
    frame.select(written).write_csv(path, quote_style="non_numeric")


def period_config(
    config: dict[str, Any],
    ledger: Path,
    new_records: Path,
    corrections: list[Path],
    init_model: Path | None,
) -> dict[str, Any]:
    """The workflow's config for one period's run: its ledger and corrections, its records to
    predict, training from `init_model` when given, and no upload or registry."""
    period = copy.deepcopy(config)
    period.pop("backtest", None)
    data = period["data"]
    nulls = sorted({*data["null_values"], ""})
    data.update(path=str(ledger), format="csv", csv_separator=",", null_values=nulls)
    # The period's run works in a folder of its own: files named relative to this one.
    if isinstance(data["classes"], str):
        data["classes"] = str(Path(data["classes"]).resolve())
    if not period["train"]["model"].startswith(PACKAGE_PREFIX):
        period["train"]["model"] = str(Path(period["train"]["model"]).resolve())
    data["corrections"] = [str(path) for path in corrections]
    period["predict"] = {**period.get("predict", {}), "inputs": {NEW_RECORDS: str(new_records)}}
    period["train"] = {**period["train"], "init_from": str(init_model) if init_model else "none"}
    period["upload"] = {**period.get("upload", {}), "enabled": False}
    period["register"] = {**period.get("register", {}), "enabled": False}
    return period


@dataclass(frozen=True)
class Spent:
    """What a period's workflow run took: wall seconds, and CPU seconds of Snakemake and every
    job it ran, threads and finished children included, as the kernel counts them."""

    wall_seconds: float
    cpu_seconds: float


def run_workflow(snakefile: Path, workdir: Path, config: dict[str, Any], cores: int) -> Spent:
    """The whole workflow on `config` in `workdir` up to evaluation and the period's predictions;
    what it took. Its log is workdir/snakemake.log."""
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "snakemake",
        *TARGETS,
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--cores",
        str(cores),
        "--configfile",
        str(config_path),
    ]
    # Compiled once for the backtest, not once per period's folder.
    extensions = os.environ.get("TORCH_EXTENSIONS_DIR") or str(EXTENSIONS_DIR.resolve())
    started, cpu_before = time.perf_counter(), children_cpu_seconds()
    with (workdir / "snakemake.log").open("w", encoding="utf-8") as out:
        done = subprocess.run(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ | {"TORCH_EXTENSIONS_DIR": extensions},
        )
    if done.returncode != 0:
        raise DataError(
            f"the workflow of period {workdir.name} failed ({done.returncode}):"
            f" see {workdir}/snakemake.log"
        )
    return Spent(time.perf_counter() - started, children_cpu_seconds() - cpu_before)


def trained_model(workdir: Path) -> Path:
    """The model a period's run trained: its last segment's."""
    config = yaml.safe_load((workdir / "config.yaml").read_text("utf-8"))
    return workdir / TRAINED_MODEL.format(segments=config["train"]["segments"])


def train_cpu_minutes(workdir: Path) -> float:
    """CPU time of the period's train jobs (every segment), as each measured its own."""
    metrics = sorted(workdir.glob("results/train/segment-*/metrics.json"))
    return sum(json.loads(path.read_text("utf-8"))["cpu_seconds"] for path in metrics) / 60


def trained_on(workdir: Path) -> set[str]:
    """The accounts with records in what the period's run trained on (ledger and corrections)."""
    return LabelMap.read(workdir / "results/features" / LABEL_MAP).with_samples()


def candidate_reports(evaluation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each candidate's report in evaluate's metrics.json, by candidate name: the fine-tuned
    model's is the file's top level."""
    return {MODEL: evaluation, BASELINE: evaluation[BASELINE], ENSEMBLE: evaluation[ENSEMBLE]}


def supported_target(evaluation: dict[str, Any]) -> float | None:
    """The highest target precision that the shipped candidate's validation rows (with the
    track record) supported: where it is below the target, nothing could be posted. None without
    such rows (an empty validation split and no track record)."""
    shipped = ShippedCandidate.from_dict(evaluation["comparison"]["shipped"])
    supported = candidate_reports(evaluation)[shipped.candidate]["review"][
        "highest_supported_target"
    ]
    return None if supported is None else supported["target_precision"]


def candidate_decisions(
    workdir: Path, evaluation: dict[str, Any], predictions: pl.DataFrame, spec: DataSpec
) -> dict[str, float | None]:
    """Each candidate's decisions on the period's records as if it had shipped, at its own
    auto-post and novelty thresholds from validation: the share it would post and how often it
    would be right. The baseline is refitted every period, as the model is trained."""
    shipped = ShippedCandidate.from_dict(evaluation["comparison"]["shipped"])
    reports = candidate_reports(evaluation)
    texts = predictions[TEXT].to_list()
    truth = predictions[spec.label].to_numpy()
    figures: dict[str, float | None] = {}
    for column, name in CANDIDATES.items():
        threshold = reports[name]["review"]["threshold"]
        as_shipped = dataclasses.replace(
            shipped,
            candidate=name,
            threshold=threshold,
            novelty_threshold=reports[name]["novelty"]["threshold"],
        )
        candidate = Candidate(
            trained_model(workdir),
            workdir / BASELINE_MODEL,
            as_shipped,
            baseline_evidence=workdir / BASELINE_EVIDENCE,
        )
        scored = candidate.score(texts)
        ids = scored.probabilities.argmax(axis=1)
        predicted = np.asarray(candidate.labels)[ids]
        confidence = scored.probabilities.max(axis=1).astype(np.float32)
        novel = next(c for c in candidate.evidence(scored, ids, 1) if c.name == NOVEL)
        posted = decisions(confidence, threshold, novel.to_numpy()) == AUTO
        figures[f"{column}_auto_share"] = float(posted.mean())
        figures[f"{column}_posted_precision"] = (
            float((predicted[posted] == truth[posted]).mean()) if posted.any() else None
        )
    return figures


def wrong_posts_of_new_accounts(predictions: pl.DataFrame, label: str, seen: set[str]) -> int:
    """Posted records booked to an account with no record in what the model trained on, and
    posted to another: a model trained on the history rarely gets them right (only through an
    account's name, for accounts of the chart without records), so holding them back, as the
    novelty rule does, is what avoids them."""
    return predictions.filter(
        (pl.col(DECISION) == AUTO)
        & (pl.col(PREDICTED_LABEL) != pl.col(label))
        & ~pl.col(label).is_in(sorted(seen))
    ).height


def hindsight_auto_share(predictions: pl.DataFrame, label: str, target_precision: float) -> float:
    """The share of the period's records that the best threshold in hindsight would have posted
    with its posts right at least `target_precision` of the time (novel records held back, as
    shipped): what the candidate's ranking of the period's records allows, without the
    uncertainty of a threshold fitted on a validation split."""
    eligible = predictions.filter(~pl.col(NOVEL))
    if eligible.is_empty():
        return 0.0
    _, rows, precision, _ = precision_coverage_curve(
        eligible[CONFIDENCE].to_numpy(), (eligible[PREDICTED_LABEL] == eligible[label]).to_numpy()
    )
    # A tolerance, so that 49 of 50 right meets 0.98 whatever the rounding of the division.
    meets = precision >= target_precision - 1e-9
    return float(rows[meets].max()) / predictions.height if meets.any() else 0.0


def macro_f1_figures(evaluation: dict[str, Any]) -> dict[str, float | None]:
    """Each candidate's test macro-F1 and its interval; None where the period's test split is
    empty (evaluate then has no intervals and gives no verdict)."""
    intervals = evaluation["comparison"].get("bootstrap", {}).get("models")
    return {
        f"{column}_macro_f1{end}": intervals[name]["macro_f1"][key] if intervals else None
        for column, name in CANDIDATES.items()
        for end, key in (("", "value"), ("_low", "low"), ("_high", "high"))
    }


def score_period(
    period: str,
    records: pl.DataFrame,
    predictions: pl.DataFrame,
    spec: DataSpec,
    seen: set[str],
    workdir: Path,
    spent: Spent,
) -> dict[str, Any]:
    """The period's figures: every record predicted, posted or left to review (checked), the
    share posted and how often a posted account was right, the posts a ledger rule made, the
    novel records and those the novelty rule kept from being posted (and how many of them the
    model had right), the accounts new this period and the wrong posts of their records, and the
    share the best threshold in hindsight would have posted."""
    if predictions.height != records.height:
        raise DataError(
            f"{workdir}: {records.height} records in the period, {predictions.height} predicted"
            " (see its results/predict/*.rejects.parquet)"
        )
    auto = predictions.filter(pl.col(DECISION) == AUTO)
    review = predictions.height - auto.height
    right = auto.filter(pl.col(PREDICTED_LABEL) == pl.col(spec.label)).height
    by_rule = auto.filter(pl.col(DECISION_REASON) == LEDGER_RULE).height
    # What the novelty rule held back: the novel records that the threshold alone would post.
    held = predictions.filter(pl.col(NOVEL) & (pl.col(CONFIDENCE) >= pl.col(AUTO_THRESHOLD)))
    held_right = held.filter(pl.col(PREDICTED_LABEL) == pl.col(spec.label)).height
    evaluation = json.loads((workdir / EVALUATION).read_text("utf-8"))
    counts_path = workdir / "results/correct/counts.json"
    counts = json.loads(counts_path.read_text(encoding="utf-8")) if counts_path.exists() else {}
    return {
        PERIOD: period,
        "rows": predictions.height,
        "auto_rows": auto.height,
        "auto_share": auto.height / predictions.height,
        "posted_precision": right / auto.height if auto.height else None,
        "rule_auto_rows": by_rule,
        "hindsight_auto_share": hindsight_auto_share(
            predictions, spec.label, evaluation["review"]["target_precision"]
        ),
        "review_rows": review,
        "novel_rows": predictions[NOVEL].sum(),
        "novel_held_back": held.height,
        "novel_held_back_right": held_right,
        "new_accounts": len(set(records[spec.label].to_list()) - seen),
        "posted_wrong_new_accounts": wrong_posts_of_new_accounts(predictions, spec.label, seen),
        "shipped": ShippedCandidate.from_dict(evaluation["comparison"]["shipped"]).candidate,
        "corrections_applied": counts.get("applied", 0),
        "corrections_added": counts.get("added", 0),
        "corrections_rejected": counts.get("rejected", 0),
        "track_record_rows": evaluation["review"]["track_record"]["rows"],
        "supported_target": supported_target(evaluation),
        **macro_f1_figures(evaluation),
        **candidate_decisions(workdir, evaluation, predictions, spec),
        "train_cpu_minutes": train_cpu_minutes(workdir),
        "cpu_minutes": spent.cpu_seconds / 60,
        "wall_minutes": spent.wall_seconds / 60,
    }


def posted_records(new: pl.DataFrame, predictions: pl.DataFrame, label: str) -> pl.DataFrame:
    """The period's records (`new`, as written to new.csv) that were posted, each with the
    account suggested as its `label`. Matched by their row in new.csv (the predictions'
    `source_row`): the predictions' ids are as clean wrote them, trimmed."""
    posted = predictions.filter(pl.col(DECISION) == AUTO).select(
        pl.col(SOURCE_ROW).cast(pl.Int64).alias("_row"), pl.col(PREDICTED_LABEL).alias("_posted")
    )
    return (
        new.with_row_index("_row", offset=1)
        .with_columns(pl.col("_row").cast(pl.Int64))
        .join(posted, on="_row", how="inner", maintain_order="left")
        .with_columns(pl.col("_posted").alias(label))
        .select(new.columns)
    )


def replay(
    *,
    config: dict[str, Any],
    records: pl.DataFrame,
    settings: BacktestSettings,
    variant: Variant,
    snakefile: Path,
    folder: Path,
    cores: int,
) -> pl.DataFrame:
    """Run the loop over the replayed periods in `folder` (one workflow folder per period) and
    return one row of figures per period."""
    spec = DataSpec.from_config(config)
    # Every period predicts, and its reviewed rows come back as records.
    check_record_columns(spec)
    periods = replayed_periods(records, settings)
    ledger = records.filter(pl.col(PERIOD) < periods[0])
    corrections: list[Path] = []
    init_model = None
    rows = []
    for index, period in enumerate(periods, 1):
        workdir = (folder / f"{index:02d}-{period}").resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        new = records.filter(pl.col(PERIOD) == period)
        write_records(ledger, spec, workdir / "ledger.csv")
        write_records(new, spec, workdir / "new.csv")
        run_config = period_config(
            config, workdir / "ledger.csv", workdir / "new.csv", corrections, init_model
        )
        log.info("backtest %s: %d ledger rows, %d to predict", period, ledger.height, new.height)
        spent = run_workflow(snakefile, workdir, run_config, cores)
        predictions = pl.read_parquet(workdir / f"results/predict/{NEW_RECORDS}.parquet")
        rows.append(
            score_period(period, new, predictions, spec, trained_on(workdir), workdir, spent)
        )
        # What the ledger holds after the period: the posted records, with the suggested
        # account; the reviewed ones come back through their review file, if at all.
        ledger = pl.concat([ledger, posted_records(new, predictions, spec.label)])
        if variant.corrections:
            corrections.append(workdir / f"results/predict/{NEW_RECORDS}.review.parquet")
        if variant.warm_start:
            init_model = trained_model(workdir)
    # A share may be None in every period (nothing posted): still a float column.
    floats = {column: pl.Float64 for column in COLUMNS if column.endswith("precision")}
    return pl.DataFrame(rows, schema_overrides=floats).select(COLUMNS)
