"""The champion: which registered version holds `register.champion_alias`, and its fine-tuned
model fetched into a folder, where a warm start (`train.init_from: champion`) begins. Loads no
model library: init_model only copies files."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow.artifacts
import yaml
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode

from account_tax.errors import DataError
from account_tax.settings import SectionView
from account_tax.workflow_run import run_client

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegisterSettings(SectionView):
    SECTION = "register"
    enabled: bool
    name: str
    candidate_alias: str
    champion_alias: str


def current_version(client, name: str, alias: str):
    """The version holding `alias`, or None where the model or the alias does not exist yet.

    Any other failure of the registry (a server that does not answer, a refused login) is raised:
    read as "no champion", it would move the champion alias without the champion comparison.
    """
    try:
        model = client.get_registered_model(name)
    except MlflowException as error:
        if error.error_code == ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            return None
        raise
    version = model.aliases.get(alias)
    return None if version is None else client.get_model_version(name, version)


def fetch_champion_model(
    tracking: Path, settings: RegisterSettings, output: Path
) -> dict[str, Any]:
    """Copy the fine-tuned model of the version holding the champion alias into `output`, where a
    warm start (train.init_from: champion) begins; what was fetched."""
    client, run = run_client(tracking)
    uri = os.environ.get("MLFLOW_TRACKING_URI") or run["tracking_uri"]
    champion = current_version(client, settings.name, settings.champion_alias)
    if champion is None:
        # Not the environment's URI itself: it may hold a token.
        store = "the store MLFLOW_TRACKING_URI names" if uri != run["tracking_uri"] else uri
        raise DataError(
            f"no version of model {settings.name!r} holds alias {settings.champion_alias!r} in"
            f" {store}: no champion to start from (train once with train.init_from: none)"
        )
    with tempfile.TemporaryDirectory(prefix="init-model-") as scratch:
        mlmodel = mlflow.artifacts.download_artifacts(
            f"{champion.source}/MLmodel", dst_path=scratch, tracking_uri=uri
        )
        artifacts = yaml.safe_load(Path(mlmodel).read_text(encoding="utf-8"))["flavors"][
            "python_function"
        ]["artifacts"]
        fetched = mlflow.artifacts.download_artifacts(
            f"{champion.source}/{artifacts['model']['path']}", dst_path=scratch, tracking_uri=uri
        )
        shutil.copytree(fetched, output)
    log.info("champion version %s of %s fetched into %s", champion.version, settings.name, output)
    return {"version": champion.version, "run_id": champion.run_id, "source": champion.source}
