"""Build time and size of the fine-tuned model's evidence index, per 100,000 training rows.

    make run                                   # once: the trained model
    python bench/evidence_index.py             # 20,000 rows, 3 repeats
    python bench/evidence_index.py --rows 100000 --repeats 1

Rows: the bundled data's serialized train and validation texts repeated to `--rows`, each copy
with its own id, as two serialized splits. Each repeat runs
`account_tax.training.model_index.build_model_index` (what training runs when it exports a model:
load the model, embed every record as the head sees it, write the float16 vectors and the
records) into a copy of the model folder, in its own subprocess with `--threads` torch threads.
Reported: the median seconds, rows/s, the index's size on disk, and both scaled to 100,000 rows
(embedding is linear in the rows; the model load is counted once per build).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]


def write_splits(workdir: Path, rows: int, out: Path) -> dict[str, Path]:
    """The serialized train and validation rows repeated to `rows` in all, four to one."""
    splits = {}
    for name, share in (("train", 0.8), ("validation", 0.2)):
        source = pl.read_parquet(workdir / f"results/serialize/{name}.parquet")
        wanted = int(rows * share)
        copies = -(-wanted // source.height)
        frame = pl.concat(
            [source.with_columns(pl.col("id") + f"-{copy}") for copy in range(copies)]
        ).head(wanted)
        splits[name] = out / f"{name}.parquet"
        frame.write_parquet(splits[name])
    return splits


def worker(model: str, splits: str, threads: int) -> None:
    import torch

    from account_tax.training.model_index import build_model_index

    torch.set_num_threads(threads)
    splits = {k: Path(v) for k, v in json.loads(splits).items()}
    seconds = build_model_index(Path(model), splits)["evidence_index_seconds"]
    print(json.dumps({"seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=REPO, help="where `make run` ran")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker, args.threads)
        return
    from account_tax.notebook import stage_folder
    from account_tax.training.evidence import INDEX_DIR

    model = stage_folder("train", args.workdir) / "model"
    with tempfile.TemporaryDirectory(prefix="bench-index-") as scratch:
        splits = write_splits(args.workdir, args.rows, Path(scratch))
        copy = Path(scratch) / "model"
        shutil.copytree(model, copy, ignore=shutil.ignore_patterns(INDEX_DIR, "merged"))
        paths = json.dumps({name: str(path) for name, path in splits.items()})
        runs = []
        for _ in range(args.repeats):
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    str(copy),
                    paths,
                    "--threads",
                    str(args.threads),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])
        size = sum(f.stat().st_size for f in (copy / INDEX_DIR).iterdir()) / 1e6
    seconds = statistics.median(runs)
    scale = 100_000 / args.rows
    print(f"{args.rows:,} rows, {args.threads} threads, median of {args.repeats}: {runs}")
    print(
        f"| rows | build s | rows/s | index MB | build s per 100,000 rows | MB per 100,000 rows |\n"
        f"| ---: | ---: | ---: | ---: | ---: | ---: |\n"
        f"| {args.rows:,} | {seconds:.1f} | {args.rows / seconds:,.0f} | {size:.1f} | "
        f"{seconds * scale:.0f} | {size * scale:.0f} |"
    )


if __name__ == "__main__":
    main()
