"""The on-disk contract of a checkpoint (or model) folder, shared by training, upload and
retention without importing torch: its name, its manifest, and its lock.

A complete checkpoint is a `step-<n>` folder whose `manifest.json`, written last, lists the
sha256 of every other file. Whoever reads, uploads or deletes a folder holds its lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from account_tax.io import sha256_file, write_json

MANIFEST = "manifest.json"
STEP_PREFIX = "step-"
STAGING_PREFIX = ".staging-"


class CheckpointBusy(Exception):
    """Another process holds the checkpoint's lock (an upload, or a deletion)."""


def step_name(step: int) -> str:
    # Zero-padded: name order is step order.
    return f"{STEP_PREFIX}{step:09d}"


# Snakemake marks a directory output with this file after the job; it is not the folder's content.
NOT_CONTENT = frozenset({".snakemake_timestamp"})


def checkpoint_files(directory: Path) -> set[str]:
    """Every file of the folder's content, as POSIX paths relative to it."""
    return {
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and p.name not in NOT_CONTENT
    }


class ManifestError(Exception):
    """A folder's manifest is missing (the folder is not sealed yet) or damaged."""


@dataclass(frozen=True)
class Manifest:
    """A sealed folder's manifest as read: its fields (`files`: name → sha256, and whatever the
    writer added) and the sha256 of its bytes."""

    fields: dict[str, Any]
    sha256: str

    @property
    def files(self) -> dict[str, str]:
        return self.fields["files"]

    @property
    def step(self) -> int | None:
        step = self.fields.get("step")
        return step if isinstance(step, int) and not isinstance(step, bool) else None


def read_manifest(directory: Path) -> Manifest:
    """The one reader of manifests (training, upload, retention, predict): whole JSON with a
    `files` map, or ManifestError saying what is wrong. Files are not hashed here."""
    path = directory / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(
            f"{directory}: no {MANIFEST}; not sealed (still being written?)"
        ) from None
    try:
        fields = json.loads(raw)
        files = fields["files"]
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise TypeError("`files` is not a map of names to sha256")
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise ManifestError(f"{directory}: {MANIFEST} is incomplete or damaged ({error})") from None
    return Manifest(fields, hashlib.sha256(raw).hexdigest())


def unlisted_or_missing(directory: Path, manifest: Manifest) -> tuple[list[str], list[str]]:
    """Files the folder holds that its manifest does not list, and listed files it lacks."""
    present = checkpoint_files(directory) - {MANIFEST}
    return sorted(present - manifest.files.keys()), sorted(manifest.files.keys() - present)


def changed_files(directory: Path, manifest: Manifest, names: Iterable[str]) -> list[str]:
    """Those of `names` that are missing or whose sha256 differs from the manifest's."""
    return [
        name
        for name in names
        if not (directory / name).is_file() or sha256_file(directory / name) != manifest.files[name]
    ]


def write_manifest(
    directory: Path, fields: dict[str, Any], digests: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Seal a folder: `fields` plus the sha256 of every file in it, written last, atomically;
    `digests` are sha256s already computed (by the training ranks, a share each)."""
    files = sorted(checkpoint_files(directory) - {MANIFEST})
    digests = digests or {}
    manifest = {
        **fields,
        "files": {name: digests.get(name) or sha256_file(directory / name) for name in files},
    }
    write_json(directory / MANIFEST, manifest)
    return manifest


def lock_path(directory: Path) -> Path:
    """Beside the checkpoint, not inside: the lock must outlive the folder it guards."""
    return directory.parent / f".{directory.name}.lock"


@contextmanager
def checkpoint_lock(directory: Path, wait: bool = True) -> Iterator[None]:
    """An exclusive flock on the checkpoint's lock file, held for the body of the `with`.

    The uploader waits for it; retention does not (`wait=False` raises CheckpointBusy). The file
    is removed on release, so a lock taken on a file that was removed meanwhile guards nothing:
    after locking, the path must still name the locked file, else lock again.
    """
    path = lock_path(directory)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise CheckpointBusy(f"{directory} is locked by another process") from None
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def content_sha256(directory: Path) -> str:
    """One hash for the content of a sealed folder: the sha256 of its manifest's file list (each
    file's name and sha256), so two folders with the same files have the same hash."""
    files = read_manifest(directory).files
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
