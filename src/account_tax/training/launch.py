"""torchrun, reporting a failed worker or a stop signal in one line instead of a traceback.

    python -m account_tax.training.launch --standalone --nproc_per_node 2 scripts/train.py ...

takes torchrun's arguments and runs it. When a worker fails, torchrun raises ChildFailedError,
and its command-line entry point prints a traceback and a table of the failures; the worker's own
log lines (a full disk, a stop signal) are what says why. Here the launcher adds one line naming
the first failed rank and its exit status, and exits with that status (128 + N for signal N, the
shell's convention). A stop signal to the launcher itself (SLURM's SIGTERM, Ctrl-C) is passed on
to the workers by torchrun, as always, and then said in one line too.
"""

from __future__ import annotations

import signal
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run


def exit_status(exitcode: int) -> int:
    """A worker's exit code as a shell status: a negative code means killed by that signal."""
    return 128 - exitcode if exitcode < 0 else exitcode or 1


def failure_line(rank: int, exitcode: int) -> str:
    how = (
        f"was killed by {signal.Signals(-exitcode).name}"
        if exitcode < 0
        else f"exited with status {exitcode}"
    )
    return f"training failed: rank {rank} {how}; its log lines above say why"


def main(argv: list[str] | None = None) -> int:
    try:
        run(parse_args(argv))
    except ChildFailedError as failed:
        rank, failure = failed.get_first_failure()
        print(failure_line(rank, failure.exitcode), file=sys.stderr, flush=True)
        return exit_status(failure.exitcode)
    except SignalException as stopped:
        print(f"training stopped: the launcher received {stopped.sigval.name}", file=sys.stderr)
        return 128 + stopped.sigval
    return 0


if __name__ == "__main__":
    sys.exit(main())
