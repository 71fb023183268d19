"""What every stage script shares: `--settings`, logging, and how bad input ends a run."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from account_tax.errors import DataError, WriteError
from account_tax.settings import load_settings

log = logging.getLogger("account_tax")


def parser(description: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--settings",
        type=load_settings,
        required=True,
        help="the workflow config: a JSON object, or the path of a config YAML "
        "(e.g. config/config.yaml)",
    )
    parser.add_argument(
        "--tracking",
        type=Path,
        help="the workflow's MLflow run file; when given, the stage logs its metrics and "
        "artifacts into that run",
    )
    return parser


def quiet_library_bars() -> None:
    """Turn off the download and weight-loading bars of Hugging Face and MLflow when stderr is not
    a terminal: in a rule's log file they are carriage-return noise. The libraries are reached
    through sys.modules: a stage that has not imported them does not need them."""
    if sys.stderr.isatty():
        return
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def run(main: Callable[[], object], who: str = "") -> None:
    """Run a stage; bad input ends it with one clear line and exit status 2, an output that
    cannot be written (a full disk) with one line and status 1: not a traceback. `who` goes
    into every log line (the rank of a training process)."""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {who}%(levelname)s %(name)s: %(message)s"
    )
    quiet_library_bars()
    try:
        main()
    except DataError as error:
        log.error("%s", error)
        sys.exit(2)
    except WriteError as error:
        log.error("%s", error)
        sys.exit(1)
