"""Apptainer for the tests: find (or unpack) the binary, check its runtime packages, and build
a cached image of one of the shipped definitions (containers/*.def).

The image is built the way that works on machines where a definition file's `%post` cannot run
(root without CAP_SYS_RESOURCE): a debootstrap sandbox of Debian bookworm with its Python 3.11
stands in for the definition's `From:` image, and the rest comes from the definition itself: the
pinned packages its `%post` installs (with `apptainer exec --writable`), its `%files`, the
project installed as its `%post` does (editable from /opt/account-tax/src; a run binds the
checkout's src/ there, so editing the code does not invalidate the image), its `%environment`;
then `apptainer build IMAGE SANDBOX`, and its `%test` runs in the image. The wheels are fetched
on the host with this environment's pip (its registry and settings), so the container needs no
network.

Images are cached under .cache/apptainer/images/, named by a hash of the definition and the
build steps.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from apptainer_envs import REPO, Definition, read_definition

CACHE = REPO / ".cache" / "apptainer"
# CI and the project's machines have the shared folder beside the repository.
SHARED_TOOLS = REPO.parent / "shared" / "tools"
# Debian package -> a program it installs.
RUNTIME_PACKAGES = {
    "squashfs-tools": "mksquashfs",
    "squashfuse": "squashfuse",
    "fuse2fs": "fuse2fs",
    "uidmap": "newuidmap",
    "debootstrap": "debootstrap",
}
SUITE = "bookworm"  # Debian 12: Python 3.11, as envs/*.yaml pin
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_DEFINITION = """\
Bootstrap: debootstrap
OSVersion: {suite}
MirrorURL: {mirror}
Include: python3 python-is-python3
"""
# Where containers/*.def install the project's package (their %files), bound over at run time.
PROJECT_DIR = "/opt/account-tax"
# Bump when the build steps below change, so cached images are rebuilt.
RECIPE = 2
SBIN = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/sbin"])


class Unavailable(Exception):
    """Apptainer cannot run here; the message says why (the tests skip with it)."""


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock file: two test runs never unpack or build the same thing at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start(command: list[str], *, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [str(part) for part in command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen, *, log: Path | None = None, started: float | None = None):
    """Wait for a command; on failure raise with the end of its output (kept in `log`)."""
    stdout, _ = process.communicate()
    command = " ".join(process.args)
    if log is not None:
        took = f" ({time.monotonic() - started:.0f} s)" if started is not None else ""
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ {command}{took}\n{stdout}\n")
    if process.returncode != 0:
        raise RuntimeError(f"{command[:300]} failed ({process.returncode}):\n{stdout[-4000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout)


def run(command: list[str], *, env: dict[str, str] | None = None, log: Path | None = None):
    """Run a command; on failure raise with the end of its output (and keep it in `log`)."""
    return finish(start(command, env=env), log=log, started=time.monotonic())


def which(program: str) -> str | None:
    return shutil.which(program, path=os.pathsep.join([os.environ.get("PATH", ""), SBIN]))


def check_runtime_packages() -> None:
    """Apptainer's runtime packages (and debootstrap) come from `make system-packages`."""
    missing = [package for package, program in RUNTIME_PACKAGES.items() if not which(program)]
    if missing:
        raise Unavailable(
            f"Apptainer's runtime packages are missing ({' '.join(missing)}): run"
            " `make system-packages` (as root)"
        )


def unpack_tarball() -> Path:
    """The relocatable Apptainer from ../shared/tools, unpacked once into the cache."""
    tarballs = sorted(SHARED_TOOLS.glob("apptainer-*.tar.gz"))
    if not tarballs:
        raise Unavailable(
            "Apptainer is not available: no `apptainer` on PATH and no "
            f"{SHARED_TOOLS}/apptainer-*.tar.gz to unpack"
        )
    tarball = tarballs[-1]
    target = CACHE / tarball.name.removesuffix(".tar.gz")
    binary = target / "apptainer" / "bin" / "apptainer"
    with locked(CACHE / "unpack.lock"):
        if not binary.is_file():
            scratch = Path(tempfile.mkdtemp(dir=CACHE, prefix="unpack-"))
            scratch.chmod(0o755)
            with tarfile.open(tarball) as archive:
                archive.extractall(scratch, filter="tar")
            shutil.rmtree(target, ignore_errors=True)
            scratch.rename(target)
    return binary


def mirror_url(suite: str = SUITE) -> str:
    """The Debian mirror this machine's apt sources use for `suite`, else deb.debian.org."""
    sources = Path("/etc/apt")
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file() or path.suffix not in {".list", ".sources", ""}:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.split()
                if (
                    "deb" in fields.get("types", [])
                    and suite in fields.get("suites", [])
                    and fields.get("uris")
                ):
                    return fields["uris"][0].rstrip("/")
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^\]]*\]", "", line.split("#")[0]).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                    return words[1].rstrip("/")
    return DEFAULT_MIRROR


@dataclass
class Apptainer:
    binary: Path
    home: Path  # the temporary folder for its config, cache and temporary files

    @classmethod
    def find(cls, home: Path) -> Apptainer:
        """`apptainer` from PATH, else the shared tarball unpacked; runtime packages checked."""
        on_path = shutil.which("apptainer")
        binary = Path(on_path) if on_path else unpack_tarball()
        check_runtime_packages()
        tool = cls(binary, home)
        run([binary, "--version"], env=tool.env())
        return tool

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment for Apptainer (and Snakemake): nothing written to the home folder."""
        folders = {
            "XDG_CACHE_HOME": self.home / "xdg-cache",
            "APPTAINER_CONFIGDIR": self.home / "config",
            "APPTAINER_CACHEDIR": self.home / "cache",
            "APPTAINER_TMPDIR": self.home / "tmp",
        }
        for folder in folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        path = os.pathsep.join([str(self.binary.parent), os.environ.get("PATH", ""), SBIN])
        return (os.environ if base is None else base) | {
            **{key: str(value) for key, value in folders.items()},
            "PATH": path,
        }

    @staticmethod
    def capability_args() -> list[str]:
        """Root on these machines lacks CAP_SYS_RESOURCE, which Apptainer asks for by default."""
        return ["--drop-caps", "CAP_SYS_RESOURCE"] if os.geteuid() == 0 else []

    def exec(self, image: Path, *command: str, args: list[str] = (), log: Path | None = None):
        return run(
            [self.binary, "exec", *self.capability_args(), *args, image, *command],
            env=self.env(),
            log=log,
        )


def runtime_binds() -> list[str]:
    """What a rule needs from the checkout: its scripts (by absolute path) and the package code."""
    return [
        "--bind",
        f"{REPO / 'scripts'}:{REPO / 'scripts'}:ro",
        "--bind",
        f"{REPO / 'src'}:{PROJECT_DIR}/src:ro",
    ]


def image_key(definition: Definition) -> str:
    recipe = {
        "recipe": RECIPE,
        "base": BASE_DEFINITION,
        "suite": SUITE,
        "definition": definition.path.read_text(encoding="utf-8"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def definition_image(tool: Apptainer, definition_file: Path) -> Path:
    """The cached image of a shipped definition (containers/*.def), built on first use."""
    definition = read_definition(definition_file)
    image = CACHE / "images" / f"{definition.name}-{image_key(definition)}.sif"
    if image.is_file():
        return image
    if os.geteuid() != 0:
        raise Unavailable(f"building {image.name} needs root (debootstrap); none is cached")
    with locked(CACHE / "build.lock"):
        if not image.is_file():
            for stale in [*CACHE.glob("build-*"), *CACHE.glob("trash-*")]:
                shutil.rmtree(stale, ignore_errors=True)  # left by an interrupted build
            build_image(tool, definition, image)
            for older in image.parent.glob(f"{definition.name}-*"):  # earlier versions
                if older.stem != image.stem:
                    older.unlink()
    return image


def remove_tree(path: Path) -> None:
    """Delete a build folder in the background: a sandbox is tens of thousands of files."""
    trash = path.with_name(f"trash-{path.name}")
    path.rename(trash)
    subprocess.Popen(["rm", "-rf", str(trash)], start_new_session=True)


def copy_files(definition: Definition, sandbox: Path) -> None:
    """The definition's `%files`: `source destination` lines, sources relative to the repository."""
    for line in definition.sections.get("files", "").splitlines():
        if not line.strip() or line.strip().startswith("#"):
            continue
        source, destination = line.split()
        target = sandbox / destination.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / source).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(REPO / source, target, ignore=ignore)
        else:
            shutil.copy2(REPO / source, target)


def build_image(tool: Apptainer, definition: Definition, image: Path) -> None:
    """Everything the definition says but its base: the packages its `%post` installs with pip,
    its `%files`, the project installed as `%post` does, its `%environment`; then its `%test`
    runs in the finished image. A definition that cannot build or pass its own test fails here."""
    requirements = [f"{name}=={version}" for name, version in definition.pins().items()]
    editable = re.findall(r"pip install --no-deps -e (\S+)", definition.sections.get("post", ""))
    image.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=CACHE, prefix="build-"))
    log = image.with_suffix(".log")
    log.write_text(f"building {image.name} from {definition.path.name}\n", encoding="utf-8")
    started = time.monotonic()
    try:
        # Wheels for the image, fetched and built on the host (same Python minor version)
        # while debootstrap builds the base.
        wheels = work / "wheels"
        pip_env = tool.env() | {"PIP_CACHE_DIR": str(CACHE / "pip")}
        pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", wheels]
        fetch = start([*pip_wheel, "pip", "setuptools>=77", *requirements], env=pip_env)
        base = work / "base.def"
        base.write_text(BASE_DEFINITION.format(suite=SUITE, mirror=mirror_url()))
        sandbox = work / "sandbox"
        try:
            run([tool.binary, "build", "--sandbox", sandbox, base], env=tool.env(), log=log)
        finally:
            finish(fetch, log=log, started=started)
        pip = f"/mnt/{next(wheels.glob('pip-*.whl')).name}/pip"
        install = ["python3", pip, "install", "--no-index", "--find-links", "/mnt"]
        install += ["--break-system-packages", "--root-user-action=ignore"]
        mount = ["--writable", "--bind", f"{wheels}:/mnt:ro"]
        tool.exec(sandbox, *install, *requirements, args=mount, log=log)
        copy_files(definition, sandbox)
        for project in editable:
            tool.exec(sandbox, *install, "--no-deps", "-e", project, args=mount, log=log)
        # Where `apptainer build` puts a definition's %environment.
        environment = sandbox / ".singularity.d" / "env" / "90-environment.sh"
        environment.write_text(definition.sections.get("environment", "") + "\n")

        for deb in (sandbox / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        partial = work / image.name
        # lz4: an eighth of the default compression time, for a slightly larger file.
        squash = ["--mksquashfs-args", "-comp lz4"]
        run([tool.binary, "build", *squash, partial, sandbox], env=tool.env(), log=log)
        test = definition.sections.get("test", "").strip()
        if test:
            tool.exec(partial, "/bin/sh", "-ec", test, log=log)
        partial.replace(image)
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"built in {time.monotonic() - started:.0f} s\n")
    finally:
        remove_tree(work)
