"""What every stage script shares: `--settings`, logging, and how bad input ends a run."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from account_tax.errors import DataError
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


def run(main: Callable[[], object]) -> None:
    """Run a stage; bad input ends it with one clear line and exit status 2, not a traceback."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        main()
    except DataError as error:
        log.error("%s", error)
        sys.exit(2)
