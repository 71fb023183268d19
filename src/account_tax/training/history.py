"""The training history (`history.jsonl`): one JSON object per evaluation or epoch record, in the
segment's outputs and in every checkpoint. Written and read here only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from account_tax.errors import DataError

HISTORY = "history.jsonl"


def history_text(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def append_history(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(history_text([record]))


def read_history(path: Path) -> list[dict[str, Any]]:
    """The training history: one JSON object per line, blank lines skipped."""
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: line {number} is not a JSON object: {error}") from None
    return records
