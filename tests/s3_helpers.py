"""Helpers for the upload and retention tests: checkpoint folders laid out the way
`account_tax.training.checkpoint` writes them, and the names the tests share."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from account_tax.io import sha256_file, write_json
from account_tax.storage.manifest import (
    MANIFEST,
)

BUCKET = "checkpoints"
MIB = 1 << 20
# Unmistakable, so a test can look for it in every log and file.
SECRET = "test-secret-3b9f0c27-never-logged"


def make_checkpoint(
    run_dir: Path, step: int, files: dict[str, bytes | int], metrics: dict | None = None
) -> Path:
    """A complete checkpoint: the files, then manifest.json with their sha256, written last.

    A file given as an int gets that many random bytes.
    """
    directory = run_dir / f"step-{step:09d}"
    for relative, content in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(content) if isinstance(content, int) else content)
    digests = {name: sha256_file(directory / name) for name in files}
    manifest = {"step": step, "epoch": step / 100, "metrics": metrics or {}, "files": digests}
    write_json(directory / MANIFEST, manifest)
    return directory


def sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def options(**values) -> list[str]:
    """Command-line options from keywords: `run_file=path` gives `["--run-file", "path"]`."""
    return [
        item for key, value in values.items() for item in (f"--{key.replace('_', '-')}", str(value))
    ]
