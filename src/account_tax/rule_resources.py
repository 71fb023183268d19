"""Each rule's wall time and peak memory, from the files Snakemake's `benchmark:` directive
writes: for the MLflow run and the report's resources plot."""

from __future__ import annotations

import csv
from pathlib import Path


def read_benchmark(path: Path) -> dict[str, float]:
    """Wall seconds and peak resident memory (MB) from a Snakemake `benchmark:` file."""
    with path.open(encoding="utf-8") as handle:
        row = list(csv.DictReader(handle, delimiter="\t"))[-1]

    def number(key: str) -> float:
        value = row.get(key, "NA")
        return float(value) if value not in ("NA", "", "-") else 0.0

    return {"wall_s": number("s"), "max_rss_mb": number("max_rss")}


def benchmarks(benchmark_root: Path) -> dict[str, tuple[Path, dict[str, float]]]:
    """Every rule's benchmark file and numbers, by rule (`serialize/train` for wildcard rules)."""
    return {
        path.relative_to(benchmark_root).with_suffix("").as_posix(): (path, read_benchmark(path))
        for path in sorted(benchmark_root.rglob("*.tsv"))
    }
