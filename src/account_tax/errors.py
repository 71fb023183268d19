"""The errors that end a stage with one clear line instead of a traceback."""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class DataError(Exception):
    """Input that the workflow cannot use. The message is meant for the person who owns the file."""


class WriteError(Exception):
    """An output or a checkpoint could not be written (a full disk, a refused permission). The
    message says what was being written, where, and the system's reason."""


DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# torch's writer reports a full disk as a RuntimeError without errno: below this much free
# space where it wrote, that is what it was.
NEARLY_FULL_BYTES = 1 << 20


def free_bytes(path: Path) -> int:
    """Free space on the file system that holds `path` (or its nearest existing parent)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return shutil.disk_usage(existing).free


def write_failure(what: str, where: Path, code: int | None, reason: str) -> str:
    if code in DISK_FULL:
        return f"disk full at {where}: writing {what} failed ({reason})"
    return f"cannot write {what} at {where}: {reason}"


@contextmanager
def writing(what: str, where: Path) -> Iterator[None]:
    """Within the block, a failed write becomes a WriteError naming `what` and `where`."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or str(error)
        raise WriteError(write_failure(what, where, error.errno, reason)) from error
    except RuntimeError as error:
        if free_bytes(where) >= NEARLY_FULL_BYTES:
            raise
        raise WriteError(write_failure(what, where, errno.ENOSPC, str(error))) from error
