"""Shared fixtures. Thread caps come first: these machines have 2 cores and tests run beside
other work, so every library gets one or two threads."""

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("POLARS_MAX_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Every process the tests start finds this environment's tools first, as in an activated venv:
# DeepSpeed builds its CPU module with whichever `ninja` comes first, and two ninjas (the
# system's and the venv's) record its command differently, so mixing them rebuilt the module
# (a minute or two each time) whenever tests took turns.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"

import polars as pl
import pytest
from missing_tools import unavailable

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def write_csv(tmp_path):
    """Write rows (dicts, all values as text) to a CSV in tmp_path and return its path."""

    def write(rows: list[dict], name: str = "ledger.csv") -> Path:
        path = tmp_path / name
        pl.DataFrame(rows, schema={k: pl.String for k in rows[0]}).write_csv(path)
        return path

    return write


@pytest.fixture
def small_disk(tmp_path):
    """A 96 KiB tmpfs at tmp_path/small-disk: a disk that fills up. Mounting needs root (as in
    CI and on the dev machines); elsewhere the test is skipped, in CI it fails."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        unavailable(f"mounting a tmpfs needs root: {mounted.stderr.strip()}", "run as root")
    yield mount_point
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def pytest_collection_modifyitems(items):
    """Tests on the real S3 server are marked `s3`, so that `make test-fast` can leave them out."""
    for item in items:
        if "s3_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.s3)
