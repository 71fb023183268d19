"""What a job logs to the workflow's MLflow run: records in a spool beside the run file, which
`workflow_run.finish_run` (or the next start, after a kill) logs into the run.

So a job never imports MLflow (some 3 s) or opens its store (2 s more), and on a cluster only the
workflow process writes to the store. Every function does nothing without a run file, so every
script also runs on its own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from account_tax.io import write_json

log = logging.getLogger(__name__)

MAX_PARAM_LENGTH = 6000  # MLflow's limit for one param value


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config to `section/key` params; lists as JSON, cut to MLflow's length limit."""
    params: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            params |= flatten(value, f"{name}/")
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        if len(text) > MAX_PARAM_LENGTH:
            text = text[: MAX_PARAM_LENGTH - 1] + "…"
        params[name] = text
    return params


def read_run(run_file: Path) -> dict[str, Any]:
    """The workflow run's record (`run.json`, written by `workflow_run`); its one reader."""
    return json.loads(run_file.read_text(encoding="utf-8"))


def spool_dir(run_file: Path) -> Path:
    return run_file.parent / "spool"


def spool(
    run_file: Path | None,
    name: str,
    *,
    metrics: Iterable[tuple[str, float, int]] = (),
    tags: Mapping[str, str] | None = None,
    artifacts: Iterable[tuple[Path, str]] = (),
    trial: Mapping[str, Any] | None = None,
) -> None:
    """Write one record for the workflow's run. Artifacts are copied: a temporary output may be
    gone when the record is logged."""
    if run_file is None:
        return
    if not run_file.exists():
        log.warning(
            "no MLflow run file at %s (workflow started without hooks?): not logged", run_file
        )
        return
    folder = spool_dir(run_file)
    # Names sort in the order the records were written.
    stem = f"{time.time_ns():020d}-{os.getpid()}-" + re.sub(r"[^\w.-]", "-", name)
    copied = []
    for index, (path, artifact_path) in enumerate(artifacts):
        target = folder / stem / str(index) / path.name
        if path.is_dir():
            shutil.copytree(path, target)
        else:
            target.parent.mkdir(parents=True)
            shutil.copy2(path, target)
        copied.append([target.relative_to(folder).as_posix(), artifact_path])
    record = {
        "run_id": read_run(run_file)["run_id"],
        "timestamp": int(time.time() * 1000),
        "metrics": [[name, float(value), int(step)] for name, value, step in metrics],
        "tags": {k: str(v) for k, v in (tags or {}).items()},
        "artifacts": copied,
        "trial": trial,
    }
    write_json(folder / f"{stem}.json", record)
    log.info("recorded %s for MLflow run %s", name, record["run_id"])


def log_stage(
    run_file: Path | None,
    stage: str,
    metrics: Mapping[str, float] | None = None,
    artifacts: Iterable[Path] = (),
    tags: Mapping[str, str] | None = None,
) -> None:
    """A stage's metrics and tags as `<stage>/<name>`, its artifacts under `<stage>/`."""
    spool(
        run_file,
        stage,
        metrics=[(f"{stage}/{k}", v, 0) for k, v in (metrics or {}).items()],
        tags={f"{stage}/{k}": v for k, v in (tags or {}).items()},
        artifacts=[
            (path, f"{stage}/{path.name}" if path.is_dir() else stage) for path in artifacts
        ],
    )


def curves(
    records: Iterable[Mapping[str, Any]], keys: Iterable[str], prefix: str
) -> list[tuple[str, float, int]]:
    """Per-step series (`<prefix><key>` at each record's `step`): MLflow draws them as curves."""
    keys = tuple(keys)
    return [
        (f"{prefix}{key}", record[key], record["step"])
        for record in records
        for key in keys
        if record.get(key) is not None
    ]


def log_history(
    run_file: Path | None, stage: str, records: Iterable[Mapping[str, Any]], keys: Iterable[str]
) -> None:
    spool(run_file, f"{stage}-history", metrics=curves(records, keys, f"{stage}/"))


def log_trial(
    run_file: Path | None,
    name: str,
    settings: Mapping[str, Any],
    metrics: Mapping[str, float],
    history: Iterable[Mapping[str, Any]],
    keys: Iterable[str],
) -> None:
    """A sweep trial as a nested run of the workflow run: its train settings as params, its
    metrics, and its per-step curves as `history/<key>`."""
    # Apart from the metrics: a run shows each name's value at the latest step.
    spool(
        run_file,
        f"trial-{name}",
        metrics=[(k, v, 0) for k, v in metrics.items()] + curves(history, keys, "history/"),
        trial={"name": name, "params": flatten(settings, "train/")},
    )
