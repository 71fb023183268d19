"""Ingest of a ledger saved in a code page (`data.encoding`), on SYNTHETIC ledgers.

Sides, each run in a subprocess of its own, one at a time:
- utf8: the ledger as UTF-8, `data.encoding: utf-8` (ingest as it was: the reference);
- code_page: the same ledger saved in windows-1252, `data.encoding: windows-1252` (each line
  that is not UTF-8 decoded from the code page into a copy, then ingest);
- iconv: the method it replaces, the user converting the file first
  (`iconv -f windows-1252 -t utf-8`, then ingest as UTF-8);
- utf8_declared: the UTF-8 ledger read with `data.encoding: windows-1252` (what declaring the
  code page costs a team whose file turns out to be UTF-8).

    python bench/ingest_encoding.py --rows 1000000 5000000 --repeats 3 1

Prints, per size and side, the median wall and CPU seconds with rows/s, the ratio of rows/s to
the utf8 side, and the peak memory of the ingest process (`VmHWM`; iconv's own is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from peak_memory import own_peak_rss_mb

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "synthetic_ledger.yaml"
SIDES = ("utf8", "code_page", "iconv", "utf8_declared")
CODE_PAGE = "windows-1252"


def prepare(rows: int, work_dir: Path) -> Path:
    """The synthetic ledger as UTF-8 and as windows-1252, generated once per size."""
    case_dir = work_dir / f"ledger-{rows}"
    if (case_dir / "ledger-cp1252.csv").is_file():
        return case_dir
    from synthetic_ledger import generate_ledger

    print(f"generating {rows:,} synthetic rows in {case_dir}", flush=True)
    generate_ledger(case_dir / "ledger.csv", rows, seed=0, classes_output=case_dir / "classes.txt")
    text = (case_dir / "ledger.csv").read_text(encoding="utf-8")
    (case_dir / "ledger-cp1252.csv").write_bytes(text.encode(CODE_PAGE))
    return case_dir


def run_side(side: str, case_dir: Path, out_dir: Path) -> dict[str, float]:
    """One ingest, in this process; its wall and CPU seconds (iconv's included) and peak MB."""
    from account_tax.data.ingest import ingest
    from account_tax.data.spec import DataSpec
    from account_tax.settings import load_settings

    config = load_settings(str(CONFIG))
    config["data"]["classes"] = str(case_dir / "classes.txt")
    source = {"code_page": "ledger-cp1252.csv", "iconv": "ledger-cp1252.csv"}.get(
        side, "ledger.csv"
    )
    encoding = CODE_PAGE if side in ("code_page", "utf8_declared") else "utf-8"
    config["data"] |= {"path": str(case_dir / source), "encoding": encoding}
    spec = DataSpec.from_config(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    start, start_cpu = time.perf_counter(), cpu_seconds()
    path = case_dir / source
    if side == "iconv":
        path = out_dir / "ledger-utf8.csv"
        with path.open("wb") as converted:
            subprocess.run(
                ["iconv", "-f", CODE_PAGE, "-t", "utf-8", str(case_dir / source)],
                stdout=converted,
                check=True,
            )
    rows = ingest(spec, out_dir / "records.parquet", path)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
    return {"rows": rows, "seconds": seconds, "cpu_seconds": cpu, "peak_mb": own_peak_rss_mb()}


def cpu_seconds() -> float:
    """User and system CPU time of this process and its finished children (iconv)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_run(side: str, case_dir: Path, out_dir: Path) -> dict[str, float]:
    shutil.rmtree(out_dir, ignore_errors=True)
    command = [sys.executable, __file__, "--run-side", side, "--case", str(case_dir)]
    result = subprocess.run(
        [*command, "--out", str(out_dir)], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--repeats", type=int, nargs="+", default=[3, 1])
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--work-dir", type=Path, default=REPO / "results" / "bench" / "encoding")
    parser.add_argument("--run-side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--case", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_side:
        print(json.dumps(run_side(args.run_side, args.case, args.out)))
        return
    repeats = (
        args.repeats if len(args.repeats) == len(args.rows) else args.repeats[:1] * len(args.rows)
    )
    os.environ.setdefault("POLARS_MAX_THREADS", str(os.cpu_count() or 1))
    print("| rows | side | median s (range) | CPU s | rows/s | ratio to utf8 | peak MB |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for rows, count in zip(args.rows, repeats, strict=True):
        case_dir = prepare(rows, args.work_dir)
        runs: dict[str, list[dict[str, float]]] = {side: [] for side in args.sides}
        # Round by round, so that the machine's drift hits every side alike.
        for _ in range(count):
            for side in args.sides:
                runs[side].append(timed_run(side, case_dir, args.work_dir / "out" / side))
        reference = None
        for side in args.sides:
            seconds = [run["seconds"] for run in runs[side]]
            median = statistics.median(seconds)
            rate = rows / median
            reference = reference or (rate if side == "utf8" else None)
            ratio = f"{rate / reference:.2f}" if reference else "-"
            print(
                f"| {rows:,} | {side} | {median:.2f} ({min(seconds):.2f}-{max(seconds):.2f}) | "
                f"{statistics.median(run['cpu_seconds'] for run in runs[side]):.2f} | "
                f"{rate:,.0f} | {ratio} | "
                f"{max(run['peak_mb'] for run in runs[side]):,.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
