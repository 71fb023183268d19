"""Serving throughput and latency: the registered model behind `mlflow models serve`, with the
batch `predict` code on the same rows as the reference, in one run.

    make run                                  # once: a trained, evaluated, registered model
    python bench/serve.py                     # 300 single-record and 30 100-record requests
    python bench/serve.py --alias champion --single 500 --batched 50

The server is `mlflow models serve -m models:/<name>@<alias> --env-manager local` on 127.0.0.1
(one worker), started once; its start-up is not counted. One client sends the requests one after
another (JSON `dataframe_split`, every cell as text), first a few unmeasured ones. Per request
size: requests/s, rows/s and the p50/p99 latency as the client sees it (HTTP and JSON included).
The reference is `account_tax.evaluation.predict.predict_records` (what the `predict` rule
runs) on the same rows in one call, the model already loaded, in this process: rows/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
WARMUP_REQUESTS = 5


def records(workdir: Path, rows: int) -> pl.DataFrame:
    """The bundled data's test records as text (what a client sends), repeated to `rows`."""
    from account_tax.data.spec import DataSpec
    from account_tax.tracking.registry import input_columns

    settings = json.loads((workdir / "results" / "tracking" / "config.json").read_text())
    spec = DataSpec.from_config(settings)
    names = [name for name in input_columns(spec) if name != spec.label]
    source = pl.read_parquet(workdir / "results" / "split" / "test.parquet").select(names)
    copies = -(-rows // source.height)
    frame = pl.concat([source] * copies).head(rows)
    return frame.with_columns(pl.all().cast(pl.String))


def start_server(uri: str, model: str, port: int, log: Path) -> subprocess.Popen:
    command = [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m", model]
    command += ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"]
    # The server runs `uvicorn` from PATH: this environment's.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = os.environ | {"MLFLOW_TRACKING_URI": uri, "HF_HUB_OFFLINE": "1", "PATH": path}
    with log.open("w") as out:
        server = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 300
    while True:
        if server.poll() is not None:
            raise SystemExit(f"the server exited:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5):
                return server
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the server did not answer /ping within 300 s") from None
            time.sleep(1)


def post(port: int, frame: pl.DataFrame) -> float:
    """Seconds for one request of `frame`'s rows, answered with as many rows."""
    body = {"dataframe_split": {"columns": frame.columns, "data": frame.rows()}}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.loads(response.read())
    seconds = time.perf_counter() - started
    if len(answer["predictions"]) != frame.height:
        raise SystemExit(f"{frame.height} rows sent, {len(answer['predictions'])} answered")
    return seconds


def measure(port: int, rows: pl.DataFrame, size: int, requests: int) -> dict[str, Any]:
    batches = [rows.slice((i * size) % rows.height, size) for i in range(requests)]
    for batch in batches[:WARMUP_REQUESTS]:
        post(port, batch)
    started = time.perf_counter()
    latencies = np.array([post(port, batch) for batch in batches])
    elapsed = time.perf_counter() - started
    return {
        "records_per_request": size,
        "requests": requests,
        "requests_per_s": requests / elapsed,
        "rows_per_s": requests * size / elapsed,
        "latency_p50_ms": float(np.percentile(latencies, 50) * 1000),
        "latency_p99_ms": float(np.percentile(latencies, 99) * 1000),
    }


def batch_reference(workdir: Path, rows: pl.DataFrame) -> dict[str, Any]:
    """`predict_records` on all `rows` at once, the candidate loaded before the clock starts."""
    from account_tax.evaluation.predict import (
        Candidate,
        Predictor,
        Provenance,
        predict_records,
    )
    from account_tax.evaluation.prediction_parts import PredictPaths
    from account_tax.evaluation.shipped import read_shipped
    from account_tax.notebook import stage_folder
    from account_tax.settings import complete

    # Completed, so that a run's config from before a setting existed gets its default.
    settings = complete(json.loads((workdir / "results" / "tracking" / "config.json").read_text()))
    shipped = read_shipped(workdir / "results" / "evaluate" / "metrics.json")
    model = stage_folder("train", workdir) / "model"
    baseline = workdir / "results" / "baseline" / "model.joblib"
    evidence = workdir / "results" / "baseline" / "evidence"
    candidate = Candidate(model, baseline, shipped, baseline_evidence=evidence)
    provenance = Provenance.of(shipped.candidate, model, baseline, None)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as scratch:
        source = Path(scratch) / "records.csv"
        rows.write_csv(source)
        paths = PredictPaths(*(Path(scratch) / f"{n}.parquet" for n in ("out", "rej", "rev")))
        started = time.perf_counter()
        predictor = Predictor.configured(settings, candidate, provenance)
        counts = predict_records(source, predictor, paths)
        seconds = time.perf_counter() - started
    return {"rows": counts["predicted"], "seconds": seconds, "rows_per_s": rows.height / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=REPO, help="where `make run` ran")
    parser.add_argument("--name", default="account-tax", help="registered model name")
    parser.add_argument("--alias", default="candidate")
    parser.add_argument("--single", type=int, default=300, help="1-record requests")
    parser.add_argument("--batched", type=int, default=30, help="100-record requests")
    parser.add_argument("--threads", type=int, default=2, help="torch threads, both sides")
    parser.add_argument(
        "--json", type=Path, default=REPO / "results" / "bench" / "serve" / "results.json"
    )
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    database = workdir / "results" / "tracking" / "mlflow.db"
    if not (workdir / "results" / "register" / "model.json").is_file():
        parser.error(f"no registered model in {workdir}: run `make run` first")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import torch

    torch.set_num_threads(args.threads)
    rows = records(workdir, max(args.single, args.batched * 100))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    from account_tax.ports import free_ports

    (port,) = free_ports(1)
    model = f"models:/{args.name}@{args.alias}"
    server = start_server(f"sqlite:///{database}", model, port, args.json.with_suffix(".log"))
    try:
        served = [measure(port, rows, 1, args.single), measure(port, rows, 100, args.batched)]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    reference = batch_reference(workdir, rows)
    for result in served:
        result["rows_per_s_over_batch_predict"] = result["rows_per_s"] / reference["rows_per_s"]
    results = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu_cores": os.cpu_count(),
            "system": platform.platform(),
            "packages": {name: version(name) for name in ("mlflow", "torch", "uvicorn")},
        },
        "model": model,
        "threads": args.threads,
        "served": served,
        "batch_predict": reference,
    }
    args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
