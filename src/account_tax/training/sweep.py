"""A sweep: the config's `sweep` section as trials (train settings that differ in the swept keys),
and the choice of the best trial by its exported model's validation macro-F1.

A trial is named by its values (`learning_rate~0.001__lora.r~16`), as Snakemake's Paramspace
names its instances, so that adding a value to the sweep adds trials and renames none: the
trials already trained keep their outputs. Each trial's train section is checked against the
schema with the config, so a wrong value stops the workflow before any job.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from account_tax.errors import DataError, writing
from account_tax.io import write_json
from account_tax.settings import SectionView, complete
from account_tax.training.settings import RUN_ONLY_KEYS
from account_tax.training.sweep_plot import plot_trials

SELECTED_BY = "validation_macro_f1"


@dataclass(frozen=True)
class SweepSettings(SectionView):
    SECTION = "sweep"
    # Dotted train keys and the values to try.
    parameters: dict[str, list[Any]]
    method: str
    trials: int
    seed: int


@dataclass(frozen=True)
class Trial:
    name: str
    # Dotted train keys (`lora.r`) and the values this trial gives them.
    values: dict[str, Any]
    # The whole train section of the trial, completed with the schema's defaults.
    train: dict[str, Any]


def value_text(value: Any) -> str:
    """A value as it reads in a trial's name (JSON without quotes: `0.001`, `cosine`, `null`)."""
    return json.dumps(value).strip('"').replace("/", "_").replace(" ", "")


def with_values(train: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the train section with the dotted keys set."""
    section = copy.deepcopy(dict(train))
    for key, value in values.items():
        *parents, last = key.split(".")
        node = section
        for parent in parents:
            node = node.setdefault(parent, {})
        node[last] = value
    return section


def combinations(sweep: SweepSettings) -> list[dict[str, Any]]:
    """Every combination of the swept values (grid), or `trials` of them drawn without repeats
    with the sweep's seed (random): the first of one seeded shuffle of the grid, so that asking
    for more trials keeps the ones drawn before."""
    keys = list(sweep.parameters)
    grid = [sweep.parameters[key] for key in keys]
    if sweep.method == "grid":
        return [dict(zip(keys, chosen, strict=True)) for chosen in itertools.product(*grid)]
    size = math.prod(len(values) for values in grid)
    order = list(range(size))
    random.Random(sweep.seed).shuffle(order)
    chosen = []
    for index in order[: sweep.trials]:
        values = {}
        for key, options in zip(reversed(keys), reversed(grid), strict=True):
            index, position = divmod(index, len(options))
            values[key] = options[position]
        chosen.append({key: values[key] for key in keys})
    return chosen


def trials(config: Mapping[str, Any]) -> list[Trial]:
    """The sweep's trials; none without swept parameters (the workflow trains once)."""
    sweep = SweepSettings.of(config["sweep"])
    if not sweep.parameters:
        return []
    run_only = sorted({key.split(".")[0] for key in sweep.parameters} & RUN_ONLY_KEYS)
    if run_only:
        raise DataError(
            f"sweep.parameters: {', '.join(f'train.{key}' for key in run_only)} change how a run"
            " goes, not what it learns: trials that differ only there would share one checkpoint"
            " folder; set them in the train section"
        )
    found = []
    for values in combinations(sweep):
        name = "__".join(f"{key}~{value_text(value)}" for key, value in values.items())
        try:
            train = complete({"train": with_values(config["train"], values)})["train"]
        except DataError as error:
            raise DataError(f"sweep trial {name}: {error}") from None
        found.append(Trial(name=name, values=values, train=train))
    return found


def best_trial(trials: Sequence[Trial], metrics: Mapping[str, Mapping[str, Any]]) -> Trial:
    """The trial whose exported model has the highest validation macro-F1; on a tie the
    earlier one. A trial without a validation score cannot be chosen."""
    scored = [t for t in trials if metrics[t.name].get(SELECTED_BY) is not None]
    if not scored:
        raise DataError(
            f"no sweep trial has a {SELECTED_BY} to choose by (is the validation split empty?)"
        )
    return max(scored, key=lambda t: (metrics[t.name][SELECTED_BY], -trials.index(t)))


def trial_table(trials: Sequence[Trial], metrics: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """One row per trial: its name, swept values and what its exported model reached."""
    return [
        {
            "trial": trial.name,
            **{key: value_text(value) for key, value in trial.values.items()},
            SELECTED_BY: metrics[trial.name].get(SELECTED_BY),
            "validation_accuracy": metrics[trial.name].get("validation_accuracy"),
            "exported_epoch": metrics[trial.name]["exported_epoch"],
            "epochs_run": metrics[trial.name]["epochs_run"],
            "stopped": metrics[trial.name]["stopped"],
            "training_minutes": metrics[trial.name]["training_minutes"],
        }
        for trial in trials
    ]


@dataclass(frozen=True)
class SelectPaths:
    trial_metrics: list[Path]  # in the order of the trials
    selected: Path  # the chosen trial's settings, a config the train rule reads
    trials_table: Path
    plot: Path


def select(config: Mapping[str, Any], paths: SelectPaths) -> tuple[Trial, list[dict]]:
    """Read every trial's metrics, choose the best, write its settings, the table of all trials
    and their plot; the chosen trial and the table."""
    found = trials(config)
    if len(found) != len(paths.trial_metrics):
        raise DataError(
            f"{len(paths.trial_metrics)} trial metrics files for the sweep's {len(found)} trials"
        )
    metrics = {
        trial.name: json.loads(path.read_text(encoding="utf-8"))
        for trial, path in zip(found, paths.trial_metrics, strict=True)
    }
    chosen = best_trial(found, metrics)
    rows = trial_table(found, metrics)
    write_json(paths.selected, {"train": chosen.train})
    with writing("the sweep's table", paths.trials_table):
        pl.DataFrame(rows).write_csv(paths.trials_table, separator="\t")
    plot_trials(rows, list(config["sweep"]["parameters"]), SELECTED_BY, chosen.name, paths.plot)
    return chosen, rows
