"""Provenance in MLflow: one run per workflow run, shared by every rule through a run file.

The first rule creates the run (tags: code version, package versions, config hash, the sha256 of
every raw input, host, command line; params: the whole config, namespaced by section) and writes
`run.json`. Each stage records its metrics and small artifacts under its own name
(`clean/rows_in`) in a spool beside the run file; the last hook logs them, adds each rule's wall
time and peak memory and closes the run. A job opens the store only to register or fetch a model.

The store is `MLFLOW_TRACKING_URI` when set (a server; its token stays in the environment),
else a local SQLite file under the results folder. Nothing from the environment is logged.

MLflow creates a new SQLite store's tables on first use (alembic migrations, several seconds); two
processes doing that at once break each other's migrations. So the run is created under an
exclusive lock on `<database>.lock` beside the database: the first workflow run creates the
store and the experiment, the other waits and then adds its run to them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil

from account_tax.errors import DataError
from account_tax.io import sha256_file, write_json
from account_tax.rule_resources import benchmarks
from account_tax.settings import SectionView
from account_tax.stage_log import flatten, read_run, spool_dir

log = logging.getLogger(__name__)

TRACKED_PACKAGES = (
    "snakemake",
    "polars",
    "torch",
    "transformers",
    "peft",
    "deepspeed",
    "scikit-learn",
    "mlflow",
    "boto3",
)
SECRET_WORDS = re.compile(r"secret|token|password|passwd|credential|access.?key", re.I)


@dataclass(frozen=True)
class TrackingSettings(SectionView):
    SECTION = "tracking"
    experiment: str
    # None: the SQLite store under results/tracking/.
    tracking_uri: str | None
    # None: the start time and the config's hash.
    run_name: str | None


def without_userinfo(uri: str) -> str:
    """A URI with any `user:password@` removed, safe to write down."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def check_configured_uri(configured: str | None) -> None:
    """A config file holds no secret: a user or password in `tracking.tracking_uri`, which goes
    to the run's params and its config.json, is refused without writing it out."""
    if configured and without_userinfo(configured) != configured:
        raise DataError(
            "config `tracking.tracking_uri` holds a user name or password, which never belong in"
            " a config file: set the URI with them in MLFLOW_TRACKING_URI, or set"
            " MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
        )


def redact_command(argv: Iterable[str]) -> str:
    """The command line with values of secret-looking options and assignments masked."""
    words: list[str] = []
    mask_next = False
    for word in argv:
        if mask_next:
            words.append("***")
            mask_next = False
            continue
        name, equals, _ = word.partition("=")
        if SECRET_WORDS.search(name):
            if equals:
                words.append(f"{name}=***")
            else:
                words.append(word)
                mask_next = word.startswith("-")
            continue
        words.append(word)
    return " ".join(words)


def tracking_uri(results_dir: Path, configured: str | None = None) -> str:
    """`MLFLOW_TRACKING_URI`, else the config's URI, else a SQLite store under `results_dir`."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or configured
    if uri:
        return uri
    results_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(results_dir / 'mlflow.db').resolve()}"


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive lock beside a SQLite store's database file; nothing for other stores.

    The lock file stays: removing it on release would let a waiting process lock a file that
    no longer guards anything. The kernel releases the lock if its holder dies.
    """
    from sqlalchemy.engine import make_url

    database = make_url(uri).database if uri.startswith("sqlite:") else None
    if not database or database == ":memory:":
        yield
        return
    path = Path(f"{database}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def config_hash(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def code_version(repo: Path) -> dict[str, str]:
    """Git commit and whether the working tree had uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return {"git_commit": "unknown", "git_dirty": "unknown"}
    return {"mlflow.source.git.commit": commit, "git_commit": commit, "git_dirty": str(dirty)}


def package_versions() -> dict[str, str]:
    versions = {}
    for package in TRACKED_PACKAGES:
        try:
            versions[f"version.{package}"] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return versions


def client(uri: str):
    from mlflow import MlflowClient

    if without_userinfo(uri) != uri:
        # MLflow prints a server run's address as the run ends, the URI's password with it.
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    return MlflowClient(tracking_uri=uri)


def start_run(
    config: Mapping[str, Any],
    raw_inputs: Iterable[Path],
    run_file: Path,
    *,
    repo: Path,
    command: str,
) -> dict[str, Any]:
    """Create the workflow run, log its tags and params, and write `run_file`; return its record."""
    tracking = TrackingSettings.of(config["tracking"])
    uri = tracking_uri(run_file.parent, tracking.tracking_uri)
    experiment_name = tracking.experiment
    # The client creates a new store's tables; the lock also keeps a second run from creating
    # the same experiment.
    with store_lock(uri):
        mlflow = client(uri)
        experiment = mlflow.get_experiment_by_name(experiment_name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        elif uri.startswith("sqlite:"):
            artifacts = (run_file.parent / "artifacts").resolve()
            experiment_id = mlflow.create_experiment(experiment_name, artifacts.as_uri())
        else:
            experiment_id = mlflow.create_experiment(experiment_name)

    digest = config_hash(config)
    tags = {
        "config_sha256": digest,
        "host": socket.gethostname(),
        "command": command,
        **code_version(repo),
        **package_versions(),
    }
    for path in raw_inputs:
        tags[f"input_sha256.{path.name}"] = sha256_file(path)
        tags[f"input_path.{path.name}"] = str(path)
    started = datetime.now(UTC)
    run_name = tracking.run_name or f"{started:%Y%m%d-%H%M%S}-{digest[:8]}"
    run = mlflow.create_run(experiment_id, run_name=run_name, tags=tags)
    run_id = run.info.run_id
    log_batch(mlflow, run_id, params=flatten(config))
    config_copy = run_file.parent / "config.json"
    write_json(config_copy, config)
    mlflow.log_artifact(run_id, str(config_copy))
    record = {
        "run_id": run_id,
        "run_name": run_name,
        "experiment_id": experiment_id,
        "experiment_name": experiment_name,
        "tracking_uri": without_userinfo(uri),
        "started_at": started.timestamp(),
        "status": "RUNNING",
        # The workflow process: if it dies without closing the run, the next start does.
        "owner": {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_started_at": psutil.Process().create_time(),
        },
    }
    write_json(run_file, record)
    return record


def owner_alive(owner: Mapping[str, Any]) -> bool:
    """Whether the workflow process that started a run still runs. On another host it cannot be
    seen; there Snakemake's lock on the working folder says it has ended."""
    if owner.get("host") != socket.gethostname():
        return False
    try:
        return psutil.Process(owner["pid"]).create_time() == owner["pid_started_at"]
    except psutil.NoSuchProcess:
        return False


def close_abandoned_run(run_file: Path) -> dict[str, Any] | None:
    """Close, as KILLED, the run a workflow left RUNNING when it was killed before its onerror
    hook could run (SIGKILL, a lost node); returns its record, or None when there is none.

    Called as the next workflow run starts in the same folder, which Snakemake has locked."""
    if not run_file.exists():
        return None
    mlflow, run = run_client(run_file)
    if run["status"] != "RUNNING" or owner_alive(run["owner"]):
        return None
    # What its jobs finished before the kill is still theirs.
    log_spooled(mlflow, run_file)
    if mlflow.get_run(run["run_id"]).info.status == "RUNNING":
        owner = run["owner"]
        reason = (
            f"workflow process {owner['pid']} on {owner['host']} ended without closing it;"
            f" closed by the next start (process {os.getpid()})"
        )
        mlflow.set_tag(run["run_id"], "closed_because", reason)
        mlflow.set_terminated(run["run_id"], status="KILLED")
    run |= {"status": "KILLED", "finished_at": time.time()}
    write_json(run_file, run)
    return run


def run_client(run_file: Path):
    """The client for the run in `run_file`; the environment's URI wins (it may hold a token)."""
    run = read_run(run_file)
    return client(os.environ.get("MLFLOW_TRACKING_URI") or run["tracking_uri"]), run


def log_batch(
    mlflow,
    run_id: str,
    *,
    metrics: Iterable[tuple[str, float, int]] = (),
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
    timestamp: int | None = None,
) -> None:
    """Log `(name, value, step)` metrics, params and tags in as few calls as MLflow allows."""
    from mlflow.entities import Metric, Param, RunTag

    now = timestamp or int(time.time() * 1000)
    metric_list = [Metric(name, value, now, step) for name, value, step in metrics]
    param_list = [Param(k, v) for k, v in (params or {}).items()]
    tag_list = [RunTag(k, v) for k, v in (tags or {}).items()]
    # MLflow caps one batch at 1000 metrics and 100 params or tags.
    for start in range(0, len(metric_list), 1000):
        mlflow.log_batch(run_id, metrics=metric_list[start : start + 1000])
    for start in range(0, max(len(param_list), len(tag_list)), 100):
        mlflow.log_batch(
            run_id, params=param_list[start : start + 100], tags=tag_list[start : start + 100]
        )


def log_spooled(mlflow, run_file: Path) -> None:
    """Log the spool's records into MLflow in the order they were written, each removed once
    logged."""
    folder = spool_dir(run_file)
    records = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for path in records:
        record = json.loads(path.read_text(encoding="utf-8"))
        run_id, trial = record["run_id"], record["trial"]
        if trial is not None:
            # Noted in the record as soon as it exists, so that a pass cut short by a kill and
            # repeated by the next start logs into the same nested run instead of a second one.
            if "trial_run_id" not in record:
                parent = mlflow.get_run(run_id)
                record["trial_run_id"] = mlflow.create_run(
                    parent.info.experiment_id,
                    run_name=trial["name"],
                    tags={"mlflow.parentRunId": run_id, "sweep/trial": trial["name"]},
                ).info.run_id
                write_json(path, record)
            run_id = record["trial_run_id"]
        log_batch(
            mlflow,
            run_id,
            metrics=record["metrics"],
            params=trial and trial["params"],
            tags=record["tags"],
            timestamp=record["timestamp"],
        )
        for file, artifact_path in record["artifacts"]:
            if (folder / file).is_dir():
                mlflow.log_artifacts(run_id, str(folder / file), artifact_path=artifact_path)
            else:
                mlflow.log_artifact(run_id, str(folder / file), artifact_path=artifact_path)
        if trial is not None:
            mlflow.set_terminated(run_id, "FINISHED")
        # The record first: its copies without it are an orphan, which `finish_run` removes.
        path.unlink()
        shutil.rmtree(folder / path.stem, ignore_errors=True)


def remove_orphan_copies(run_file: Path) -> None:
    """Remove the artifact copies of records never written: a job that died inside `spool`
    leaves them. Call it only when no job of the workflow runs: a running job may be between
    its copies and its record."""
    folder = spool_dir(run_file)
    orphans = [
        path
        for path in (folder.iterdir() if folder.is_dir() else ())
        if path.is_dir() and not (folder / f"{path.name}.json").exists()
    ]
    for path in orphans:
        log.warning("removing %s: a job ended before it recorded these copies", path)
        shutil.rmtree(path)


def finish_run(run_file: Path, benchmark_root: Path, status: str, *, repo: Path) -> dict[str, Any]:
    """Log the spooled records of the stages, every rule's wall time and peak memory, the code
    version at the end, and the status.

    A rule whose benchmark file predates the run did not run in it: its outputs were up to date
    and reused from an earlier run, and the `reused_rules` tag names it.
    """
    mlflow, run = run_client(run_file)
    log_spooled(mlflow, run_file)
    remove_orphan_copies(run_file)
    metrics: list[tuple[str, float, int]] = []
    reused: list[str] = []
    for rule, (path, numbers) in benchmarks(benchmark_root).items():
        # A sweep trial's name (`lora.r~8`) has characters MLflow refuses in a metric's name.
        rule = re.sub(r"[^\w\-. :/]", "-", rule)
        metrics += [(f"{rule}/{name}", value, 0) for name, value in numbers.items()]
        if path.stat().st_mtime < run["started_at"]:
            reused.append(rule)
    tags = {**code_version(repo), "reused_rules": ",".join(reused) or "none"}
    log_batch(mlflow, run["run_id"], metrics=metrics, tags=tags)
    mlflow.set_terminated(run["run_id"], status=status)
    run |= {"status": status, "finished_at": time.time(), "reused_rules": reused}
    write_json(run_file, run)
    return run
