"""Register: log the whole prediction path (raw records to `predict`'s output) as one MLflow
pyfunc model into the workflow's run, register it as a new version of `register.name` in the
Model Registry of the same tracking store, give it the `candidate` alias, and move the
`champion` alias to it only when the shipped candidate is better than the baseline on test (and
than the current champion, when one was tested on the same rows). Writes what happened, where
the model is stored and its size, as JSON and as a page for the report.

Serve the champion with `mlflow models serve -m models:/account-tax@champion --env-manager local`.
"""

import html
import json
import os
import tempfile
from pathlib import Path

import polars as pl

from account_tax import cli
from account_tax.data.serialize import read_labels
from account_tax.evaluation.predict import BATCH_SIZE, PredictSettings, Provenance
from account_tax.io import sha256_file, write_json
from account_tax.settings import EvaluateSettings
from account_tax.tracking.registry import (
    ARTIFACT_PATH,
    RegisterSettings,
    champion_decision,
    evaluated_rows_sha256,
    folder_bytes,
    register_version,
    save_prediction_model,
)
from account_tax.tracking.workflow_run import log_stage, run_client, store_lock
from account_tax.training.model import LABEL_MAP


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--model", type=Path, required=True, help="trained model folder")
    parser.add_argument("--baseline-model", type=Path, required=True, help="baseline pipeline")
    parser.add_argument("--evaluation", type=Path, required=True, help="evaluate's metrics")
    parser.add_argument(
        "--test-predictions", type=Path, required=True, help="evaluate's test predictions"
    )
    parser.add_argument(
        "--test-records", type=Path, required=True, help="raw test records (input example)"
    )
    parser.add_argument("--model-receipt", type=Path, help="the model's upload receipt")
    parser.add_argument("--pyproject", type=Path, required=True, help="the pinned requirements")
    parser.add_argument("--output", type=Path, required=True, help="what was registered (JSON)")
    parser.add_argument("--summary", type=Path, required=True, help="the same, as HTML")
    args = parser.parse_args()
    if args.tracking is None or not args.tracking.is_file():
        parser.error("--tracking: the workflow's MLflow run file is needed to register")
    options = RegisterSettings.of(args.settings["register"])
    evaluate = EvaluateSettings.of(args.settings["evaluate"])
    evaluation = json.loads(args.evaluation.read_text(encoding="utf-8"))
    shipped = evaluation["comparison"]["shipped"]
    provenance = Provenance.of(
        shipped["candidate"], args.model, args.baseline_model, args.model_receipt
    )
    client, run = run_client(args.tracking)
    uri = os.environ.get("MLFLOW_TRACKING_URI") or run["tracking_uri"]
    test_predictions = pl.read_parquet(args.test_predictions)
    tags = {
        "workflow_run_id": run["run_id"],
        **{k: str(v) for k, v in vars(provenance).items() if v is not None},
        "test_split_sha256": evaluated_rows_sha256(test_predictions),
        "label_map_sha256": sha256_file(args.model / LABEL_MAP),
        "auto_threshold": str(shipped["threshold"]),
        "verdict_against_baseline": str(shipped.get("verdict")),
    }
    if args.model_receipt is not None:
        tags["model_receipt_sha256"] = sha256_file(args.model_receipt)
    with tempfile.TemporaryDirectory(prefix="register-") as scratch:
        folder = Path(scratch) / ARTIFACT_PATH
        save_prediction_model(
            folder,
            config=args.settings,
            model_dir=args.model,
            baseline_model=args.baseline_model,
            evaluation=evaluation,
            test_predictions=args.test_predictions,
            test_records=args.test_records,
            provenance=provenance,
            pyproject=args.pyproject,
            top_k=PredictSettings.of(args.settings["predict"]).top_k,
            batch_size=BATCH_SIZE,
        )
        stored_bytes = folder_bytes(folder)
        # One registration at a time: the champion check and the alias move go together.
        with store_lock(uri):
            version = register_version(client, options.name, run["run_id"], folder, tags)
            champion = champion_decision(
                client,
                uri,
                options.name,
                options.champion_alias,
                evaluation,
                test_predictions,
                read_labels(args.model / LABEL_MAP),
                resamples=evaluate.bootstrap_resamples,
                seed=evaluate.seed,
            )
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
    write_json(args.output, record)
    args.summary.write_text(summary_html(record, options.champion_alias), encoding="utf-8")
    cli.log.info(
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
        args.tracking,
        "register",
        {"version": int(version.version), "stored_bytes": stored_bytes},
        tags={
            "model_uri": record["model_uri"],
            "champion_moved": str(champion["moved"]),
            "champion_why": champion["why"],
        },
    )


def summary_html(record: dict, champion_alias: str) -> str:
    moved = "moved to this version" if record["champion"]["moved"] else "not moved"
    return (
        "<html><body><h2>Model Registry</h2>"
        f"<p>Registered <code>{html.escape(record['model_uri'])}</code> "
        f"({record['stored_bytes'] / 1e6:.1f} MB at <code>{html.escape(record['source'])}</code>)"
        f", aliases {html.escape(', '.join(record['aliases']))}.</p>"
        f"<p>{html.escape(champion_alias)}: {moved}: {html.escape(record['champion']['why'])}."
        "</p></body></html>\n"
    )


if __name__ == "__main__":
    cli.run(main)
