"""Free local disk: delete old checkpoints, but only those whose upload to S3 is proven.

Kept per run folder (the parent of the `step-*` folders): the last `keep_last` complete
checkpoints by step, the best one by a metric of its manifest, and the one the newest manifest
names as the best epoch's (`best_step`: the model training exports). Any other checkpoint is
deleted only when all of these hold at the moment of deletion:

* an upload receipt names it as its source (the receipt exists only after every object was
  verified in S3);
* its lock is free: no upload of it is running (a running upload holds the lock for the whole
  transfer, and retention holds it while it deletes, so neither can start in the middle of the
  other);
* under that lock, S3 still holds every object of the receipt with the size and SHA-256
  checksum the upload stored (one HEAD per object, several at once: objects may have gone since,
  by a lifecycle rule, a person or a wrong bucket policy);
* and its files are exactly the receipt's objects and each file's SHA-256, hashed again now,
  equals the receipt's; so what is deleted is what S3 holds.

When S3 cannot be asked (unreachable, or it refuses the credentials), nothing is deleted.

A folder without a complete manifest (being written, or damaged) is never touched, nor is one
without a receipt. A checkpoint is deleted by renaming it out of the `step-*` namespace first, so
an interrupted deletion never leaves a half folder that looks like a checkpoint; such leftovers
are removed on the next run.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from account_tax.io import sha256_file, write_json
from account_tax.settings import SectionView
from account_tax.storage.manifest import (
    STEP_PREFIX,
    CheckpointBusy,
    ManifestError,
    checkpoint_files,
    checkpoint_lock,
    read_manifest,
)
from account_tax.storage.s3 import UploadError, check_bucket, missing_from_store, read_receipt

log = logging.getLogger(__name__)

DELETING_PREFIX = ".deleting-"


@dataclass(frozen=True)
class RetainSettings(SectionView):
    """The config's `retain` section."""

    SECTION = "retain"
    keep_last: int
    metric: str
    mode: str


@dataclass
class Checkpoint:
    path: Path
    manifest: dict[str, Any] | None
    reasons: list[str] = field(default_factory=list)

    @property
    def step(self) -> int | None:
        return self.manifest.get("step") if self.manifest else None

    def metric(self, name: str) -> float | None:
        """The metric's value; None when absent or not a finite number (it cannot be best)."""
        value = ((self.manifest or {}).get("metrics") or {}).get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return value if math.isfinite(value) else None


def complete_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest's fields if it is whole and names a step; its hashes are checked against
    the receipts later."""
    try:
        manifest = read_manifest(directory)
    except ManifestError:
        return None
    return manifest.fields if manifest.step is not None else None


def load_receipts(paths: Iterable[Path]) -> dict[Path, list[tuple[Path, dict[str, Any]]]]:
    """Receipts by the resolved source folder they name; folders are searched for `*.json`."""
    found: dict[Path, list[tuple[Path, dict[str, Any]]]] = {}
    for path in paths:
        for file in sorted(path.rglob("*.json")) if path.is_dir() else [path]:
            receipt = read_receipt(file)
            if receipt is None:
                log.warning("%s is not an upload receipt; ignored", file)
                continue
            found.setdefault(Path(receipt["source"]).resolve(), []).append((file, receipt))
    return found


def proven_by(directory: Path, receipt: dict[str, Any]) -> str | None:
    """None when the folder holds exactly the receipt's files (manifest.json among them), each
    with the receipt's sha256; else why not."""
    objects = {entry["path"]: entry for entry in receipt["objects"]}
    local = checkpoint_files(directory)
    if local != set(objects):
        return (
            f"files differ from the receipt: not uploaded {sorted(local - set(objects))}, "
            f"missing locally {sorted(set(objects) - local)}"
        )
    changed = [
        name for name in sorted(local) if sha256_file(directory / name) != objects[name]["sha256"]
    ]
    if changed:
        return f"files changed since the upload: {changed}"
    return None


def choose_kept(checkpoints: list[Checkpoint], settings: RetainSettings) -> None:
    """Give reasons to the checkpoints that stay: incomplete, last `keep_last`, best by the
    metric, or the one training will export (train.early_stopping)."""
    complete = sorted((c for c in checkpoints if c.manifest), key=lambda c: c.step)
    for checkpoint in checkpoints:
        if checkpoint.manifest is None:
            checkpoint.reasons.append("incomplete manifest: being written or damaged; not touched")
    for checkpoint in complete[-settings.keep_last :]:
        checkpoint.reasons.append(f"one of the last {settings.keep_last}")
    # The newest checkpoint names the best epoch's, which training will export at its end.
    exported = complete[-1].manifest.get("best_step") if complete else None
    for checkpoint in complete:
        if checkpoint.step == exported:
            checkpoint.reasons.append("the best epoch's, which training exports")
    scored = [c for c in complete if c.metric(settings.metric) is not None]
    if scored:
        pick = min if settings.mode == "min" else max
        best = pick(scored, key=lambda c: c.metric(settings.metric))
        best.reasons.append(
            f"best {settings.metric} ({settings.mode}): {best.metric(settings.metric)}"
        )


def delete_if_proven(
    checkpoint: Checkpoint, receipts: list[tuple[Path, dict[str, Any]]], s3
) -> dict[str, Any] | None:
    """Delete the checkpoint under its lock if a receipt proves it, in S3 and locally; else
    record why not."""
    if not receipts:
        checkpoint.reasons.append("no upload receipt")
        return None
    try:
        with checkpoint_lock(checkpoint.path, wait=False):
            if not checkpoint.path.is_dir():
                checkpoint.reasons.append("gone before it could be checked")
                return None
            problems = []
            for receipt_path, receipt in receipts:
                try:
                    missing = missing_from_store(s3, receipt)
                except UploadError as error:
                    problems.append(f"{receipt_path}: S3 cannot be asked: {error}")
                    continue
                problem = (
                    f"S3 no longer holds the upload: {'; '.join(missing)}"
                    if missing
                    else proven_by(checkpoint.path, receipt)
                )
                if problem is None:
                    remove(checkpoint.path)
                    log.info(
                        "deleted %s (step %s): its upload to s3://%s/%s is proven by %s",
                        checkpoint.path,
                        checkpoint.step,
                        receipt["bucket"],
                        receipt["prefix"],
                        receipt_path,
                    )
                    return {
                        "path": str(checkpoint.path),
                        "step": checkpoint.step,
                        "receipt": str(receipt_path),
                        "s3": f"s3://{receipt['bucket']}/{receipt['prefix']}",
                    }
                problems.append(f"{receipt_path}: {problem}")
            checkpoint.reasons.append(f"receipt does not match: {'; '.join(problems)}")
    except CheckpointBusy:
        checkpoint.reasons.append("locked: an upload of it is running")
    return None


def unreachable_buckets(s3, receipts: list[tuple[Path, dict[str, Any]]]) -> dict[str, str]:
    """Why S3 cannot be asked about each bucket of the `receipts` that does not answer.

    Per bucket: an old receipt naming a bucket no longer used (an earlier `upload.bucket`, the
    local server's) keeps the checkpoints it covers, not every other checkpoint.
    """
    problems = {}
    for bucket in sorted({receipt["bucket"] for _, receipt in receipts}):
        try:
            check_bucket(s3, bucket)
        except UploadError as error:
            problems[bucket] = str(error)
    return problems


def remove(directory: Path) -> None:
    """Rename out of `step-*`, then delete: a crash midway leaves no half checkpoint behind."""
    doomed = directory.with_name(f"{DELETING_PREFIX}{directory.name}.{os.getpid()}")
    os.replace(directory, doomed)
    shutil.rmtree(doomed)


def remove_leftovers(checkpoint_dir: Path) -> None:
    """Finish deletions whose process died (the folder name ends with its pid)."""
    for leftover in sorted(checkpoint_dir.rglob(f"{DELETING_PREFIX}*")):
        pid = leftover.suffix.lstrip(".")
        if pid.isdigit() and pid_alive(int(pid)):
            continue
        log.info("removing %s, left by an interrupted deletion", leftover)
        shutil.rmtree(leftover)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, but another user's
    return True


def retain(
    checkpoint_dir: Path,
    receipt_paths: Iterable[Path],
    settings: RetainSettings,
    report_path: Path,
    s3,
) -> dict[str, Any]:
    """Apply the policy to every `step-*` folder under `checkpoint_dir`, asking S3 (the client
    `s3`) about every upload before its checkpoint goes; write a JSON report."""
    receipts = load_receipts(receipt_paths)
    remove_leftovers(checkpoint_dir)
    runs: dict[Path, list[Checkpoint]] = {}
    for directory in sorted(checkpoint_dir.rglob(f"{STEP_PREFIX}*")):
        if directory.is_dir():
            runs.setdefault(directory.parent, []).append(
                Checkpoint(directory, complete_manifest(directory))
            )
    for checkpoints in runs.values():
        choose_kept(checkpoints, settings)
    # Only the buckets of the receipts of checkpoints the policy lets go are asked about.
    doomed = [c for checkpoints in runs.values() for c in checkpoints if not c.reasons]
    unreachable = unreachable_buckets(
        s3, [found for c in doomed for found in receipts.get(c.path.resolve(), [])]
    )
    for bucket, problem in unreachable.items():
        log.warning(
            "S3 cannot be asked about bucket %r: the checkpoints whose receipts name it"
            " are kept: %s",
            bucket,
            problem,
        )
    kept, deleted = [], []
    for checkpoints in runs.values():
        for checkpoint in checkpoints:
            removed = None
            found = receipts.get(checkpoint.path.resolve(), [])
            askable = [(path, r) for path, r in found if r["bucket"] not in unreachable]
            if found and not askable and not checkpoint.reasons:
                checkpoint.reasons.append(
                    f"S3 cannot be asked: {unreachable[found[0][1]['bucket']]}"
                )
            if not checkpoint.reasons:
                removed = delete_if_proven(checkpoint, askable, s3)
            if removed:
                deleted.append(removed)
            else:
                log.info("kept %s: %s", checkpoint.path, "; ".join(checkpoint.reasons))
                kept.append(
                    {
                        "path": str(checkpoint.path),
                        "step": checkpoint.step,
                        "reasons": checkpoint.reasons,
                    }
                )
    report = {
        "checkpoint_dir": str(checkpoint_dir),
        "settings": asdict(settings),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "kept": kept,
        "deleted": deleted,
    }
    write_json(report_path, report)
    log.info("kept %d checkpoints, deleted %d; report %s", len(kept), len(deleted), report_path)
    return report
