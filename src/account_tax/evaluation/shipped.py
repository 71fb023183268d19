"""The candidate evaluate ships: which of the fine-tuned model, the baseline and their mix makes
the predictions, why, and what predict needs to reproduce its probabilities and decisions.
Evaluate writes it into metrics.json (`comparison.shipped`); predict, register and the served
model read it back through `read_shipped` (or `ShippedCandidate.from_dict`), never by key."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ShippedCandidate:
    candidate: str
    """`fine-tuned`, `baseline` or `ensemble` (account_tax.evaluation.assessment.CANDIDATES)."""
    why: str
    validation_macro_f1: dict[str, float]
    """Each candidate's validation macro-F1, which the choice rests on."""
    validation_difference_from_baseline: dict[str, dict[str, float]] | None
    """Each other candidate's lead over the baseline on validation, with its interval."""
    threshold: float | None
    """The auto-post threshold; None: every row goes to review."""
    novelty_threshold: float | None
    """The similarity to the nearest training record below which a record is novel (never
    posted); None: no record is."""
    baseline_temperature: float
    ensemble_weight: float
    ensemble_temperature: float
    verdict: str | None
    """Against the baseline on test; None when not judged (the baseline itself, no test rows)."""
    difference_from_baseline: dict[str, float] | None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ShippedCandidate:
        return cls(**{field.name: values.get(field.name) for field in fields(cls)})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_shipped(metrics: Path) -> ShippedCandidate:
    """The shipped candidate from evaluate's metrics.json."""
    evaluation = json.loads(metrics.read_text(encoding="utf-8"))
    return ShippedCandidate.from_dict(evaluation["comparison"]["shipped"])
