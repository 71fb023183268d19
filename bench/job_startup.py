"""A job's start-up: `python scripts/<job>.py --help` (its imports and argument parsing), timed
for two or more trees of the code, interleaved round by round so that the machine's drift hits
them alike. Each tree runs its own package (`<tree>/src` first on PYTHONPATH) with this Python.

    python bench/job_startup.py --trees before=../before after=. \
        --jobs backtest_summary init_model --runs 7

Prints, per job and tree, the median wall and CPU seconds (the child's user + system) with the
range, and each tree's ratio to the first.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def timed(tree: Path, job: str) -> tuple[float, float]:
    """Wall and CPU seconds of one start-up."""
    env = os.environ | {"PYTHONPATH": str(tree / "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(tree / "scripts" / f"{job}.py"), "--help"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", required=True, help="NAME=PATH, the first the base")
    parser.add_argument("--jobs", nargs="+", required=True, help="script names under scripts/")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.trees)}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.runs):
        for job in args.jobs:
            for name, tree in trees.items():
                times.setdefault((job, name), []).append(timed(tree, job))
    medians = {
        key: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for key, runs in times.items()
    }
    base = next(iter(trees))
    print("| job | tree | wall s, median (min-max) | CPU s, median | / first tree (wall, CPU) |")
    print("|---|---|---|---|---|")
    for job in args.jobs:
        base_wall, base_cpu = medians[job, base]
        for name in trees:
            (wall, cpu), walls = medians[job, name], [w for w, _ in times[job, name]]
            print(
                f"| {job} | {name} | {wall:.2f} ({min(walls):.2f}-{max(walls):.2f}) | {cpu:.2f} |"
                f" {wall / base_wall:.2f}x, {cpu / base_cpu:.2f}x |"
            )


if __name__ == "__main__":
    main()
