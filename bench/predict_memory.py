"""Peak memory of each job of the `predict` rule as the input grows (100,000, 1 million and
5 million rows by default): the ingest, one shard's scoring, and the gather, each in its own
subprocess, as the rule runs them (`predict_ingest`, `predict_shard`, `predict`).

    python bench/predict_memory.py --workdir . --config config/config.yaml   # after `make run`

Rows: the workdir's ingested records (results/ingest/records.parquet, labels dropped) repeated to
each size, each copy with its own id, written once as the input file.

Jobs, one after the other, each its own process (peak: its own high-water mark, `VmHWM`):

* ingest: `ingest` of the input file, as `predict_ingest` runs it, the whole file;
* shard: `predict_part` as `predict_shard` runs it, the candidate evaluate shipped loaded, on the
  last whole chunk of the file (shard `chunks - 2` of `chunks`, one chunk each). Scoring every
  row would take hours at these sizes on two cores; a shard reads, scores and writes a chunk at
  a time, so what could still grow with the file is the reading of a chunk far into it, which
  this measures;
* gather: `gather_parts` of one part of the input's size, as a one-shard run leaves it: the
  shard's real output repeated (appended a chunk at a time by the shard's own writer), so that
  the share of rows to review, which the gather sorts, is the candidate's own;
* review_csv: the rest of the gather job, `write_review_csv` of the gathered rows to review (the
  copy for spreadsheets), in a process of its own so that its cost is its own;
* review_xlsx: the same rows written as an Excel workbook instead (`write_review_workbook`,
  `predict.review_format: xlsx`);
* read_csv, read_xlsx: each copy read back as the `correct` stage reads a corrections file
  (`read_corrections`), the account column left empty.

`--candidate baseline` scores the shard's chunk with the baseline (TF-IDF) instead of the shipped
candidate: seconds instead of minutes a chunk on two cores, through the same reading and writing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
from peak_memory import own_peak_rss_mb

REPO = Path(__file__).resolve().parents[1]
JOBS = ("ingest", "shard", "gather", "review_csv", "review_xlsx", "read_csv", "read_xlsx")


def settings_of(config_file: Path) -> dict[str, Any]:
    from account_tax.settings import load_settings

    return load_settings(str(config_file))


def write_rows(records: Path, data: dict[str, Any], rows: int, out: Path) -> None:
    """The ingested records without labels, repeated to `rows`, each copy's id made unique, as
    CSV where the config's format is CSV, else as Parquet."""
    columns, id_column = data["columns"], data["columns"]["id"]
    source = pl.read_parquet(records).drop("source_row", columns["label"])
    copies = -(-rows // source.height)
    frame = pl.concat(
        [
            source.with_columns(pl.col(id_column).cast(pl.String) + f"-{copy}")
            for copy in range(copies)
        ]
    ).head(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    if data["format"] == "csv":
        frame.write_csv(out, separator=data["csv_separator"])
    else:
        frame.write_parquet(out)


def part_paths(folder: Path) -> Any:
    from account_tax.evaluation.prediction_parts import PART_FILES, PredictPaths

    return PredictPaths(*(folder / f"{name}.parquet" for name in PART_FILES))


def run_job(job: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One job in this process, importing what its script imports; its figures."""
    from account_tax.data.spec import DataSpec

    settings = settings_of(Path(spec["config"]))
    data = DataSpec.from_config(settings)
    work, scratch = Path(spec["workdir"]), Path(spec["scratch"])
    records = scratch / "records.parquet"
    started = time.perf_counter()
    if job == "ingest":
        from account_tax.data.ingest import ingest

        rows = ingest(data, records, Path(spec["input"]), require_label=False)
    elif job == "shard":
        import torch

        from account_tax.evaluation.predict import (
            Candidate,
            Predictor,
            load_shipped,
            predict_part,
        )
        from account_tax.evaluation.prediction_parts import PredictSettings
        from account_tax.notebook import stage_folder

        torch.set_num_threads(spec["threads"])
        model = stage_folder("train", work) / "model"
        baseline = work / "results/baseline/model.joblib"
        shipped, provenance = load_shipped(
            work / "results/evaluate/metrics.json", model, baseline, None
        )
        if spec["candidate"]:
            shipped = dataclasses.replace(shipped, candidate=spec["candidate"])
        options = PredictSettings.of(settings["predict"])
        candidate = Candidate(model, baseline, shipped, 64, work / "results/baseline/evidence")
        predictor = Predictor.configured(settings, candidate, provenance)
        chunks = -(-spec["rows"] // options.chunk_rows)
        predict_part(records, predictor, part_paths(scratch / "shard"), chunks - 2, chunks)
        rows = options.chunk_rows
    elif job == "review_csv":
        from account_tax.evaluation.prediction_parts import PredictSettings, write_review_csv
        from account_tax.io import parquet_rows

        gathered = part_paths(scratch / "gathered")
        separator = PredictSettings.of(settings["predict"]).review_csv_separator
        write_review_csv(gathered.review, gathered.review.with_suffix(".csv"), separator)
        rows = parquet_rows(gathered.review)
    elif job == "review_xlsx":
        from account_tax.data.label_map import LABEL_MAP
        from account_tax.evaluation.prediction_parts import PredictSettings, write_review_workbook
        from account_tax.io import parquet_rows
        from account_tax.notebook import stage_folder

        gathered = part_paths(scratch / "gathered")
        write_review_workbook(
            gathered.review,
            gathered.review.with_suffix(".xlsx"),
            stage_folder("train", work) / "model" / LABEL_MAP,
            PredictSettings.of(settings["predict"]).chunk_rows,
        )
        rows = parquet_rows(gathered.review)
    elif job in ("read_csv", "read_xlsx"):
        from account_tax.data.corrections import read_corrections

        copy = part_paths(scratch / "gathered").review.with_suffix(f".{job.removeprefix('read_')}")
        rows = read_corrections([copy], data).height
    else:
        from account_tax.evaluation.prediction_parts import PredictSettings, gather_parts

        counts = gather_parts(
            [part_paths(scratch / "whole")],
            records,
            part_paths(scratch / "gathered"),
            PredictSettings.of(settings["predict"]).chunk_rows,
        )
        rows = counts["predicted"] + counts["rejected"]
    return {
        "rows": rows,
        "seconds": time.perf_counter() - started,
        "peak_rss_mb": own_peak_rss_mb(),
    }


def repeat_part(scratch: Path, rows: int) -> int:
    """A part of `rows` rows, as a one-shard run writes it: the shard's chunk repeated, a chunk
    (a row group) at a time, each copy with the source rows of its place in the input; return
    its rows to review."""
    from account_tax.evaluation.prediction_parts import PartWriter

    shard, whole = part_paths(scratch / "shard"), part_paths(scratch / "whole")
    frames = [pl.read_parquet(path) for path in (shard.predictions, shard.rejects, shard.review)]
    chunk = frames[0].height + frames[1].height
    first = min(frame["source_row"].min() or 2**32 for frame in frames[:2])
    frames = [
        frame.with_columns(pl.col("source_row") - first) if frame.height else frame
        for frame in frames
    ]
    writers = [PartWriter(path) for path in (whole.predictions, whole.rejects, whole.review)]
    review = 0
    try:
        for start in range(0, rows, chunk):
            # The last chunk, cut to the rows left: predictions only (no rejects), so that the
            # counts add up to the input's.
            left = rows - start
            parts = frames if left >= chunk else [frames[0].head(left), frames[1].head(0)]
            predictions = parts[0]
            to_review = predictions.join(frames[2].select("source_row"), on="source_row")
            for writer, frame in zip(writers, (predictions, parts[1], to_review), strict=True):
                writer.write(frame.with_columns(pl.col("source_row") + start + 1))
            review += to_review.height
    finally:
        for writer in writers:
            writer.close()
    return review


def measure(job: str, spec: dict[str, Any], logs: Path, threads: int) -> dict[str, Any]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "POLARS_MAX_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }
    command = [sys.executable, __file__, "--job", job, "--spec", json.dumps(spec)]
    log = logs / f"{spec['rows']}-{job}.log"
    with log.open("w") as handle:
        done = subprocess.run(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{job} failed:\n{log.read_text()[-4000:]}")
    return json.loads(log.read_text().strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 5_000_000])
    parser.add_argument("--threads", type=int, default=2, help="torch and polars threads")
    parser.add_argument(
        "--candidate",
        choices=("fine-tuned", "baseline", "ensemble"),
        help="the shard scores with this candidate instead of the one evaluate shipped",
    )
    parser.add_argument("--workdir", type=Path, default=REPO, help="where the workflow ran")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=REPO / "results" / "bench" / "predict_memory",
        help="inputs, scratch files, logs",
    )
    parser.add_argument("--job", choices=JOBS, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        print(json.dumps(run_job(args.job, json.loads(args.spec))), flush=True)
        return
    if not (args.workdir / "results/evaluate/metrics.json").is_file():
        parser.error(f"no trained, evaluated model in {args.workdir}: run `make run` first")
    work = args.work_dir.resolve()
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    data = settings_of(args.config)["data"]
    suffix = "csv" if data["format"] == "csv" else "parquet"
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_cores": os.cpu_count(),
        "threads": args.threads,
        "candidate": args.candidate,
        "sizes": {},
    }
    for rows in args.rows:
        input_file = work / "inputs" / f"records-{rows}.{suffix}"
        if not input_file.is_file():
            write_rows(args.workdir / "results/ingest/records.parquet", data, rows, input_file)
        scratch = work / "scratch" / str(rows)
        spec = {
            "workdir": str(args.workdir.resolve()),
            "config": str(args.config.resolve()),
            "input": str(input_file),
            "scratch": str(scratch),
            "rows": rows,
            "threads": args.threads,
            "candidate": args.candidate,
        }
        entry = {}
        for job in JOBS:
            if job == "gather":
                entry["review_rows"] = repeat_part(scratch, rows)
            entry[job] = measure(job, spec, logs, args.threads)
            print(
                f"{rows} rows, {job}: peak {entry[job]['peak_rss_mb']:.0f} MB, "
                f"{entry[job]['seconds']:.1f} s",
                flush=True,
            )
        results["sizes"][str(rows)] = entry
        (work / "results.json").write_text(json.dumps(results, indent=2) + "\n", "utf-8")
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()
