"""bench/job_startup.py, the start-up figures of bench/README: each tree runs its own package and
each job gets a row per tree with its ratio to the first."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_each_tree_runs_its_own_package_and_gets_a_row_per_job(tmp_path):
    # A tree whose package announces itself: the bench must run it, not the installed one.
    other = tmp_path / "other"
    (other / "scripts").mkdir(parents=True)
    (other / "src" / "marker").mkdir(parents=True)
    (other / "src" / "marker" / "__init__.py").write_text("")
    (other / "scripts" / "clean.py").write_text(
        "import marker, pathlib, sys\n"
        f"pathlib.Path({str(tmp_path / 'ran')!r}).write_text(marker.__file__)\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "job_startup.py"),
            "--trees",
            f"this={REPO}",
            f"other={other}",
            "--jobs",
            "clean",
            "--runs",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (tmp_path / "ran").read_text() == str(other / "src" / "marker" / "__init__.py")
    rows = [line for line in result.stdout.splitlines() if line.startswith("| clean |")]
    assert [row.split(" | ")[1] for row in rows] == ["this", "other"]
    assert rows[0].endswith("| 1.00x, 1.00x |")
    # The other tree's ratios are its medians over the first's, each figure printed to two
    # decimals: within what that rounding allows.
    (this_wall, this_cpu), (other_wall, other_cpu) = (medians(row) for row in rows)
    wall_ratio, cpu_ratio = (float(r) for r in re.findall(r"([0-9.]+)x", rows[1]))
    for ratio, other_s, this_s in (
        (wall_ratio, other_wall, this_wall),
        (cpu_ratio, other_cpu, this_cpu),
    ):
        low = max(other_s - 0.005, 0) / (this_s + 0.005) - 0.005
        high = (other_s + 0.005) / max(this_s - 0.005, 1e-9) + 0.005
        assert low - 1e-9 <= ratio <= high + 1e-9, (ratio, other_s, this_s)


def medians(row: str) -> tuple[float, float]:
    """A row's median wall and CPU seconds."""
    cells = row.split(" | ")
    return float(cells[2].split()[0]), float(cells[3])
