"""Wall time of the `predict` rule with 1, 2 and 4 shards (`predict.shards`) on a local SLURM
cluster, through `snakemake --profile profiles/slurm`, and that every run's files are the same.

    make run                                   # once: the trained, evaluated model
    python bench/predict_shards.py             # 20,000 rows; 1, 2 and 4 shards

The cluster is the tests' (tests/slurm_cluster.py): two slurmd daemons on this machine, each
claiming all its CPUs, so the shards share this machine's cores: the figure says what sharding
costs and gains where the nodes are one machine; on a real cluster each shard has its own.
Rows: the bundled data's ingested records repeated to `--rows` (as bench/predict.py writes them).
Each run's clock covers the whole snakemake call (ingest, the shards' SLURM jobs with their model
loads, the gather); the shards' own times come from their Snakemake benchmark files. Uploads are
off (the model's receipt is not what is measured), and only the prediction's rules run (mtime
triggers, `--forcerun predict_ingest`): the trained model and evaluation stay as `make run` made
them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from predict import write_rows  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402

OUTPUTS = ("bench.parquet", "bench.review.parquet", "bench.rejects.parquet")
CLUSTER_OPTIONS = [
    "--default-resources",
    "slurm_partition=debug",
    "mem_mb=3000",
    "runtime=60",
    "--slurm-status-command",
    "squeue",
    "--slurm-no-account",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--jobs",
    "4",
]


def snakemake(workdir: Path, config: Path, env: dict[str, str], *args: str) -> float:
    """Run snakemake in `workdir` with `config`; its wall seconds."""
    command = [
        str(Path(sys.executable).with_name("snakemake")),
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        *args,
        "--configfile",
        str(config),
    ]
    environment = os.environ | env | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    started = time.perf_counter()
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-6000:])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=REPO, help="where `make run` ran")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--work-dir", type=Path, default=REPO / "results" / "bench" / "predict_shards"
    )
    parser.add_argument("--json", type=Path, help="results (default: results.json in --work-dir)")
    args = parser.parse_args()
    workdir, work = args.workdir.resolve(), args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    source = work / f"records-{args.rows}.parquet"
    if not source.is_file():
        write_rows(workdir / "results/ingest/records.parquet", args.rows, source)
    config = yaml.safe_load((workdir / "config/config.yaml").read_text())
    config["upload"] = {"enabled": False}
    config_file = work / "config.yaml"
    results: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_cores": os.cpu_count(),
        "rows": args.rows,
        "runs": {},
    }
    with SlurmCluster(work / "slurm", nodes=2, min_job_age=3600) as cluster:
        config["predict"] = {"inputs": {"bench": str(source)}}
        reference = None
        for shards in args.shards:
            config["predict"]["shards"] = shards
            config_file.write_text(yaml.safe_dump(config))
            profile = ["--profile", str(REPO / "profiles/slurm"), *CLUSTER_OPTIONS]
            # Only the prediction runs again, whatever else the code's edits would re-run.
            profile += ["--rerun-triggers", "mtime", "--forcerun", "predict_ingest"]
            seconds = snakemake(
                workdir, config_file, cluster.env, "results/predict/bench.parquet", *profile
            )
            frames = [pl.read_parquet(workdir / "results/predict" / name) for name in OUTPUTS]
            reference = reference or frames
            shard_seconds = [
                float(pl.read_csv(path, separator="\t")["s"][0])
                for path in sorted((workdir / "benchmarks/predict/bench").glob("shard-*.tsv"))[
                    :shards
                ]
            ]
            results["runs"][shards] = {
                "wall_seconds": seconds,
                "rows_per_s": args.rows / seconds,
                "shard_seconds": shard_seconds,
                "identical_to_first": all(
                    a.equals(b) for a, b in zip(frames, reference, strict=True)
                ),
            }
            print(shards, json.dumps(results["runs"][shards]), flush=True)
    path = args.json or work / "results.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
