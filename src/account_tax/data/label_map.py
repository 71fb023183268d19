"""The label map: every class's stable id and what the chart says of it.

The features stage writes it (`label_map.json`, beside the features and in every exported
model's folder); every later stage reads it through `LabelMap.read` and nowhere else. A class's
id is its place in `labels`. Beside `labels` and `counts` it lists, in label-id order, each
class's name, description and parent code (null where unknown) and whether it takes postings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from account_tax.errors import DataError
from account_tax.io import write_json

LABEL_MAP = "label_map.json"
"""The label map's file name, beside the features and in every exported model's folder."""


@dataclass(frozen=True)
class LabelMap:
    label_column: str
    labels: list[str]
    counts: dict[str, int]
    names: list[str | None]
    descriptions: list[str | None]
    parents: list[str | None]
    postable: list[bool]

    @classmethod
    def read(cls, path: Path) -> LabelMap:
        """A label map as written by features; one written before the chart's fields existed
        names no class and has every account take postings."""
        try:
            mapping = json.loads(path.read_text(encoding="utf-8"))
            labels = mapping["labels"]
            label_column = mapping["label_column"]
            counts = mapping["counts"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise DataError(f"{path}: not a label map this workflow wrote ({error!r})") from None
        unknown = [None] * len(labels)
        return cls(
            label_column=label_column,
            labels=labels,
            counts=counts,
            names=mapping.get("names") or unknown,
            descriptions=mapping.get("descriptions") or unknown,
            parents=mapping.get("parents") or unknown,
            postable=mapping.get("postable") or [True] * len(labels),
        )

    def write(self, path: Path) -> None:
        write_json(path, asdict(self))

    def class_texts(self) -> list[str]:
        """`name: description`, the name alone, or, for a class the chart leaves unnamed, its
        code."""
        return [
            ": ".join(part for part in (name or code, description) if part)
            for code, name, description in zip(
                self.labels, self.names, self.descriptions, strict=True
            )
        ]

    @property
    def named(self) -> bool:
        """Whether the chart names any class (so the head can start from the classes' texts)."""
        return any(self.names)

    def postable_mask(self) -> np.ndarray:
        """Per label id, whether the account takes postings."""
        return np.array(self.postable, dtype=bool)

    def hierarchy(self) -> list[str | None] | None:
        """The parent code of each class in label-id order, or None when no class has a parent
        (a flat chart)."""
        return self.parents if any(p is not None for p in self.parents) else None

    def with_samples(self) -> set[str]:
        """The classes the data has rows of."""
        return {label for label, count in self.counts.items() if count > 0}
