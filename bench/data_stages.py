"""Benchmark the data stages against the method they replace, on SYNTHETIC ledgers.

Ours: clean -> features -> split -> serialize (the package's Polars stages, as the workflow runs
them). Baseline, the method they replace: pandas (read, type coercion, unicode normalisation with
a per-row apply, drop_duplicates, a stratified GroupBy.sample split with the same fractions), then
Hugging Face `datasets` `Dataset.from_pandas(...).map(fn, num_proc=2)` with a row-wise Python
function that writes the same `name: value | name: value` text.

Both sides start from the same ingested `records.parquet` (generated and ingested once per size,
cached under --work-dir; neither is timed) and both write Parquet outputs. Each run is its own
subprocess, so the sides cannot share caches or memory; its peak memory is the largest of the
kernel's high-water mark of any one process (getrusage) and the sampled sum of RSS over its
process tree (datasets' workers included). Times are medians over the repeats.

    python bench/data_stages.py --rows 1000000 10000000 --repeats 3 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import psutil
from peak_memory import own_peak_rss_mb

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "synthetic_ledger.yaml"
SIDES = ("ours", "baseline")
SPLITS = ("train", "validation", "test")
SAMPLE_SECONDS = 0.05
TARGET_SPEEDUP = 10.0
TARGET_PEAK_RSS_MB = 4096
# The whole machine for each side: Polars threads for ours, datasets worker processes for the
# baseline (pandas itself is single-threaded).
CORES = os.cpu_count() or 1


def bench_config(case_dir: Path) -> dict[str, Any]:
    from account_tax.settings import load_settings

    config = load_settings(str(CONFIG))
    config["data"]["path"] = str(case_dir / "ledger.csv")
    config["data"]["classes"] = str(case_dir / "classes.txt")
    return config


def prepare(rows: int, seed: int, dirty_fraction: float, work_dir: Path) -> Path:
    """Generate and ingest a ledger once; later runs reuse it."""
    case_dir = work_dir / f"ledger-{rows}-seed{seed}-dirty{dirty_fraction:g}"
    records = case_dir / "records.parquet"
    if records.is_file():
        return case_dir
    from synthetic_ledger import generate_ledger

    from account_tax.data.ingest import ingest
    from account_tax.data.spec import DataSpec

    print(f"generating and ingesting {rows:,} synthetic rows in {case_dir}", flush=True)
    generate_ledger(case_dir / "ledger.csv", rows, seed=seed, dirty_fraction=dirty_fraction)
    ingest(DataSpec.from_config(bench_config(case_dir)), records)
    return case_dir


def cpu_seconds() -> float:
    """User and system CPU time of this process and its finished children (datasets' workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Stages:
    """Wall time, CPU time and peak RSS of each stage of one run, in this process.

    CPU time is what a stage costs even when other work shares the machine and stretches its
    wall time. The kernel's peak-RSS mark is reset before each stage (Linux: `5` to
    /proc/self/clear_refs), so each stage's peak is its own and not that of an earlier stage.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.peak_rss_mb: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        Path("/proc/self/clear_refs").write_text("5")
        start, start_cpu = time.perf_counter(), cpu_seconds()
        yield
        self.seconds[name] = time.perf_counter() - start
        self.cpu_seconds[name] = cpu_seconds() - start_cpu
        self.peak_rss_mb[name] = own_peak_rss_mb()


def run_ours(case_dir: Path, out_dir: Path, stage: Stages) -> None:
    from account_tax.data.clean import CleanSettings, clean
    from account_tax.data.features import FeatureSettings, build_features
    from account_tax.data.serialize import SerializeSettings, serialize
    from account_tax.data.spec import DataSpec
    from account_tax.data.split import SplitSettings, split

    config = bench_config(case_dir)
    spec = DataSpec.from_config(config)
    label_map = out_dir / "label_map.json"
    with stage("clean"):
        clean(
            case_dir / "records.parquet",
            spec,
            out_dir / "clean.parquet",
            out_dir / "rejects.parquet",
            CleanSettings.of(config["clean"]),
        )
    with stage("features"):
        build_features(
            out_dir / "clean.parquet",
            spec,
            FeatureSettings.of(config["features"]),
            out_dir / "features.parquet",
            label_map,
        )
    with stage("split"):
        options = SplitSettings.of(config["split"])
        split(out_dir / "features.parquet", spec, options, out_dir / "split", 0)
    with stage("serialize"):
        for name in SPLITS:
            serialize(
                out_dir / "split" / f"{name}.parquet",
                spec,
                SerializeSettings.of(config["serialize"]),
                label_map,
                out_dir / "serialized" / f"{name}.parquet",
            )


def normalise(value: Any, case: str) -> str | None:
    """The replaced method's per-value normalisation: NFKC, whitespace runs to one space, case."""
    import unicodedata

    if not isinstance(value, str):
        return None
    text = " ".join(unicodedata.normalize("NFKC", value).split())
    if case == "lower":
        text = text.lower()
    elif case == "upper":
        text = text.upper()
    return text or None


def serialize_row(
    row: dict[str, Any],
    fields: list[tuple[str, str, str]],
    separator: str,
    id_column: str,
    label_column: str,
    label_ids: dict[str, int],
) -> dict[str, Any]:
    """One record's text, field by field in Python: the replaced method's `Dataset.map` function."""
    parts = [
        f"{before}{row[column]}{after}"
        for column, before, after in fields
        if row[column] is not None
    ]
    return {
        "id": str(row[id_column]),
        "text": separator.join(parts),
        "label_id": label_ids[row[label_column]],
    }


def run_baseline(case_dir: Path, out_dir: Path, stage: Stages) -> None:
    import numpy as np
    import pandas as pd
    from datasets import Dataset, disable_caching, disable_progress_bars

    from account_tax.data.spec import DataSpec

    disable_caching()
    disable_progress_bars()
    config = bench_config(case_dir)
    spec = DataSpec.from_config(config)
    case = config["clean"]["case"]

    with stage("read"):
        frame = pd.read_parquet(case_dir / "records.parquet", columns=list(spec.columns))

    with stage("clean"):
        bad = pd.Series(False, index=frame.index)
        for column in [spec.id, *spec.string_columns, spec.label]:
            bad |= frame[column].str.contains("\ufffd", regex=False).fillna(False).astype(bool)
        for column in spec.numeric:
            raw = frame[column].str.strip()
            frame[column] = pd.to_numeric(raw, errors="coerce")
            bad |= raw.notna() & (raw != "") & frame[column].isna()
        for column in spec.date:
            raw = frame[column].str.strip()
            frame[column] = pd.to_datetime(raw, format=spec.date_format, errors="coerce")
            bad |= raw.notna() & (raw != "") & frame[column].isna()
        for column in spec.string_columns:
            frame[column] = frame[column].apply(normalise, args=(case,))
        for column in (spec.id, spec.label):
            frame[column] = frame[column].apply(normalise, args=("preserve",))
        bad |= frame[spec.id].isna() | frame[spec.label].isna()
        bad |= ~frame[spec.label].isin(spec.classes)
        frame[bad].to_parquet(out_dir / "rejects.parquet")
        frame = frame[~bad]

    with stage("drop_duplicates"):
        frame = frame.drop_duplicates(subset=list(spec.columns), keep="first")

    # Vectorised pandas, not per row: the baseline gets the benefit of the doubt here.
    with stage("features"):
        options = config["features"]
        for column in spec.date:
            dates = frame[column].dt
            parts = {"year": dates.year, "month": dates.month, "day": dates.day}
            parts |= {"weekday": dates.day_of_week + 1, "quarter": dates.quarter}
            for part in options["date_parts"]:
                frame[f"{column}_{part}"] = parts[part]
        for column in spec.numeric:
            value = frame[column]
            if options["numeric_log"]:
                frame[f"{column}_log"] = (np.sign(value) * np.log10(value.abs() + 1)).round(3)
            if options["numeric_magnitude"]:
                with np.errstate(divide="ignore"):  # log10(0) is -inf; zero gets "0" below
                    exponent = np.floor(np.log10(value.abs())).clip(lower=0).fillna(0)
                magnitude = np.where(value < 0, "-1e", "+1e") + exponent.astype(int).astype(str)
                frame[f"{column}_magnitude"] = magnitude.where(value != 0, "0").where(value.notna())
        for column in options["mask_digits"]:
            frame[column] = frame[column].str.replace(r"\d+", "#", regex=True)

    with stage("split"):
        split_options = config["split"]
        seed = split_options["seed"]
        test_fraction = split_options["test_fraction"]
        test = frame.groupby(spec.label).sample(frac=test_fraction, random_state=seed)
        rest = frame.drop(test.index)
        validation = rest.groupby(spec.label).sample(
            frac=split_options["validation_fraction"] / (1 - test_fraction), random_state=seed
        )
        parts = {"train": rest.drop(validation.index), "validation": validation, "test": test}

    with stage("serialize"):
        serialize_options = config["serialize"]
        template = serialize_options["template"]
        fields = []
        for field in serialize_options["fields"]:
            named = template.replace("{name}", field.get("name", field["column"]))
            before, after = named.split("{value}")
            fields.append((field["column"], before, after))
        label_ids = {label: index for index, label in enumerate(spec.classes)}
        columns = list(dict.fromkeys([spec.id, spec.label, *(column for column, _, _ in fields)]))
        (out_dir / "serialized").mkdir(exist_ok=True)
        for name, part in parts.items():
            dataset = Dataset.from_pandas(part[columns], preserve_index=False)
            dataset = dataset.map(
                serialize_row,
                fn_kwargs={
                    "fields": fields,
                    "separator": serialize_options["separator"],
                    "id_column": spec.id,
                    "label_column": spec.label,
                    "label_ids": label_ids,
                },
                num_proc=CORES,
                remove_columns=dataset.column_names,
                load_from_cache_file=False,
            )
            dataset.to_parquet(out_dir / "serialized" / f"{name}.parquet")


def run_side(side: str, case_dir: Path, out_dir: Path) -> None:
    """Child process: run one side, write its stage times and peak RSS to `timing.json`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = Stages()
    (run_ours if side == "ours" else run_baseline)(case_dir, out_dir, stage)
    # Resetting the peak mark per stage also resets this process's ru_maxrss, so its peak is the
    # largest stage peak; RUSAGE_CHILDREN (KiB) covers datasets' finished workers.
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    timing = {
        "stages": stage.seconds,
        "stage_cpu_seconds": stage.cpu_seconds,
        "stage_peak_rss_mb": stage.peak_rss_mb,
        "max_process_rss_mb": max(*stage.peak_rss_mb.values(), children),
    }
    (out_dir / "timing.json").write_text(json.dumps(timing), encoding="utf-8")


def measure(side: str, case_dir: Path, log: Path) -> dict[str, Any]:
    """Run one side in a fresh subprocess, sampling the memory of its whole process tree.

    The tree's memory is the sum of PSS (proportional set size): datasets forks its workers, and
    a sum of RSS would count the pages they share with the parent once per process.
    """
    out_dir = case_dir / side
    env = os.environ | {
        "POLARS_MAX_THREADS": str(CORES),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(case_dir / "hf-cache"),
    }
    command = [sys.executable, __file__, "--run-side", side, "--case-dir", str(case_dir)]
    command += ["--out-dir", str(out_dir)]
    peak_tree_pss = 0
    load_before = os.getloadavg()[0]
    (out_dir / "timing.json").unlink(missing_ok=True)
    with log.open("a", encoding="utf-8") as stderr:
        process = subprocess.Popen(command, stdout=stderr, stderr=stderr, env=env)
        watched = psutil.Process(process.pid)
        while process.poll() is None:
            try:
                tree = [watched, *watched.children(recursive=True)]
                pss = sum(p.memory_full_info().pss for p in tree)
            except psutil.NoSuchProcess:
                continue  # a worker ended between listing and reading it: sample again
            peak_tree_pss = max(peak_tree_pss, pss)
            time.sleep(SAMPLE_SECONDS)
    if process.returncode != 0:
        raise RuntimeError(f"{side} run failed (exit {process.returncode}); see {log}")
    result = json.loads((out_dir / "timing.json").read_text(encoding="utf-8"))
    result["seconds"] = sum(result["stages"].values())
    result["cpu_seconds"] = sum(result["stage_cpu_seconds"].values())
    result["peak_tree_pss_mb"] = peak_tree_pss / 2**20
    result["peak_rss_mb"] = max(result["peak_tree_pss_mb"], result["max_process_rss_mb"])
    # Other work on the machine slows both sides; the 1-minute load average shows how much.
    result["load_average"] = {"before": load_before, "after": os.getloadavg()[0]}
    return result


def compare_outputs(case_dir: Path) -> dict[str, Any]:
    """Both sides must produce the same texts and label ids for the same records."""
    import polars as pl

    def read(side: str) -> pl.DataFrame:
        files = [case_dir / side / "serialized" / f"{name}.parquet" for name in SPLITS]
        return pl.read_parquet(files).select("id", "text", pl.col("label_id").cast(pl.Int64))

    ours, baseline = read("ours"), read("baseline")
    joined = ours.join(baseline, on="id", how="inner", suffix="_baseline")
    return {
        "rows_ours": ours.height,
        "rows_baseline": baseline.height,
        "ids_in_both": joined.height,
        "same_text": int((joined["text"] == joined["text_baseline"]).sum()),
        "same_label_id": int((joined["label_id"] == joined["label_id_baseline"]).sum()),
    }


def summarise(runs: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    seconds = statistics.median(run["seconds"] for run in runs)
    return {
        "runs": runs,
        "median_seconds": seconds,
        "rows_per_second": rows / seconds,
        "median_cpu_seconds": statistics.median(run["cpu_seconds"] for run in runs),
        "median_stage_seconds": {
            stage: statistics.median(run["stages"][stage] for run in runs)
            for stage in runs[0]["stages"]
        },
        "median_stage_cpu_seconds": {
            stage: statistics.median(run["stage_cpu_seconds"][stage] for run in runs)
            for stage in runs[0]["stages"]
        },
        "peak_rss_mb": max(run["peak_rss_mb"] for run in runs),
        "stage_peak_rss_mb": {
            stage: max(run["stage_peak_rss_mb"][stage] for run in runs)
            for stage in runs[0]["stage_peak_rss_mb"]
        },
    }


def machine() -> dict[str, Any]:
    debian = Path("/etc/debian_version")
    return {
        "cpu_cores": CORES,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "system": platform.platform(),
        "debian": debian.read_text().strip() if debian.is_file() else None,
        "python": platform.python_version(),
        # datasets only where the baseline side runs (`make bench` installs it).
        "packages": {
            name: version(name)
            for name in ("polars", "numpy", "pandas", "pyarrow", "datasets")
            if name != "datasets" or find_spec(name)
        },
    }


def print_table(cases: list[dict[str, Any]]) -> None:
    print(
        f"\n{'rows':>12} {'side':<9} {'runs':>4} {'wall s':>8} {'rows/s':>9} {'CPU s':>8} "
        f"{'peak MB':>8}  per stage: wall s / CPU s / peak RSS MB of the main process"
    )
    for case in cases:
        for side in SIDES:
            if side not in case:
                continue
            result = case[side]
            stages = " | ".join(
                f"{stage} {seconds:.1f}/{result['median_stage_cpu_seconds'][stage]:.1f}/"
                f"{result['stage_peak_rss_mb'][stage]:,.0f}"
                for stage, seconds in result["median_stage_seconds"].items()
            )
            print(
                f"{case['rows']:>12,} {side:<9} {len(result['runs']):>4} "
                f"{result['median_seconds']:>8.1f} {result['rows_per_second']:>9,.0f} "
                f"{result['median_cpu_seconds']:>8.1f} {result['peak_rss_mb']:>8,.0f}  {stages}"
            )
        if "speedup" in case:
            print(
                f"{'':>12} ours / baseline rows/s: {case['speedup']:.1f}x "
                f"(CPU time: {case['cpu_speedup']:.1f}x)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", type=int, nargs="+", default=[1_000_000, 10_000_000], help="ledger sizes"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        nargs="+",
        default=[3, 1],
        help="runs per side: one count for every size, or one per --rows value (default 3 1)",
    )
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic ledgers")
    parser.add_argument(
        "--dirty-fraction",
        type=float,
        default=0.01,
        help="share of bad rows in the ledgers, so that cleaning has work to do (default 0.01)",
    )
    parser.add_argument(
        "--work-dir", type=Path, default=REPO / "results" / "bench", help="cached ledgers, outputs"
    )
    parser.add_argument(
        "--json", type=Path, help="results file (default: data_stages.json in --work-dir)"
    )
    parser.add_argument("--run-side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--case-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_side:
        run_side(args.run_side, args.case_dir, args.out_dir)
        return
    if len(args.repeats) not in (1, len(args.rows)):
        parser.error("--repeats takes one count, or one per --rows value")
    repeats = args.repeats * len(args.rows) if len(args.repeats) == 1 else args.repeats

    args.work_dir.mkdir(parents=True, exist_ok=True)
    json_path = args.json or args.work_dir / "data_stages.json"
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": str(CONFIG.relative_to(REPO)),
        "dirty_fraction": args.dirty_fraction,
        "targets": {"speedup": TARGET_SPEEDUP, "ours_peak_rss_mb": TARGET_PEAK_RSS_MB},
        "cases": [],
    }
    for rows, count in zip(args.rows, repeats, strict=True):
        case_dir = prepare(rows, args.seed, args.dirty_fraction, args.work_dir)
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in args.sides}
        for repeat in range(count):
            for side in args.sides:
                print(f"{rows:,} rows: {side}, run {repeat + 1} of {count}", flush=True)
                runs[side].append(measure(side, case_dir, args.work_dir / "bench.log"))
        case: dict[str, Any] = {"rows": rows}
        case |= {side: summarise(side_runs, rows) for side, side_runs in runs.items()}
        if set(args.sides) == set(SIDES):
            # Same rows on both sides, so the ratio of rows/s is the inverse ratio of times.
            case["speedup"] = case["baseline"]["median_seconds"] / case["ours"]["median_seconds"]
            case["cpu_speedup"] = (
                case["baseline"]["median_cpu_seconds"] / case["ours"]["median_cpu_seconds"]
            )
            case["same_output"] = compare_outputs(case_dir)
        if "ours" in case:
            case["ours_peak_rss_below_target"] = case["ours"]["peak_rss_mb"] < TARGET_PEAK_RSS_MB
        results["cases"].append(case)
        # Written after every size, so a long run that is stopped keeps what it measured.
        json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print_table(results["cases"])
    print(f"\nresults: {json_path}")


if __name__ == "__main__":
    main()
