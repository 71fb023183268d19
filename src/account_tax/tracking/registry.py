"""Register: the whole prediction path as one MLflow pyfunc model in the Model Registry.

The model takes raw records (the configured columns, as text, the way a CSV holds them) and runs
`predict`'s own code on them: ingest, clean, features, serialize, the candidate evaluate chose,
calibrated top-k, the evidence, the ledger rules its run learned (with `review.rules`), the
auto/review decision and the provenance. Its output has `predict`'s columns
plus `reason`, which is null for predicted rows and says why for rows clean rejects; rows come
back in the order they were sent (`source_row`).

A request is checked before anything is predicted, by the model itself: every required column
present, no column it does not know, every value a string (or null), at least one record. A
request that fails answers 400 with one short JSON message naming the columns (and the row),
never a traceback or a path of the server. MLflow's own input schema is not used for that: its
server coerces and drops what should be refused (a number in a text column, an unknown column).
So the model's signature declares no input schema; the columns, their type and whether each is
required are in the model's metadata (`input_columns`), for clients to read.

Each registration becomes a new version with the `candidate` alias. The `champion` alias moves
to it only when the shipped candidate is better than the baseline on test (the paired bootstrap
of evaluate) and, when a champion tested on the same test split exists, better than that
champion on the same rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import importlib.metadata
import json
import logging
import os
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd
import polars as pl
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    BAD_REQUEST,
    INTERNAL_ERROR,
    RESOURCE_ALREADY_EXISTS,
    RESOURCE_DOES_NOT_EXIST,
    ErrorCode,
)

from account_tax.data.clean import REASON, written_columns
from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.serialize import ID
from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.evaluation.assessment import BASELINE, DECIDING_METRIC, MODEL
from account_tax.evaluation.bootstrap import BETTER, TIE, WORSE, ScoredRows, judge, paired_bootstrap
from account_tax.evaluation.evidence import EVIDENCE_SPACE
from account_tax.evaluation.ledger_rules import LedgerRules
from account_tax.evaluation.predict import (
    BATCH_SIZE,
    Candidate,
    Predictor,
    Provenance,
    load_shipped,
)
from account_tax.evaluation.prediction_parts import PredictSettings
from account_tax.evaluation.runtime_check import checked_onnx_model
from account_tax.evaluation.shipped import ShippedCandidate
from account_tax.evaluation.tables import CONFIDENCE, LABEL, PREDICTED_LABEL, TOP_K_LABELS
from account_tax.io import PACKAGE_PREFIX, refuse_duplicates, sha256_file, write_json
from account_tax.settings import SOURCE_ROW, EvaluateSettings
from account_tax.stage_log import log_stage
from account_tax.tracking.champion import RegisterSettings, current_version
from account_tax.training.training_info import read_training_info
from account_tax.workflow_run import run_client, store_lock

log = logging.getLogger(__name__)

ARTIFACT_PATH = "prediction_model"
"""Where the model lies in the workflow run's artifacts."""
PREDICTION_SPEC = "prediction.json"
TEST_PREDICTIONS = "test_predictions.parquet"
INPUT_EXAMPLE_ROWS = 3
COMPARED = {BETTER: "better than", TIE: "no significant difference from", WORSE: "worse than"}
# The config sections that turn a raw record into the model's text.
RECORD_SECTIONS = ("data", "clean", "features", "serialize")


class RefusedRequest(MlflowException):
    """A request the model answers with an error of its own short message. MLflow's server
    prefixes the whole input to an error's message (`Failed to predict data ...`); the message
    of a refusal keeps the text it was given."""

    def __init__(self, message: str, error_code: int = BAD_REQUEST) -> None:
        super().__init__(message, error_code=error_code)

    @property
    def message(self) -> str:
        return self._own_message

    @message.setter
    def message(self, value: str) -> None:
        if not hasattr(self, "_own_message"):
            self._own_message = value


def input_columns(spec: DataSpec) -> dict[str, dict[str, Any]]:
    """The columns a request carries, all text: every configured role required, the label
    optional."""
    roles = [spec.id, *spec.text, *spec.categorical, *spec.numeric, *spec.date]
    columns = {name: {"type": "string", "required": True} for name in roles if name}
    return columns | {spec.label: {"type": "string", "required": False}}


def check_request(records: Any, columns: dict[str, dict[str, Any]]) -> None:
    """Refuse a request that is not a table of records, with missing, unknown or repeated
    columns, a value that is not text, or no records; the message names the columns, and the
    row (1-based) of a wrong value."""
    if not isinstance(records, pd.DataFrame):
        raise RefusedRequest(
            'send the records as a table: {"dataframe_split": {"columns": [...], "data":'
            ' [[...], ...]}} or {"dataframe_records": [{...}, ...]}'
        )
    given = [str(column) for column in records.columns]
    try:
        refuse_duplicates(given, "the request")
    except DataError as error:
        raise RefusedRequest(str(error)) from None
    missing = [name for name, column in columns.items() if column["required"] and name not in given]
    unknown = [name for name in given if name not in columns]
    problems = []
    if missing:
        problems.append(f"missing column(s) {', '.join(map(repr, missing))}")
    if unknown:
        problems.append(
            f"unknown column(s) {', '.join(map(repr, unknown))} "
            f"(the model takes {', '.join(map(repr, columns))})"
        )
    if problems:
        raise RefusedRequest("; ".join(problems))
    if records.empty:
        raise RefusedRequest("no records")
    for index, column in enumerate(records.columns):
        for row, value in enumerate(records.iloc[:, index], start=1):
            missing_value = pd.api.types.is_scalar(value) and pd.isna(value)
            if not isinstance(value, str) and not missing_value:
                raise RefusedRequest(
                    f"column {str(column)!r}, row {row}: {value!r} is not text "
                    f"({type(value).__name__}); send every value as a JSON string"
                )


class PredictionModel(mlflow.pyfunc.PythonModel):
    """Raw records in, `predict`'s output (and reject reasons) out."""

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        spec = json.loads(Path(context.artifacts["prediction"]).read_text(encoding="utf-8"))
        self.config = spec["config"]
        self.spec = DataSpec.from_config(self.config)
        self.columns = input_columns(self.spec)
        provenance = Provenance(**spec["provenance"])
        baseline = context.artifacts.get("baseline")
        evidence = context.artifacts.get("baseline_evidence")
        onnx_model = context.artifacts.get("onnx")
        rules = context.artifacts.get("rules")
        candidate = Candidate(
            Path(context.artifacts["model"]),
            Path(baseline) if baseline else None,
            ShippedCandidate.from_dict(spec["shipped"]),
            spec["batch_size"],
            Path(evidence) if evidence else None,
            Path(onnx_model) if onnx_model else None,
        )
        self.predictor = Predictor(
            self.spec,
            self.config,
            candidate,
            provenance,
            k=spec["top_k"],
            evidence_k=spec["evidence_k"],
            chunk_rows=spec["chunk_rows"],
            rules=LedgerRules.read(Path(rules), Path(context.artifacts["rules_report"]))
            if rules
            else None,
        )

    def predict(
        self,
        context: mlflow.pyfunc.PythonModelContext,
        model_input: pd.DataFrame,
        params: dict[str, Any] | None = None,
    ) -> pd.DataFrame:
        try:
            check_request(model_input, self.columns)
            # In memory, through the code `predict` runs on each chunk of a file, in chunks of
            # the same size: the same batches, so the same values.
            records = request_records(model_input, self.spec)
            parts = [
                self.predictor.predict(chunk, "the request")
                for chunk in records.iter_slices(self.predictor.chunk_rows)
            ]
            predictions, rejected = (pl.concat(frames) for frames in zip(*parts, strict=True))
        except RefusedRequest:
            raise
        except DataError as error:
            raise RefusedRequest(str(error)) from None
        except Exception:
            log.exception("prediction failed")
            raise RefusedRequest(
                "prediction failed on the server; its log has the details", INTERNAL_ERROR
            ) from None
        return served_frame(predictions, rejected, self.spec).to_pandas()


def request_records(records: pd.DataFrame, spec: DataSpec) -> pl.DataFrame:
    """A request's records as ingest reads them from a CSV file: every value as the text a cell
    would hold, a configured null value (`data.null_values`) missing, and `source_row` counting
    from 1."""
    columns = {
        str(column): [None if pd.isna(value) else str(value) for value in records[column]]
        for column in records.columns
    }
    frame = pl.DataFrame(columns, schema=dict.fromkeys(columns, pl.String))
    missing = list(spec.null_values)
    return frame.with_columns(
        pl.when(pl.col(c).is_in(missing)).then(None).otherwise(pl.col(c)).alias(c) for c in columns
    ).with_row_index(SOURCE_ROW, offset=1)


def served_frame(predictions: pl.DataFrame, rejects: pl.DataFrame, spec: DataSpec) -> pl.DataFrame:
    """Predicted and rejected rows together, in input order; a rejected row has its source row,
    its id and the reason, and nulls in the prediction columns."""
    rejected = rejects.select(
        SOURCE_ROW,
        pl.col(spec.id or SOURCE_ROW).cast(pl.String).alias(ID),
        pl.col(REASON),
    )
    predicted = predictions.with_columns(pl.lit(None, dtype=pl.String).alias(REASON))
    return pl.concat([predicted, rejected], how="diagonal_relaxed").sort(SOURCE_ROW)


def record_config(config: dict[str, Any]) -> dict[str, Any]:
    """The sections that read a raw record, without the training data's location and chart
    (prediction does not check labels against the classes)."""
    chosen = {section: config[section] for section in RECORD_SECTIONS if section in config}
    chosen["data"] = {
        key: value
        for key, value in chosen["data"].items()
        if key not in ("classes", "chart_columns")
    }
    return chosen


def input_example(split_records: Sequence[Path], spec: DataSpec) -> pd.DataFrame:
    """A few records as a request sends them, text in their configured formats: the test
    split's, or where it is empty (split.test_fraction 0) the next split's."""
    frame = next(frame for path in split_records if (frame := pl.read_parquet(path)).height).head(
        INPUT_EXAMPLE_ROWS
    )
    return frame.select(written_columns(frame.schema, spec, list(input_columns(spec)))).to_pandas()


def requirements(pyproject: Path, base_model: str) -> list[str]:
    """The pinned requirements of prediction: the package's own and its `train` extra (from
    pyproject.toml), the full MLflow (for `mlflow models serve`), and the base model's package."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    pins = [*project["dependencies"], *project["optional-dependencies"]["train"]]
    pins.append(f"mlflow=={importlib.metadata.version('mlflow-skinny')}")
    if base_model.startswith(PACKAGE_PREFIX):
        module = base_model.removeprefix(PACKAGE_PREFIX).split("/")[0]
        for distribution in importlib.metadata.packages_distributions().get(module, []):
            pins.append(f"{distribution}=={importlib.metadata.version(distribution)}")
    return pins


def evaluated_rows_sha256(test_predictions: pl.DataFrame) -> str:
    """The test split's identity: its record ids and true labels, in id order."""
    rows = test_predictions.select(ID, LABEL).sort(ID).write_csv()
    return hashlib.sha256(rows.encode()).hexdigest()


def save_prediction_model(
    folder: Path,
    *,
    config: dict[str, Any],
    model_dir: Path,
    baseline_model: Path,
    baseline_evidence: Path,
    shipped: ShippedCandidate,
    test_predictions: Path,
    split_records: Sequence[Path],
    provenance: Provenance,
    pyproject: Path,
    predict: PredictSettings,
    batch_size: int,
    onnx_model: Path | None = None,
    rules: tuple[Path, Path] | None = None,
) -> None:
    """Write the pyfunc model into `folder` (which must not exist); with `onnx_model` (one that
    passed its check) the fine-tuned model is scored in ONNX Runtime, as predict scores it; with
    `rules` (the ledger rules and their replay's report) records are matched against them and a
    trusted rule confirms, as in predict."""
    records = record_config(config)
    spec = DataSpec.from_config(records)
    with tempfile.TemporaryDirectory(prefix="register-") as scratch:
        prediction = Path(scratch) / PREDICTION_SPEC
        prediction.write_text(
            json.dumps(
                {
                    "config": records,
                    "shipped": shipped.to_dict(),
                    "provenance": dataclasses.asdict(provenance),
                    "top_k": predict.top_k,
                    "evidence_k": predict.evidence_k,
                    "chunk_rows": predict.chunk_rows,
                    "batch_size": batch_size,
                },
                indent=1,
            ),
            encoding="utf-8",
        )
        artifacts = {
            "prediction": str(prediction),
            "model": str(model_dir),
            "test_predictions": str(test_predictions),
        }
        if shipped.candidate != MODEL:
            artifacts["baseline"] = str(baseline_model)
        if EVIDENCE_SPACE[shipped.candidate] == BASELINE:
            artifacts["baseline_evidence"] = str(baseline_evidence)
        if onnx_model is not None and shipped.candidate != BASELINE:
            artifacts["onnx"] = str(onnx_model)
        if rules is not None:
            artifacts["rules"], artifacts["rules_report"] = map(str, rules)
        info = read_training_info(model_dir)
        example = input_example(split_records, spec)
        # The output schema from the model's own answer to the example; no input schema: the
        # model checks requests itself (see the module's docstring).
        loaded = PredictionModel()
        context = mlflow.pyfunc.PythonModelContext(artifacts=artifacts, model_config={})
        loaded.load_context(context)
        answer = loaded.predict(context, example)
        mlflow.pyfunc.save_model(
            str(folder),
            python_model=PredictionModel(),  # pickled unloaded: the artifacts load it
            artifacts=artifacts,
            code_paths=[str(Path(__file__).parents[1])],
            signature=mlflow.models.infer_signature(None, answer),
            input_example=example,
            pip_requirements=requirements(pyproject, info["base_model"]),
            metadata={
                "base_model": info["base_model"],
                "candidate": shipped.candidate,
                "labels": len(LabelMap.read(model_dir / LABEL_MAP).labels),
                "input_columns": input_columns(spec),
            },
        )


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def scored(predictions: pl.DataFrame, labels: list[str], threshold: float | None) -> ScoredRows:
    index = {label: i for i, label in enumerate(labels)}
    return ScoredRows(
        predicted=np.array([index.get(label, -1) for label in predictions[PREDICTED_LABEL]]),
        top_k_hit=np.array(
            [
                truth in top
                for truth, top in zip(predictions[LABEL], predictions[TOP_K_LABELS], strict=True)
            ]
        ),
        confidence=predictions[CONFIDENCE].to_numpy(),
        threshold=threshold,
    )


def against_champion(
    ours: pl.DataFrame,
    theirs: pl.DataFrame,
    labels: list[str],
    thresholds: tuple[float | None, float | None],
    *,
    resamples: int,
    seed: int,
) -> dict[str, float]:
    """The paired bootstrap interval of (ours - theirs) in test macro-F1, on the same rows."""
    joined = ours.join(theirs, on=ID, how="inner", suffix="_champion").sort(ID)
    if joined.height != ours.height or joined.height != theirs.height:
        raise ValueError("the champion's test rows differ from this run's")
    # A class the champion predicts that this label map lacks counts as one more (wrong) class.
    index = {label: i for i, label in enumerate(labels)}
    y_true = np.array([index[label] for label in joined[LABEL]])
    champion = joined.select(
        ID,
        LABEL,
        *(pl.col(f"{c}_champion").alias(c) for c in (PREDICTED_LABEL, CONFIDENCE, TOP_K_LABELS)),
    )
    rows = {"ours": scored(joined, labels, thresholds[0])}
    rows["champion"] = scored(champion, labels, thresholds[1])
    rows["champion"].predicted[rows["champion"].predicted < 0] = len(labels)
    bootstrap = paired_bootstrap(y_true, rows, len(labels) + 1, resamples=resamples, seed=seed)
    return bootstrap["difference"]["ours"]["champion"][DECIDING_METRIC]


def tagged_threshold(tags: dict[str, str]) -> float | None:
    """A version's auto-post threshold from its tags: none where evaluate found none (the tag
    reads "None") or where the version has no such tag."""
    text = tags.get("auto_threshold")
    return None if text in (None, "", "None") else float(text)


def champion_decision(
    client,
    tracking_uri: str,
    name: str,
    alias: str,
    shipped: ShippedCandidate,
    ours: pl.DataFrame,
    labels: list[str],
    *,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Whether the new version takes `alias`, and why."""
    if shipped.verdict != BETTER:
        judged = shipped.verdict or "not judged (no test rows, or the baseline itself)"
        return {
            "moved": False,
            "why": f"the shipped {shipped.candidate} is {judged} against the baseline on test",
        }
    current = current_version(client, name, alias)
    if current is None:
        return {"moved": True, "why": "better than the baseline on test; there was no champion"}
    if current.tags.get("test_split_sha256") != evaluated_rows_sha256(ours):
        return {
            "moved": True,
            "why": f"better than the baseline on test; champion version {current.version} was "
            "tested on other rows, so only the baseline compares on this test split",
        }
    theirs = pl.read_parquet(
        mlflow.artifacts.download_artifacts(
            f"{current.source}/artifacts/{TEST_PREDICTIONS}", tracking_uri=tracking_uri
        )
    )
    difference = against_champion(
        ours,
        theirs,
        labels,
        (shipped.threshold, tagged_threshold(current.tags)),
        resamples=resamples,
        seed=seed,
    )
    verdict = judge(difference)
    return {
        "moved": verdict == BETTER,
        "why": f"{COMPARED[verdict]} champion version {current.version} on the same test rows "
        f"(macro-F1 difference {difference['value']:+.3f}, 95 % interval "
        f"[{difference['low']:+.3f}, {difference['high']:+.3f}])",
        "difference_from_champion": difference,
    }


def register_version(client, name: str, run_id: str, folder: Path, tags: dict[str, str]):
    """Log the saved model into the run's artifacts (its one stored copy) and register it."""
    client.log_artifacts(run_id, str(folder), ARTIFACT_PATH)
    source = f"{client.get_run(run_id).info.artifact_uri}/{ARTIFACT_PATH}"
    try:
        client.get_registered_model(name)
    except MlflowException as error:
        if error.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            raise
        try:
            client.create_registered_model(
                name, description="account-tax: raw accounting records to account suggestions"
            )
        except MlflowException as raced:
            # Another run's registration on the same server created it meanwhile.
            if raced.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
    return client.create_model_version(name, source, run_id=run_id, tags=tags)


@dataclass(frozen=True)
class RegisterPaths:
    """Register's inputs (the model's upload receipt only where uploads are on, the ledger
    rules and their report only with `review.rules`) and outputs."""

    model: Path
    baseline_model: Path
    baseline_evidence: Path
    evaluation: Path
    test_predictions: Path
    split_records: tuple[Path, ...]
    model_receipt: Path | None
    onnx: Path | None
    rules: Path | None
    rules_report: Path | None
    pyproject: Path
    output: Path
    summary: Path


def ledger_rules_tags(rules: Path | None, report: Path | None) -> dict[str, str]:
    """What a version says of its ledger rules: none, or how many, whether they may post, and
    the rules file's sha256, so the registry shows what a served suggestion can rest on."""
    if rules is None or report is None:
        return {"ledger_rules": "none"}
    read = LedgerRules.read(rules, report)
    return {
        "ledger_rules": "trusted" if read.trusted else "not trusted",
        "ledger_rules_count": str(read.rules.height),
        "ledger_rules_sha256": sha256_file(rules),
    }


def register(paths: RegisterPaths, settings: dict[str, Any], tracking: Path) -> dict[str, Any]:
    """Save the prediction path as a pyfunc model, log it into the workflow's run (`tracking`,
    its run file) and register it as a new version with the candidate alias; move the champion
    alias as `champion_decision` says. Writes and returns what happened."""
    options = RegisterSettings.of(settings["register"])
    evaluate = EvaluateSettings.of(settings["evaluate"])
    shipped, provenance = load_shipped(
        paths.evaluation, paths.model, paths.baseline_model, paths.model_receipt
    )
    client, run = run_client(tracking)
    uri = os.environ.get("MLFLOW_TRACKING_URI") or run["tracking_uri"]
    test_predictions = pl.read_parquet(paths.test_predictions)
    tags = {
        "workflow_run_id": run["run_id"],
        **{k: str(v) for k, v in vars(provenance).items() if v is not None},
        "test_split_sha256": evaluated_rows_sha256(test_predictions),
        "label_map_sha256": sha256_file(paths.model / LABEL_MAP),
        "auto_threshold": str(shipped.threshold),
        "verdict_against_baseline": str(shipped.verdict),
    }
    if paths.model_receipt is not None:
        tags["model_receipt_sha256"] = sha256_file(paths.model_receipt)
    tags |= ledger_rules_tags(paths.rules, paths.rules_report)
    with tempfile.TemporaryDirectory(prefix="register-") as scratch:
        folder = Path(scratch) / ARTIFACT_PATH
        save_prediction_model(
            folder,
            config=settings,
            model_dir=paths.model,
            baseline_model=paths.baseline_model,
            baseline_evidence=paths.baseline_evidence,
            shipped=shipped,
            test_predictions=paths.test_predictions,
            split_records=paths.split_records,
            provenance=provenance,
            pyproject=paths.pyproject,
            predict=PredictSettings.of(settings["predict"]),
            batch_size=BATCH_SIZE,
            onnx_model=checked_onnx_model(paths.onnx) if paths.onnx else None,
            rules=(paths.rules, paths.rules_report) if paths.rules else None,
        )
        stored_bytes = folder_bytes(folder)
        # One registration at a time: the champion check and the alias move go together. The
        # check comes first, so that one that fails leaves no version without an alias behind.
        with store_lock(uri):
            champion = champion_decision(
                client,
                uri,
                options.name,
                options.champion_alias,
                shipped,
                test_predictions,
                LabelMap.read(paths.model / LABEL_MAP).labels,
                resamples=evaluate.bootstrap_resamples,
                seed=evaluate.seed,
            )
            version = register_version(client, options.name, run["run_id"], folder, tags)
            client.set_registered_model_alias(
                options.name, options.candidate_alias, version.version
            )
            if champion["moved"]:
                client.set_registered_model_alias(
                    options.name, options.champion_alias, version.version
                )
    record = {
        "name": options.name,
        "version": version.version,
        "model_uri": f"models:/{options.name}/{version.version}",
        "source": version.source,
        "stored_bytes": stored_bytes,
        "aliases": {options.candidate_alias: version.version},
        "champion": champion,
        "tags": tags,
    }
    if champion["moved"]:
        record["aliases"][options.champion_alias] = version.version
    write_json(paths.output, record)
    paths.summary.write_text(summary_html(record, options.champion_alias), encoding="utf-8")
    log.info(
        "registered %s version %s (%.1f MB at %s); %s %s: %s",
        options.name,
        version.version,
        stored_bytes / 1e6,
        version.source,
        options.champion_alias,
        "moved to it" if champion["moved"] else "not moved",
        champion["why"],
    )
    log_stage(
        tracking,
        "register",
        {"version": int(version.version), "stored_bytes": stored_bytes},
        tags={
            "model_uri": record["model_uri"],
            "champion_moved": str(champion["moved"]),
            "champion_why": champion["why"],
        },
    )
    return record


def rules_sentence(tags: dict[str, str]) -> str:
    if tags["ledger_rules"] == "none":
        return "none"
    return f"{tags['ledger_rules_count']} learned, {tags['ledger_rules']}"


def summary_html(record: dict, champion_alias: str) -> str:
    moved = "moved to this version" if record["champion"]["moved"] else "not moved"
    return (
        "<html><body><h2>Model Registry</h2>"
        f"<p>Registered <code>{html.escape(record['model_uri'])}</code> "
        f"({record['stored_bytes'] / 1e6:.1f} MB at <code>{html.escape(record['source'])}</code>)"
        f", aliases {html.escape(', '.join(record['aliases']))}.</p>"
        f"<p>{html.escape(champion_alias)}: {moved}: {html.escape(record['champion']['why'])}."
        f"</p><p>Ledger rules: {html.escape(rules_sentence(record['tags']))}.</p></body></html>\n"
    )
