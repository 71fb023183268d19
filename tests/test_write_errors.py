"""An output that cannot be written ends a stage with one line: what, where and why."""

import errno
import logging
from pathlib import Path

import pytest

from account_tax import cli
from account_tax.errors import WriteError, writing
from account_tax.io import write_json


def test_a_full_disk_names_the_file_and_the_folder(small_disk):
    target = small_disk / "results" / "metrics.json"
    with pytest.raises(WriteError) as raised:
        write_json(target, {"rows": "x" * 200_000})
    assert str(raised.value) == (
        f"disk full at {target.parent}: writing metrics.json failed (No space left on device)"
    )
    assert list(target.parent.iterdir()) == []  # no half file left behind


def test_a_stage_that_cannot_write_ends_with_one_line_and_status_1(small_disk, caplog):
    def main():
        write_json(small_disk / "out.json", {"rows": "x" * 200_000})

    with pytest.raises(SystemExit) as exited:
        cli.run(main)
    assert exited.value.code == 1
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().startswith(f"disk full at {small_disk}: writing out.json failed")


def test_other_write_failures_say_the_system_reason():
    expected = r"^cannot write the report at /x: Permission denied$"
    with pytest.raises(WriteError, match=expected), writing("the report", Path("/x")):
        raise PermissionError(errno.EACCES, "Permission denied")


def test_a_runtime_error_with_room_on_the_disk_is_not_called_a_full_disk(tmp_path):
    """torch's writer has no errno: only a nearly full disk makes its error a full disk."""
    with pytest.raises(RuntimeError, match="unexpected pos"), writing("a checkpoint", tmp_path):
        raise RuntimeError("unexpected pos 576 vs 534")
