"""The data stages as the workflow runs them, MLflow run included: `snakemake` to the serialized
splits on the bundled data (ingest, clean, features, split and serialize of three splits: seven
jobs, each logging into the workflow's run), for two or more trees of the code, interleaved round
by round so that the machine's drift hits them alike. Each tree runs its own Snakefile and
package with this Python, each run in a new folder (its own SQLite store), uploads off.

    python bench/stage_logging.py --trees before=../before after=. --runs 5

Prints per tree the median wall and CPU seconds (Snakemake and every job) with the range and the
ratio to the first tree, and checks that every tree's last run logged the same stage metrics.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from mlflow import MlflowClient

TARGETS = [f"results/serialize/{split}.parquet" for split in ("train", "validation", "test")]
# Each rule's wall time and peak memory: measured, so different in every run.
RESOURCE_METRICS = ("/wall_s", "/max_rss_mb")


def timed(tree: Path, workdir: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one workflow run in `workdir`."""
    config = yaml.safe_load((tree / "config" / "config.yaml").read_text(encoding="utf-8"))
    config["upload"] = {"enabled": False}
    workdir.mkdir(parents=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    command = [sys.executable, "-m", "snakemake", *TARGETS, "--snakefile", str(tree / "Snakefile")]
    command += ["--directory", str(workdir), "--cores", "2", "--configfile", "config.yaml"]
    bin_dir = str(Path(sys.executable).parent)
    env = os.environ | {
        "PYTHONPATH": str(tree / "src"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=workdir, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def stage_metrics(workdir: Path) -> dict[str, float]:
    """The run's metrics but the rules' measured resources."""
    run = json.loads((workdir / "results/tracking/run.json").read_text(encoding="utf-8"))
    metrics = MlflowClient(tracking_uri=run["tracking_uri"]).get_run(run["run_id"]).data.metrics
    return {k: v for k, v in metrics.items() if not k.endswith(RESOURCE_METRICS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", required=True, help="NAME=PATH, the first the base")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.trees)}
    scratch = Path(tempfile.mkdtemp(prefix="stage-logging-"))
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    last: dict[str, Path] = {}
    try:
        for run in range(args.runs):
            for name, tree in trees.items():
                if name in last:
                    shutil.rmtree(last[name])
                last[name] = scratch / f"{name}-{run}"
                times[name].append(timed(tree, last[name]))
        logged = {name: stage_metrics(workdir) for name, workdir in last.items()}
    finally:
        shutil.rmtree(scratch)
    base = next(iter(trees))
    base_wall = statistics.median(w for w, _ in times[base])
    base_cpu = statistics.median(c for _, c in times[base])
    print("| tree | wall s, median (min-max) | CPU s, median (min-max) | / first (wall, CPU) |")
    print("|---|---|---|---|")
    for name, runs in times.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(
            f"| {name} | {wall:.2f} ({min(walls):.2f}-{max(walls):.2f}) |"
            f" {cpu:.2f} ({min(cpus):.2f}-{max(cpus):.2f}) |"
            f" {wall / base_wall:.2f}x, {cpu / base_cpu:.2f}x |"
        )
    for name, metrics in logged.items():
        if metrics != logged[base]:
            raise SystemExit(f"{name} logged other stage metrics than {base}: {metrics}")
    print(f"every tree logged the same {len(logged[base])} stage metrics")


if __name__ == "__main__":
    main()
