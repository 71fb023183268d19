"""Retention: old checkpoints go only once S3 provably holds them, never under a running upload.

Receipts come from real uploads to the session's SeaweedFS server.
"""

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from s3_helpers import BUCKET, MIB, make_checkpoint, options

from account_tax.io import sha256_file
from account_tax.ports import free_ports
from account_tax.storage.manifest import (
    MANIFEST,
    CheckpointBusy,
    checkpoint_lock,
    lock_path,
)
from account_tax.storage.retention import (
    DELETING_PREFIX,
    Checkpoint,
    RetainSettings,
    choose_kept,
    remove,
    retain,
)
from account_tax.storage.s3 import (
    client,
    upload_checkpoint,
    upload_segment,
)

pytest_plugins = ["s3_fixtures"]

REPO = Path(__file__).resolve().parents[1]
KEEP_ONE = RetainSettings.of(keep_last=1)


def upload(source, run_info, settings, receipts: Path) -> dict:
    return upload_checkpoint(
        source, source.name, run_info, settings, receipts / f"{source.name}.json"
    )


def s3_of(settings):
    return client(settings)


def kept(report) -> dict[str, list[str]]:
    return {Path(entry["path"]).name: entry["reasons"] for entry in report["kept"]}


def deleted(report) -> list[str]:
    return [Path(entry["path"]).name for entry in report["deleted"]]


def assert_stored(receipt, settings):
    """Every object of the receipt is in S3 with the receipt's sha256."""
    s3 = client(settings)
    for entry in receipt["objects"]:
        body = s3.get_object(Bucket=BUCKET, Key=entry["key"])["Body"].read()
        assert len(body) == entry["size"]
        assert hashlib.sha256(body).hexdigest() == entry["sha256"]


def test_policy_keeps_the_last_k_and_the_best():
    def checkpoint(step, **metrics):
        files = {"model.bin": "0" * 64}
        return Checkpoint(Path(f"step-{step}"), {"step": step, "metrics": metrics, "files": files})

    checkpoints = [
        checkpoint(1, validation_loss=0.5, validation_accuracy=0.7),
        checkpoint(2, validation_loss=0.2, validation_accuracy=0.6),
        checkpoint(3),  # mid-epoch: no validation metrics
        checkpoint(4, validation_loss=0.4, validation_accuracy=0.9),
        checkpoint(5),
        Checkpoint(Path("step-6"), None),
    ]
    choose_kept(checkpoints, RetainSettings.of(keep_last=2))
    reasons = {c.path.name: c.reasons for c in checkpoints}
    assert reasons == {
        "step-1": [],
        "step-2": ["best validation_loss (min): 0.2"],
        "step-3": [],
        "step-4": ["one of the last 2"],
        "step-5": ["one of the last 2"],
        "step-6": ["incomplete manifest: being written or damaged; not touched"],
    }
    for c in checkpoints:
        c.reasons.clear()
    choose_kept(
        checkpoints, RetainSettings.of(keep_last=1, metric="validation_accuracy", mode="max")
    )
    assert checkpoints[3].reasons == ["best validation_accuracy (max): 0.9"]


def test_the_checkpoint_training_will_export_is_kept():
    """The newest manifest names the best epoch's checkpoint (train.early_stopping), whatever
    retain's own metric says."""

    def checkpoint(step, best_step, **metrics):
        files = {"model.bin": "0" * 64}
        manifest = {"step": step, "metrics": metrics, "files": files, "best_step": best_step}
        return Checkpoint(Path(f"step-{step}"), manifest)

    checkpoints = [
        checkpoint(1, 1, validation_loss=0.5),
        checkpoint(2, 1, validation_loss=0.2),
        checkpoint(3, 1, validation_loss=0.3),
        checkpoint(4, 1, validation_loss=0.4),
    ]
    choose_kept(checkpoints, RetainSettings.of(keep_last=1))
    assert [c.reasons for c in checkpoints] == [
        ["the best epoch's, which training exports"],
        ["best validation_loss (min): 0.2"],
        [],
        ["one of the last 1"],
    ]


def test_deletes_only_proven_checkpoints(tmp_path, upload_settings, run_info, caplog):
    run_dir, receipts = tmp_path / "checkpoints" / "run-abc", tmp_path / "receipts"
    losses = {100: 0.5, 200: 0.2, 300: 0.4, 400: 0.45, 500: 0.6, 600: 0.3, 700: 0.35}
    made = {
        step: make_checkpoint(
            run_dir, step, {"model.bin": 1000, "optim/rank0.pt": 2000}, {"validation_loss": loss}
        )
        for step, loss in losses.items()
    }
    uploaded = {step: upload(made[step], run_info, upload_settings, receipts) for step in losses}
    # 600 and 700 have no receipt; 300 changed after its upload, 400 gained a file.
    for step in (600, 700):
        (receipts / f"{made[step].name}.json").unlink()
    (made[300] / "optim/rank0.pt").write_bytes(b"changed")
    (made[400] / "extra.bin").write_bytes(b"not uploaded")
    # A folder being written by some other writer: no manifest yet.
    torn = run_dir / "step-000000050"
    torn.mkdir()
    (torn / "model.bin").write_bytes(b"half")

    caplog.set_level("INFO")
    report = retain(
        tmp_path / "checkpoints",
        [receipts],
        KEEP_ONE,
        tmp_path / "report.json",
        s3_of(upload_settings),
    )

    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert deleted(report) == ["step-000000100", "step-000000500"]
    reasons = kept(report)
    assert reasons["step-000000050"] == [
        "incomplete manifest: being written or damaged; not touched"
    ]
    assert reasons["step-000000200"] == ["best validation_loss (min): 0.2"]
    assert reasons["step-000000600"] == ["no upload receipt"]
    assert reasons["step-000000700"] == ["one of the last 1"]
    assert "files changed since the upload: ['optim/rank0.pt']" in reasons["step-000000300"][0]
    assert "not uploaded ['extra.bin']" in reasons["step-000000400"][0]
    left = [torn.name] + [made[step].name for step in (200, 300, 400, 600, 700)]
    assert sorted(p.name for p in run_dir.iterdir()) == left  # and no lock files
    for step in (100, 500):
        assert f"deleted {made[step]}" in caplog.text
        assert_stored(uploaded[step], upload_settings)


@contextmanager
def paused_upload(source, receipt, run_info, settings):
    """An upload in a thread that stops at its first bytes sent until the `with` ends.

    Yields the event that is set once it is sending (and so holds the checkpoint's lock).
    """
    sending, resume, failures = threading.Event(), threading.Event(), []

    def progress(_):
        sending.set()
        resume.wait()

    def run():
        try:
            upload_checkpoint(
                source, source.name, run_info, settings, receipt, on_progress=progress
            )
        except Exception as error:
            failures.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield sending
    finally:
        resume.set()
        thread.join()
    assert not failures


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_checkpoint_under_its_first_upload_is_kept_until_the_receipt(
    tmp_path, upload_settings, run_info
):
    run_dir, receipts = tmp_path / "checkpoints", tmp_path / "receipts"
    old = make_checkpoint(run_dir, 100, {"model.bin": 12 * MIB})
    make_checkpoint(run_dir, 200, {"model.bin": 1000})
    receipt = receipts / "step-100.json"

    with paused_upload(old, receipt, run_info, upload_settings) as sending:
        assert sending.wait(timeout=120)
        report = retain(
            run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", s3_of(upload_settings)
        )
        assert deleted(report) == []
        assert kept(report)[old.name] == ["no upload receipt"]
    report = retain(run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", s3_of(upload_settings))

    assert deleted(report) == [old.name]
    assert_stored(json.loads(receipt.read_text()), upload_settings)


def test_checkpoint_under_a_repeated_upload_is_locked(tmp_path, upload_settings, run_info):
    run_dir, receipts = tmp_path / "checkpoints", tmp_path / "receipts"
    old = make_checkpoint(run_dir, 100, {"model.bin": 12 * MIB})
    make_checkpoint(run_dir, 200, {"model.bin": 1000})
    upload(old, run_info, upload_settings, receipts)  # an earlier receipt that proves it

    with paused_upload(old, receipts / "again.json", run_info, upload_settings) as sending:
        assert sending.wait(timeout=120)
        report = retain(
            run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", s3_of(upload_settings)
        )
        assert deleted(report) == []
        assert kept(report)[old.name] == ["locked: an upload of it is running"]
        assert (
            sha256_file(old / "model.bin")
            == json.loads((old / MANIFEST).read_text())["files"]["model.bin"]
        )
    report = retain(run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", s3_of(upload_settings))

    assert deleted(report) == [old.name]


def lock_waiters(path: Path) -> int:
    """Processes blocked in flock on `path`, from /proc/locks (`->` marks a waiter)."""
    inode = path.stat().st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return sum("->" in line and line.split()[-3].endswith(f":{inode}") for line in lines)


def test_uploader_waiting_on_a_deletion_finds_the_checkpoint_gone(
    tmp_path, upload_settings, run_info
):
    checkpoint = make_checkpoint(tmp_path / "checkpoints", 100, {"model.bin": 1000})
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(asdict(run_info)))
    receipt = tmp_path / "receipt.json"
    settings = json.dumps({"upload": asdict(upload_settings)})
    arguments = options(
        source=checkpoint,
        name="step-100",
        receipt=receipt,
        receipts_dir=tmp_path / "receipts",
        run_file=run_file,
        settings=settings,
    )
    command = [sys.executable, REPO / "scripts/upload.py", *arguments]

    with checkpoint_lock(checkpoint, wait=False):  # as retention holds it while deleting
        uploader = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        wait_for(
            lambda: lock_waiters(lock_path(checkpoint)) or uploader.poll() is not None,
            "the uploader never waited for the lock",
        )
        remove(checkpoint)
    _, stderr = uploader.communicate()

    assert uploader.returncode == 2
    assert "no such checkpoint folder" in stderr
    assert not receipt.exists()
    assert not (tmp_path / "receipts").exists()
    assert not lock_path(checkpoint).exists()


def test_a_waiter_whose_lock_file_was_removed_locks_again(tmp_path, upload_settings, run_info):
    """The lock file goes when its holder releases it; whoever waited on it holds a lock on a
    file that no longer exists, which would not stop retention: it must lock again."""
    checkpoint = make_checkpoint(tmp_path / "checkpoints", 100, {"model.bin": 12 * MIB})
    path = lock_path(checkpoint)
    holder = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    with paused_upload(checkpoint, tmp_path / "receipt.json", run_info, upload_settings) as sending:
        wait_for(lambda: lock_waiters(path), "the upload never waited for the lock")
        path.unlink()  # released the way checkpoint_lock releases it
        os.close(holder)
        assert sending.wait(timeout=120)
        with pytest.raises(CheckpointBusy), checkpoint_lock(checkpoint, wait=False):
            pass
    assert (tmp_path / "receipt.json").exists()


def test_cli_reports_and_logs_deletions(tmp_path, upload_settings, run_info):
    run_dir, receipts = tmp_path / "checkpoints", tmp_path / "receipts"
    old = make_checkpoint(run_dir, 100, {"model.bin": 1000})
    make_checkpoint(run_dir, 200, {"model.bin": 1000})
    upload(old, run_info, upload_settings, receipts)
    report = tmp_path / "report.json"
    arguments = options(
        checkpoint_dir=run_dir,
        receipts=receipts,
        report=report,
        settings=json.dumps({"retain": {"keep_last": 1}}),
    )
    result = subprocess.run(
        [sys.executable, REPO / "scripts/retain.py", *arguments], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert f"deleted {old}" in result.stderr
    assert deleted(json.loads(report.read_text())) == [old.name]


def test_leftovers_of_interrupted_deletions_are_finished(tmp_path):
    finished = subprocess.Popen([sys.executable, "-c", ""])
    finished.wait()
    abandoned = tmp_path / f"{DELETING_PREFIX}step-000000100.{finished.pid}"
    running = tmp_path / f"{DELETING_PREFIX}step-000000200.{os.getpid()}"
    for folder in (abandoned, running):
        folder.mkdir()
        (folder / "model.bin").write_bytes(b"x")

    retain(tmp_path, [], KEEP_ONE, tmp_path / "report.json", s3=None)  # no receipt: S3 not asked

    assert not abandoned.exists()
    assert running.exists()


def three_uploaded(tmp_path, upload_settings, run_info):
    """Three uploaded checkpoints of one run (steps 100, 200, 300), 300 the one kept last."""
    run_dir, receipts = tmp_path / "checkpoints" / "run-abc", tmp_path / "receipts"
    made = [make_checkpoint(run_dir, step, {"model.bin": 1000}) for step in (100, 200, 300)]
    uploaded = [upload(source, run_info, upload_settings, receipts) for source in made]
    return run_dir, receipts, made, uploaded


def test_a_checkpoint_whose_objects_left_s3_is_kept(tmp_path, upload_settings, run_info, caplog):
    """Objects removed or replaced in S3 after the receipt was written (a lifecycle rule, a
    person): the receipt alone proves nothing, the checkpoint stays and the log says why."""
    run_dir, receipts, made, uploaded = three_uploaded(tmp_path, upload_settings, run_info)
    s3 = client(upload_settings)
    gone = next(o for o in uploaded[0]["objects"] if o["path"] == "model.bin")
    s3.delete_object(Bucket=BUCKET, Key=gone["key"])
    replaced = next(o for o in uploaded[1]["objects"] if o["path"] == MANIFEST)
    s3.put_object(Bucket=BUCKET, Key=replaced["key"], Body=b"{}", ChecksumAlgorithm="SHA256")

    caplog.set_level("INFO")
    report = retain(run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", s3)

    assert deleted(report) == []
    reasons = kept(report)
    assert f"s3://{BUCKET}/{gone['key']} is gone" in reasons[made[0].name][0]
    assert f"s3://{BUCKET}/{replaced['key']} differs: size 2, expected" in reasons[made[1].name][0]
    assert all(source.is_dir() for source in made)
    assert f"kept {made[0]}: receipt does not match" in caplog.text


def test_an_unreachable_s3_keeps_every_checkpoint(tmp_path, upload_settings, run_info, monkeypatch):
    run_dir, receipts, made, _ = three_uploaded(tmp_path, upload_settings, run_info)
    (port,) = free_ports(1)
    with monkeypatch.context() as patched:
        patched.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        unreachable = client(replace(upload_settings, max_attempts=1))

    report = retain(run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", unreachable)

    assert deleted(report) == []
    reasons = kept(report)
    for source in made[:2]:
        assert reasons[source.name] == [
            f"S3 cannot be asked: cannot check bucket '{BUCKET}' at endpoint "
            f"http://127.0.0.1:{port}: Could not connect to the endpoint URL: "
            f'"http://127.0.0.1:{port}/{BUCKET}"'
        ]
    assert all(source.is_dir() for source in made)

    # The same receipts, S3 back: the older two go.
    report = retain(
        run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", client(upload_settings)
    )
    assert deleted(report) == [made[0].name, made[1].name]


def test_a_receipt_of_a_bucket_no_longer_used_keeps_only_what_it_covers(
    tmp_path, upload_settings, run_info, caplog
):
    """Receipts of an earlier upload.bucket (the local server's, before a user's own S3) stay
    under results/upload/receipts: the checkpoints the current bucket proves still go; one whose
    only receipt names the missing bucket is kept, and says so."""
    _, receipts, made, uploaded = three_uploaded(tmp_path, upload_settings, run_info)
    old_model = uploaded[0] | {"bucket": "bucket-before", "source": str(tmp_path / "old-model")}
    (receipts / "model-before.json").write_text(json.dumps(old_model))
    only_old = make_checkpoint(tmp_path / "checkpoints" / "run-old", 400, {"model.bin": 10})
    make_checkpoint(tmp_path / "checkpoints" / "run-old", 500, {"model.bin": 10})
    (receipts / "run-old.json").write_text(
        json.dumps(uploaded[0] | {"bucket": "bucket-before", "source": str(only_old)})
    )

    caplog.set_level("INFO")
    report = retain(
        tmp_path / "checkpoints",
        [receipts],
        KEEP_ONE,
        tmp_path / "report.json",
        s3_of(upload_settings),
    )

    assert deleted(report) == [made[0].name, made[1].name]
    (reason,) = kept(report)[only_old.name]
    assert reason.startswith("S3 cannot be asked: bucket 'bucket-before' at endpoint")
    assert "S3 cannot be asked about bucket 'bucket-before'" in caplog.text


def test_a_segment_upload_that_waited_on_an_upload_of_its_checkpoint_sends_nothing_again(
    tmp_path, upload_settings, run_info, caplog
):
    """Two segments' uploads at once (a rerun after an S3 failure, a fast next segment): the one
    that found no receipt and then waited for the checkpoint's lock finds the other's receipt
    proving it, and does not send the files a second time."""
    run_dir, receipts = tmp_path / "checkpoints" / "run-abc", tmp_path / "receipts"
    checkpoint = make_checkpoint(run_dir, 100, {"model.bin": 12 * MIB})
    receipt = receipts / run_dir.name / f"{checkpoint.name}.json"
    marker = tmp_path / "marker.json"
    marker.write_text(json.dumps({"run_dir": str(run_dir), "step": 100, "segment": 2}))
    caplog.set_level("INFO")
    indexes = []

    with paused_upload(checkpoint, receipt, run_info, upload_settings) as sending:
        assert sending.wait(timeout=120)
        segment = threading.Thread(
            target=lambda: indexes.append(
                upload_segment(marker, receipts, run_info, upload_settings)
            )
        )
        segment.start()
        wait_for(lambda: lock_waiters(lock_path(checkpoint)), "the segment never waited")
    segment.join(timeout=120)

    assert indexes == [{"segment": 2, "step": 100, "receipts": [str(receipt)], "not_uploaded": []}]
    assert caplog.text.count(f"uploading {checkpoint}") == 1
    assert "uploaded while this upload waited for it" in caplog.text
    assert not list(receipt.parent.glob("*.replaced-*"))
    assert_stored(json.loads(receipt.read_text()), upload_settings)
