"""A process's own peak memory, for the benchmarks that measure a job in a process of its own."""

from pathlib import Path


def own_peak_rss_mb() -> float:
    """This process's resident high-water mark (Linux: `VmHWM`), in MB.

    Not getrusage's `ru_maxrss`: Linux carries into it, across the exec, the RSS the parent had
    when it forked, so a job started by a benchmark that holds its input rows would report at
    least the benchmark's own size.
    """
    status = Path("/proc/self/status").read_text()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))
    return int(kib) / 1024
