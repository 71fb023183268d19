"""Progress for people and for log files: tqdm's redrawn bar on a terminal; in a log file (a rule's
`log:`), one plain line every `LOG_EVERY_SECONDS` instead of carriage-return redraws."""

from __future__ import annotations

import logging
import sys
from typing import Any

from tqdm import tqdm

LOG_EVERY_SECONDS = 30.0

log = logging.getLogger("account_tax.progress")


class LogLines:
    """A file for tqdm that turns each redraw into one log line."""

    def write(self, text: str) -> None:
        line = text.strip("\r\n ")
        if line:
            log.info("%s", line)

    def flush(self) -> None:
        pass


def progress_bar(**options: Any) -> tqdm:
    if sys.stderr.isatty():
        return tqdm(**options)
    return tqdm(**options, file=LogLines(), mininterval=LOG_EVERY_SECONDS, ascii=True, ncols=80)
