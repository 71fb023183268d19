"""How a training process stops on a signal, whoever sends it.

SIGTERM (SLURM at a time limit or on preemption, torchrun passing on a Ctrl-C or its own
SIGTERM), SIGINT and SIGHUP (the launcher's death, below) ask for a stop. Inside the step loop a
rank only notes the request; the ranks agree at the end of every step through the all-reduce the
step already does, so every rank stops after the same step and none is left waiting in a
collective. Outside the loop (loading, the final
export) a signal ends the process at once, as it would by default.

torchrun starts each worker in a session of its own, so a launcher killed with SIGKILL (with
Snakemake's process group) would leave its workers training to the end: each worker asks the
kernel for a SIGHUP when its parent dies. A signal of its own, not SIGTERM, so that the log can
say the launcher died: the parent's pid does not tell, since the kernel first hands the child to
another thread of the dying parent. The workers have no terminal (a session of their own), so no
other SIGHUP reaches them.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

PARENT_DIED = signal.SIGHUP
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, PARENT_DIED)
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def stop_cause(signum: int) -> str:
    """What a stop signal means, for the log."""
    if signum == PARENT_DIED:
        return "its launcher died"
    return f"{signal.Signals(signum).name} received"


class TrainingStopped(Exception):
    """Training stopped on a signal after a whole step; what was due to be saved is saved."""

    def __init__(self, signum: int, step: int) -> None:
        self.signum, self.step = signum, step
        super().__init__(f"stopped after step {step}: {stop_cause(signum)}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention for "ended by this signal"


def die_on_stop_signals() -> None:
    """A signal ends the process at once; for SIGINT Python would raise KeyboardInterrupt only
    when a blocking collective returns, which may be never."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def stop_with_parent() -> None:
    """SIGHUP to this process when its parent (the launcher, or Snakemake's job) dies."""
    if not sys.platform.startswith("linux"):
        log.info("not on Linux: training is not stopped with its launcher")
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, PARENT_DIED, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the request was in place
        os.kill(os.getpid(), PARENT_DIED)


class StopRequest:
    """The first stop signal received, if any."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def note(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            log.warning("%s: stopping after the current step", stop_cause(signum))
        self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None


@contextmanager
def stop_after_step() -> Iterator[StopRequest]:
    """Within the block a stop signal is noted, not acted on; afterwards it ends the process."""
    request = StopRequest()
    for signum in STOP_SIGNALS:
        signal.signal(signum, request.note)
    try:
        yield request
    finally:
        die_on_stop_signals()
