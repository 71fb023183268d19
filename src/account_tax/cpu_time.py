"""CPU time as the kernel counts it: whole, however short the work (Snakemake's benchmark files
sample a job's CPU, every 30 s after its first 15 s, and miss what came after the last reading)."""

from __future__ import annotations

import psutil


def process_cpu_seconds() -> float:
    """User and system CPU seconds of this process since it started, with its finished children's
    (a compiler, data workers)."""
    times = psutil.Process().cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def children_cpu_seconds() -> float:
    """User and system CPU seconds of this process's finished children and theirs: after a
    subprocess that waits for its own (Snakemake for its jobs), all of their CPU."""
    times = psutil.Process().cpu_times()
    return times.children_user + times.children_system
