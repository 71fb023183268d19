"""A full disk while a checkpoint is written: one line says so, and the next start cleans up.

The checkpoints go to a small tmpfs of their own (`small_disk`, room for the staging folder's
first files but not a whole checkpoint), the training runs under the workflow's launcher, and the
space is then grown for the resume.
"""

from __future__ import annotations

import subprocess
import sys

from training.conftest import REPO


def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_next_start_clears_it(
    ledger, tiny_bert, tiny_settings, train_command, tmp_path, small_disk
):
    settings = tiny_settings(tiny_bert, epochs=1)
    command, env = train_command(ledger, tmp_path, settings, None)
    command[command.index("--checkpoint-dir") + 1] = str(small_disk)
    # The workflow's launcher, one process; the checkpoints on the small disk.
    launcher = [sys.executable, "-m", "account_tax.training.launch", "--standalone"]
    command = [*launcher, "--nproc_per_node=1", *command[1:]]

    failed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)

    assert failed.returncode == 1, failed.stderr[-3000:]
    output = failed.stdout + failed.stderr
    assert "Traceback" not in output, output[-3000:]
    assert "ChildFailedError" not in output
    (line,) = [line for line in output.splitlines() if "disk full at" in line]
    (run_dir,) = small_disk.glob("run-*")
    assert f"disk full at {run_dir}/.staging-step-000000004: writing checkpoint step-000000004" in (
        line
    )
    assert "training failed: rank 0 exited with status 1; its log lines above say why" in output
    assert list(run_dir.glob(".staging-*"))  # what the failed save left
    assert not list(run_dir.glob("step-*"))
    assert not (tmp_path / "model").exists()

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"removing {run_dir}/.staging-step-000000004, left by an interrupted save" in (
        resumed.stderr
    )
    assert not list(run_dir.glob(".staging-*"))
    assert (run_dir / "step-000000004" / "manifest.json").is_file()
    assert (tmp_path / "model" / "manifest.json").is_file()
