"""A real SLURM cluster on 127.0.0.1 for tests: munge, slurmctld and one slurmd per node, all
with their config, state, sockets, pids and logs in a temporary folder.

The Debian 12 packages (Slurm 22.05) come from `make system-packages`. Several
nodes are several slurmd daemons on this one machine, each with its own name and port, so a
multi-node job really spans two slurmd. A node may carry a stand-in GPU (gres `gpu` backed by
/dev/null): jobs that ask for it are scheduled and see CUDA_VISIBLE_DEVICES, but there is no GPU.

Inside a job the executor plugin's jobstep strips every SLURM_* variable, SLURM_CONF included,
before it calls `srun`, so the config must also be at /etc/slurm/slurm.conf: the cluster links it
there for its lifetime and removes the link when it stops; a link that a killed test run left
behind is recognised and replaced, any other config refused. Daemons are stopped by their pid
files, never by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from account_tax.ports import free_ports

BINARIES = [
    *("slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel"),
    *("munged", "mungekey"),
]
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


def _missing_binaries() -> list[str]:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [name for name in BINARIES if shutil.which(name, path=search) is None]


def missing_slurm() -> str | None:
    """None when SLURM is usable, else why not (the reason a test skips with)."""
    missing = _missing_binaries()
    if missing:
        return f"{missing} not installed: run `make system-packages` (as root)"
    return None


def _sbin(name: str) -> str:
    return shutil.which(name, path=os.pathsep.join(["/usr/sbin", "/sbin", os.environ["PATH"]]))


def machine() -> dict[str, int]:
    """CPUs and RealMemory as slurmd itself reports them (a node may not claim more)."""
    result = subprocess.run([_sbin("slurmd"), "-C"], capture_output=True, text=True, check=True)
    found = dict(item.split("=", 1) for item in result.stdout.split() if "=" in item)
    return {"cpus": int(found["CPUs"]), "memory_mb": int(found["RealMemory"])}


@dataclass
class SlurmCluster:
    """`nodes` slurmd daemons named n1, n2, ..., each with `cpus` CPUs (default: the machine's;
    several nodes share them) and an equal part of the machine's memory; one partition
    `partition` over all of them. `min_job_age` >= 120 keeps finished jobs visible to `squeue`
    long enough for the executor plugin's squeue status mode."""

    root: Path
    nodes: int = 1
    cpus: int | None = None
    gpus_per_node: int = 0
    partition: str = "debug"
    min_job_age: int = 300
    def_mem_per_cpu: int = 1000
    conf: Path = field(init=False)
    _pid_files: list[Path] = field(default_factory=list, init=False)
    _linked: bool = field(default=False, init=False)

    def __post_init__(self):
        self.root = Path(self.root)
        self.conf = self.root / "slurm.conf"
        self.node_names = [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    # -- configuration -------------------------------------------------------------------------

    def _write_config(self) -> None:
        root = self.root
        for folder in ("state", "log", "run", "munge", *(f"spool/{n}" for n in self.node_names)):
            (root / folder).mkdir(parents=True, exist_ok=True)
        host = machine()
        cpus = min(self.cpus or host["cpus"], host["cpus"])
        # Every slurmd checks its node line against the machine: leave the kernel some memory.
        memory = (host["memory_mb"] - 512) // self.nodes
        gres = f" Gres=gpu:{self.gpus_per_node}" if self.gpus_per_node else ""
        controller_port, *node_ports = free_ports(1 + len(self.node_names))
        node_lines = [
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port}"
            f" CPUs={cpus} RealMemory={memory}{gres} State=UNKNOWN"
            for name, port in zip(self.node_names, node_ports, strict=True)
        ]
        lines = [
            "ClusterName=ci",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={controller_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerType=sched/backfill",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "MailProg=/bin/true",
            # Without it a job gets the whole node's memory, and a second job never starts.
            f"DefMemPerCPU={self.def_mem_per_cpu}",
            "ReturnToService=2",
            f"MinJobAge={self.min_job_age}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool' / '%n'}",
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        if self.gpus_per_node:
            lines.append("GresTypes=gpu")
            # A stand-in device file: without File= the node is INVAL.
            (root / "gres.conf").write_text(
                "".join(
                    f"NodeName={name} Name=gpu File=/dev/null Count={self.gpus_per_node}\n"
                    for name in self.node_names
                )
            )
        lines += node_lines
        lines.append(
            f"PartitionName={self.partition} Nodes={','.join(self.node_names)} Default=YES"
            " MaxTime=INFINITE State=UP"
        )
        self.conf.write_text("\n".join(lines) + "\n")

    # -- daemons -------------------------------------------------------------------------------

    def _run(self, command: list[str]) -> None:
        result = subprocess.run(command, env=os.environ | self.env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}\n{self.logs()}"
            )

    def _wait_for_pid_file(self, path: Path, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not (path.exists() and path.read_text().strip()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no pid file {path} after {timeout} s\n{self.logs()}")
            time.sleep(0.1)

    def start(self) -> SlurmCluster:
        if left_by_a_killed_cluster(SYSTEM_CONF):
            SYSTEM_CONF.unlink()
        if SYSTEM_CONF.is_symlink():
            raise RuntimeError(
                f"{SYSTEM_CONF} links to {os.readlink(SYSTEM_CONF)}, whose slurmctld still runs"
                " (another test run's cluster?) or which is this machine's own config; refusing"
                " to replace it"
            )
        if SYSTEM_CONF.exists():
            raise RuntimeError(
                f"{SYSTEM_CONF} already exists: this machine has its own SLURM; refusing to"
                " replace its config"
            )
        self._write_config()
        munge = self.root / "munge"
        key = munge / "munge.key"
        self._run([_sbin("mungekey"), "--create", f"--keyfile={key}"])
        key.chmod(0o400)
        self._pid_files.append(munge / "munged.pid")
        self._run(
            [
                _sbin("munged"),
                "--force",
                f"--key-file={key}",
                f"--socket={munge / 'munge.socket'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={munge / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ]
        )
        self._wait_for_pid_file(munge / "munged.pid")
        SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SYSTEM_CONF.symlink_to(self.conf)
        self._linked = True
        run = self.root / "run"
        self._pid_files.append(run / "slurmctld.pid")
        self._run([_sbin("slurmctld"), "-f", str(self.conf)])
        self._wait_for_pid_file(run / "slurmctld.pid")
        for name in self.node_names:
            self._pid_files.append(run / f"slurmd-{name}.pid")
            self._run([_sbin("slurmd"), "-f", str(self.conf), "-N", name])
        self.wait_until_idle()
        return self

    def wait_until_idle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        states = ""
        while time.monotonic() < deadline:
            result = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %T"],
                env=os.environ | self.env,
                capture_output=True,
                text=True,
            )
            states = result.stdout.strip()
            lines = states.splitlines()
            if len(lines) == self.nodes and all(line.endswith(" idle") for line in lines):
                return
            time.sleep(0.2)
        raise RuntimeError(f"nodes not idle after {timeout} s: {states!r}\n{self.logs()}")

    def cancel_jobs(self, timeout: float = 15) -> None:
        """Cancel whatever is still queued or running in this cluster's partition and wait for it
        to end: a job step outlives its slurmd."""
        env = os.environ | self.env
        subprocess.run(["scancel", f"--partition={self.partition}"], env=env, capture_output=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = subprocess.run(
                ["squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i"],
                env=env,
                capture_output=True,
                text=True,
            )
            if result.returncode != 0 or not result.stdout.strip():
                return
            time.sleep(0.2)

    def stop(self) -> None:
        """Cancel leftover jobs, stop every daemon this cluster started (slurmd first, munge
        last) and remove the /etc/slurm/slurm.conf link."""
        try:
            if self._linked:
                self.cancel_jobs()
            for pid_file in reversed(self._pid_files):
                _stop_by_pid_file(pid_file)
        finally:
            self._pid_files.clear()
            if self._linked and SYSTEM_CONF.is_symlink():
                SYSTEM_CONF.unlink()
            self._linked = False

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*.log")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def left_by_a_killed_cluster(link: Path) -> bool:
    """Whether `link` is a symlink a SlurmCluster made and never removed: a test run killed
    before its cluster stopped leaves its temporary folder and the link behind. It is one when
    its target is gone, or when the target is a config of this module's layout (slurmctld's pid
    file in `run/` beside it) whose slurmctld no longer runs. Anything else, a machine's own
    config included, is not ours to remove."""
    if not link.is_symlink():
        return False
    target = link.parent / os.readlink(link)
    if not target.exists():
        return True
    pid_file = target.parent / "run" / "slurmctld.pid"
    try:
        ours = f"SlurmctldPidFile={pid_file}\n" in target.read_text()
    except OSError:
        return False
    if not ours:
        return False
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return True
    return not (_alive(pid) and _command(pid) == "slurmctld")


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _stop_by_pid_file(path: Path, timeout: float = 10) -> None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if not _alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running, and not a zombie left for a parent (PID 1 in a container) that never reaps."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
