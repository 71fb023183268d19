"""bench/job_startup.py, the start-up figures of bench/README: each tree runs its own package and
each job gets a row per tree with its ratio to the first."""

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
