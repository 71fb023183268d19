"""A trained model folder's `training_info.json`: read by every stage that uses the model, and
kept apart from the model code so that reading it needs no torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRAINING_INFO = "training_info.json"
"""Beside the trained weights: the base model it was trained from, and the settings."""


def read_training_info(model_dir: Path) -> dict[str, Any]:
    """A trained model folder's training_info.json."""
    return json.loads((Path(model_dir) / TRAINING_INFO).read_text(encoding="utf-8"))
