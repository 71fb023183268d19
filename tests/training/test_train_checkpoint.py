"""Finding the checkpoint to resume: only complete ones, whose files match their manifest.

Writing and loading real checkpoints is covered end to end in test_train_runs.py (a run killed
with SIGKILL and resumed); here the manifest rules, on folders laid out as a save leaves them.
"""

import json

from account_tax.checkpoint import (
    clear_staging,
    fingerprint,
    latest_checkpoint,
)
from account_tax.io import sha256_file
from account_tax.manifest import (
    MANIFEST,
    STAGING_PREFIX,
    step_name,
)


def write_checkpoint(run_dir, step, sealed=True):
    folder = run_dir / step_name(step)
    (folder / "deepspeed").mkdir(parents=True)
    (folder / "deepspeed" / "optim_states.pt").write_bytes(b"state of step %d" % step)
    (folder / "rng_state_rank0.pt").write_bytes(b"rng")
    if sealed:
        files = {
            str(p.relative_to(folder)): sha256_file(p)
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }
        (folder / MANIFEST).write_text(json.dumps({"step": step, "files": files}))
    return folder


def test_the_newest_sealed_checkpoint_is_resumed(tmp_path):
    write_checkpoint(tmp_path, 4)
    newest = write_checkpoint(tmp_path, 8)
    write_checkpoint(tmp_path, 12, sealed=False)  # killed before its manifest
    (tmp_path / f"{STAGING_PREFIX}{step_name(16)}").mkdir()

    folder, manifest = latest_checkpoint(tmp_path)

    assert folder == newest and manifest["step"] == 8


def test_a_checkpoint_whose_files_changed_or_vanished_is_ignored(tmp_path):
    oldest = write_checkpoint(tmp_path, 4)
    changed = write_checkpoint(tmp_path, 8)
    (changed / "deepspeed" / "optim_states.pt").write_bytes(b"truncated")
    vanished = write_checkpoint(tmp_path, 12)
    (vanished / "rng_state_rank0.pt").unlink()

    assert latest_checkpoint(tmp_path)[0] == oldest


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert latest_checkpoint(tmp_path / "never-written") is None


def test_interrupted_saves_are_cleared_and_checkpoints_left_to_retention(tmp_path):
    for step in (4, 8, 12):
        write_checkpoint(tmp_path, step)
    (tmp_path / f"{STAGING_PREFIX}{step_name(16)}" / "deepspeed").mkdir(parents=True)

    clear_staging(tmp_path)

    assert sorted(p.name for p in tmp_path.iterdir()) == [step_name(s) for s in (4, 8, 12)]


def test_fingerprint_ignores_key_order_but_not_values():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
