"""Prediction throughput: the workflow's `predict` against a plain `transformers`
text-classification pipeline on the same trained model and the same rows, in one run.

    make run                                      # once: the trained model, baseline, evaluation
    python bench/predict.py                       # 10,000 and 100,000 rows, 3 and 1 repeats
    python bench/predict.py --rows 10000 --repeats 3 --threads 2

Rows: the bundled data's ingested records (results/ingest/records.parquet, labels dropped) repeated
to each size, each copy with its own id, written once as the input file.

Sides, each run in its own subprocess, one after the other:

* no_evidence: ours without the evidence (no nearest-record search, no n-grams, nothing novel),
  to measure what showing the evidence costs;
* ours: `account_tax.evaluation.predict.predict_records`, what the `predict` rule runs, on the raw
  records: ingest, clean, features and serialize, the model loaded once (bf16 where the CPU has it),
  texts tokenised once, batches of similar length in chunks of rows, calibrated top-k, the decision,
  provenance, and the three Parquet files written;
* pipeline: `transformers.pipeline("text-classification", top_k=k)` on the same model loaded as a
  user would (float32), with the same batch size, truncation and max length, over the serialized
  texts of the same rows, made before its clock starts (the preprocessing is not counted on its
  side), and its top-k written to Parquet. The pipeline needs a `PreTrainedModel`-like object, so
  the classifier is wrapped in a module that gives it `device`, `dtype` and `config`.

Both clocks start before the model is loaded and stop when the output is written. Peak memory is
the worker process's own high-water mark (`VmHWM`): it should stay flat as rows grow on ours,
which reads, cleans, scores and writes the rows a chunk (`predict.chunk_rows`) at a time.

`--candidate` makes ours predict with another candidate than the one evaluate shipped (the
baseline scores about three times faster: it shows the memory at a million rows in a quarter of
the time); `--runtime` scores the fine-tuned model in ONNX Runtime (`predict.runtime`; exported
before the clock starts, not checked: see bench/onnx_runtime.py for the check).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import polars as pl
from peak_memory import own_peak_rss_mb

REPO = Path(__file__).resolve().parents[1]
SIDES = ("ours", "no_evidence", "pipeline")
TARGET = 2.0
"""ours / pipeline rows per second, from the issue."""
EVIDENCE_TARGET = 0.8
"""ours / no_evidence rows per second: what showing the evidence may cost."""


def config(config_file: Path) -> dict[str, Any]:
    """The workflow's config with the schema's defaults filled in, as the rules get it."""
    from account_tax.settings import load_settings

    return load_settings(str(config_file))


def write_rows(records: Path, rows: int, out: Path) -> None:
    """The ingested records without labels, repeated to `rows`, each copy's id made unique."""
    source = pl.read_parquet(records).drop("source_row", "label")
    copies = -(-rows // source.height)
    frame = pl.concat(
        [source.with_columns(pl.col("concept") + f"-{copy}") for copy in range(copies)]
    ).head(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(out)


def run_ours(spec: dict[str, Any], scratch: Path, evidence: bool = True) -> dict[str, Any]:
    import dataclasses

    from account_tax.data.spec import DataSpec
    from account_tax.evaluation.predict import (
        Candidate,
        Predictor,
        Provenance,
        predict_records,
    )
    from account_tax.evaluation.prediction_parts import PredictPaths
    from account_tax.evaluation.shipped import read_shipped
    from account_tax.notebook import stage_folder

    class WithoutEvidence(Candidate):
        """predict with no search and no n-grams: every evidence column empty."""

        def evidence(self, scored, predicted, k):
            return super().evidence(dataclasses.replace(scored, features=None), predicted, 0)

    work = Path(spec["workdir"])
    settings = config(Path(spec["config"]))
    shipped = read_shipped(work / "results/evaluate/metrics.json")
    if not evidence:
        shipped = dataclasses.replace(shipped, novelty_threshold=None)
    if spec["candidate"]:
        shipped = dataclasses.replace(shipped, candidate=spec["candidate"])
    model = stage_folder("train", work) / "model"
    baseline = work / "results/baseline/model.joblib"
    onnx_model = None
    if spec["runtime"] != "torch":
        from account_tax.training.onnx_model import export_onnx

        onnx_model = scratch / "model.onnx"
        export_onnx(model, onnx_model, spec["runtime"])  # once, before the clock starts
    started = time.perf_counter()
    provenance = Provenance.of(shipped.candidate, model, baseline, None)
    paths = PredictPaths(
        scratch / "out.parquet", scratch / "rejects.parquet", scratch / "r.parquet"
    )
    predictor = Predictor(
        DataSpec.from_config(settings),
        settings,
        (Candidate if evidence else WithoutEvidence)(
            model,
            baseline,
            shipped,
            spec["batch_size"],
            work / "results/baseline/evidence",
            onnx_model,
        ),
        provenance,
        k=spec["top_k"],
        evidence_k=settings["predict"]["evidence_k"],
        chunk_rows=settings["predict"]["chunk_rows"],
    )
    counts = predict_records(Path(spec["input"]), predictor, paths)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "rows": counts["predicted"],
        "counts": counts,
        "candidate": shipped.candidate,
    }


def run_pipeline(spec: dict[str, Any], scratch: Path) -> dict[str, Any]:
    import torch
    from transformers import pipeline

    from account_tax.data.ingest import ingest
    from account_tax.data.serialize import TEXT
    from account_tax.data.spec import DataSpec
    from account_tax.evaluation.predict import Predictor
    from account_tax.notebook import stage_folder
    from account_tax.training.inference import load_classifier
    from account_tax.training.training_info import read_training_info

    work = Path(spec["workdir"])
    settings = config(Path(spec["config"]))
    records = scratch / "records.parquet"
    ingest(DataSpec.from_config(settings), records, Path(spec["input"]), require_label=False)
    # The texts `predict` scores (no candidate is needed to serialize).
    predictor = Predictor(
        DataSpec.from_config(settings), settings, None, None, k=1, evidence_k=1, chunk_rows=1
    )
    texts = predictor.serialized(pl.read_parquet(records), str(records))[0][TEXT].to_list()
    model_dir = stage_folder("train", work) / "model"
    max_length = read_training_info(model_dir)["settings"]["max_length"]

    class PipelineModel(torch.nn.Module):
        """The classifier with the attributes the pipeline reads from a PreTrainedModel."""

        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model, self.config = model, model.config

        device = property(lambda self: next(self.model.parameters()).device)
        dtype = property(lambda self: next(self.model.parameters()).dtype)

        def can_generate(self) -> bool:
            return False

        def forward(self, input_ids, attention_mask, **unused):
            return self.model(input_ids=input_ids, attention_mask=attention_mask)

    started = time.perf_counter()
    model, tokenizer, _ = load_classifier(model_dir, dtype=torch.float32)
    classify = pipeline(
        "text-classification",
        model=PipelineModel(model),
        tokenizer=tokenizer,
        device="cpu",
        top_k=spec["top_k"],
    )
    out = classify(texts, batch_size=spec["batch_size"], truncation=True, max_length=max_length)
    pl.DataFrame(
        {
            "top_k_labels": [[r["label"] for r in row] for row in out],
            "top_k_probabilities": [[r["score"] for r in row] for row in out],
        }
    ).write_parquet(scratch / "out.parquet")
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "rows": len(out)}


def worker(side: str, spec: dict[str, Any], result: Path) -> None:
    import torch

    torch.set_num_threads(spec["threads"])
    with tempfile.TemporaryDirectory(prefix=f"predict-{side}-") as tmp:
        if side == "pipeline":
            out = run_pipeline(spec, Path(tmp))
        else:
            out = run_ours(spec, Path(tmp), evidence=side == "ours")
    out["peak_rss_mb"] = own_peak_rss_mb()
    out["torch_threads"] = torch.get_num_threads()
    result.write_text(json.dumps(out), encoding="utf-8")


def run_side(side: str, spec: dict[str, Any], logs: Path, tag: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(spec["threads"]),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "POLARS_MAX_THREADS": str(spec["threads"]),
    }
    result = logs / f"{tag}.json"
    command = [sys.executable, __file__, "--worker", side, "--spec", json.dumps(spec)]
    command += ["--result", str(result)]
    with (logs / f"{tag}.log").open("w") as log:
        done = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{tag} failed:\n{(logs / f'{tag}.log').read_text()[-4000:]}")
    return json.loads(result.read_text())


def machine() -> dict[str, Any]:
    from account_tax.training.precision import cpu_has_bf16

    return {
        "cpu_cores": os.cpu_count(),
        "native_bf16": cpu_has_bf16(),
        "system": platform.platform(),
        "python": platform.python_version(),
        "packages": {name: version(name) for name in ("torch", "transformers", "polars")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, nargs="+", default=[3, 1], help="one, or per size")
    parser.add_argument("--threads", type=int, default=2, help="torch and polars threads")
    parser.add_argument("--batch-size", type=int, default=64, help="texts per batch, both sides")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument(
        "--runtime",
        choices=("torch", "onnx", "onnx-int8"),
        default="torch",
        help="where ours scores the fine-tuned model (predict.runtime; exported unchecked)",
    )
    parser.add_argument(
        "--candidate",
        choices=("fine-tuned", "baseline", "ensemble"),
        help="predict with this candidate instead of the one evaluate shipped (ours only)",
    )
    parser.add_argument("--workdir", type=Path, default=REPO, help="where `make run` ran")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument(
        "--work-dir", type=Path, default=REPO / "results" / "bench" / "predict", help="inputs, logs"
    )
    parser.add_argument("--json", type=Path, help="results (default: results.json in --work-dir)")
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, json.loads(args.spec), args.result)
        return
    repeats = args.repeats * len(args.rows) if len(args.repeats) == 1 else args.repeats
    if len(repeats) != len(args.rows):
        parser.error("--repeats takes one count or one per --rows")
    records = args.workdir / "results" / "ingest" / "records.parquet"
    if not (args.workdir / "results" / "evaluate" / "metrics.json").is_file():
        parser.error(f"no trained, evaluated model in {args.workdir}: run `make run` first")
    work = args.work_dir.resolve()
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": {
            "threads": args.threads,
            "batch_size": args.batch_size,
            "top_k": args.top_k,
            "candidate": args.candidate,
            "runtime": args.runtime,
            "repeats": dict(zip(map(str, args.rows), repeats, strict=True)),
        },
        "target_ours_over_pipeline_rows_per_s": TARGET,
        "sizes": {},
    }
    for rows, count in zip(args.rows, repeats, strict=True):
        input_file = work / "inputs" / f"records-{rows}.parquet"
        if not input_file.is_file():
            write_rows(records, rows, input_file)
        spec = {
            "workdir": str(args.workdir.resolve()),
            "config": str(args.config.resolve()),
            "input": str(input_file),
            "threads": args.threads,
            "batch_size": args.batch_size,
            "top_k": args.top_k,
            "candidate": args.candidate,
            "runtime": args.runtime,
        }
        runs: dict[str, list] = {side: [] for side in args.sides}
        for repeat in range(count):
            order = args.sides[repeat % len(args.sides) :] + args.sides[: repeat % len(args.sides)]
            for side in order:
                out = run_side(side, spec, logs, f"{rows}-{side}-{repeat + 1}")
                runs[side].append(out)
                print(
                    f"{rows} rows, {side} {repeat + 1}: {out['rows'] / out['seconds']:.0f} rows/s, "
                    f"{out['seconds']:.1f} s, peak {out['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
        entry = {}
        for side, side_runs in runs.items():
            entry[side] = {
                "rows_per_s": statistics.median(r["rows"] / r["seconds"] for r in side_runs),
                "seconds": statistics.median(r["seconds"] for r in side_runs),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in side_runs),
                "runs": side_runs,
            }
        if {"ours", "pipeline"} <= entry.keys():
            entry["ours_over_pipeline"] = (
                entry["ours"]["rows_per_s"] / entry["pipeline"]["rows_per_s"]
            )
        if {"ours", "no_evidence"} <= entry.keys():
            entry["evidence_over_none"] = (
                entry["ours"]["rows_per_s"] / entry["no_evidence"]["rows_per_s"]
            )
        results["sizes"][str(rows)] = entry
        json_path = args.json or work / "results.json"
        json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nmedian rows/s over the repeats; peak memory of the worker; target ours >= {TARGET}x")
    for rows, entry in results["sizes"].items():
        line = f"{rows:>8} rows: " + ", ".join(
            f"{side} {entry[side]['rows_per_s']:.0f} rows/s ({entry[side]['peak_rss_mb']:.0f} MB)"
            for side in args.sides
        )
        if "ours_over_pipeline" in entry:
            ratio = entry["ours_over_pipeline"]
            line += f", ours/pipeline {ratio:.2f}x " + ("met" if ratio >= TARGET else "MISSED")
        if "evidence_over_none" in entry:
            ratio = entry["evidence_over_none"]
            line += f", with/without evidence {ratio:.2f}x " + (
                "met" if ratio >= EVIDENCE_TARGET else "MISSED"
            )
        print(line)
    print(f"results: {args.json or work / 'results.json'}")


if __name__ == "__main__":
    main()
