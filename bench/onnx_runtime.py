"""Scoring rows/s of the fine-tuned model in ONNX Runtime (float32 and int8 weights) against
PyTorch as `predict` runs it (bf16 where the CPU has it) and in float32 (as on a CPU without
native bf16), with each runtime's top-1 agreement with
PyTorch and calibration error on the validation split: the check `predict.runtime` must pass.

    make run                                   # once: the trained model
    python bench/onnx_runtime.py               # 4,096 texts, 3 repeats, 2 threads

Texts: the bundled data's serialized test texts repeated to `--rows`. Each side scores them with
`account_tax.training.inference.score_batches` (length-sorted batches of `--batch-size`, logits
and pooled embeddings), in its own subprocess with `--threads` threads, the model loaded (or the
ONNX session made) before the clock starts; the export is timed apart. The check is
`account_tax.evaluation.runtime_check.check_runtime` on the validation split.
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
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
SIDES = ("torch", "torch-float32", "onnx", "onnx-int8")


def worker(spec: dict) -> dict:
    import torch

    from account_tax.notebook import stage_folder
    from account_tax.training.inference import load_classifier, score_texts
    from account_tax.training.onnx_model import OnnxScorer
    from account_tax.training.training_info import read_training_info

    torch.set_num_threads(spec["threads"])
    model_dir = stage_folder("train", Path(spec["workdir"])) / "model"
    texts = pl.read_parquet(spec["texts"])["text"].to_list()
    max_length = read_training_info(model_dir)["settings"]["max_length"]
    # torch-float32: what PyTorch scores in on a CPU without native bf16 (AVX2 only).
    dtype = torch.float32 if spec["side"] == "torch-float32" else None
    classifier = load_classifier(model_dir, dtype=dtype)
    if spec["side"].startswith("torch"):

        def score():
            return score_texts(
                classifier.model, classifier.tokenizer, texts, spec["batch_size"], max_length
            )
    else:
        scorer = OnnxScorer(Path(spec["onnx"]), spec["threads"])

        def score():
            return scorer.score_texts(classifier.tokenizer, texts, spec["batch_size"], max_length)

    score()  # warm-up: first-call allocations and kernel choices
    seconds = []
    for _ in range(spec["repeats"]):
        started = time.perf_counter()
        score()
        seconds.append(time.perf_counter() - started)
    return {"seconds": seconds, "rows": len(texts)}


def run_worker(spec: dict) -> dict:
    env = os.environ | {"OMP_NUM_THREADS": str(spec["threads"]), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, __file__, "--worker", json.dumps(spec)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=REPO, help="where `make run` ran")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return

    import torch

    from account_tax.evaluation.prediction_parts import PredictSettings
    from account_tax.evaluation.runtime_check import check_runtime
    from account_tax.notebook import stage_folder
    from account_tax.training.onnx_model import export_onnx
    from account_tax.training.precision import cpu_has_bf16

    torch.set_num_threads(args.threads)
    workdir = args.workdir.resolve()
    model_dir = stage_folder("train", workdir) / "model"
    results = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu_cores": os.cpu_count(),
            "native_bf16": cpu_has_bf16(),
            "system": platform.platform(),
        },
        "settings": vars(args) | {"workdir": str(workdir), "json": None},
        "sides": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-onnx-") as scratch:
        source = pl.read_parquet(workdir / "results/serialize/test.parquet").select("text")
        texts = Path(scratch) / "texts.parquet"
        pl.concat([source] * -(-args.rows // source.height)).head(args.rows).write_parquet(texts)
        for side in args.sides:
            spec = {
                "side": side,
                "workdir": str(workdir),
                "texts": str(texts),
                "threads": args.threads,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
            }
            entry: dict = {}
            if side.startswith("onnx"):
                spec["onnx"] = str(Path(scratch) / f"{side}.onnx")
                started = time.perf_counter()
                export_onnx(model_dir, Path(spec["onnx"]), side)
                entry["export_seconds"] = time.perf_counter() - started
                entry["megabytes"] = Path(spec["onnx"]).stat().st_size / 1e6
                entry["check"] = check_runtime(
                    model_dir,
                    Path(spec["onnx"]),
                    workdir / "results/serialize/validation.parquet",
                    PredictSettings.of({"runtime": side}),
                    args.batch_size,
                    args.threads,
                )
            timed = run_worker(spec)
            entry["rows_per_s"] = statistics.median(timed["rows"] / s for s in timed["seconds"])
            entry["runs_rows_per_s"] = [timed["rows"] / s for s in timed["seconds"]]
            results["sides"][side] = entry
            print(side, json.dumps(entry), flush=True)
    if "torch" in results["sides"]:
        base = results["sides"]["torch"]["rows_per_s"]
        for entry in results["sides"].values():
            entry["over_torch"] = entry["rows_per_s"] / base
    print(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
