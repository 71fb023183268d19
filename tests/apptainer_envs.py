"""The software environments as data: conda env files (`envs/*.yaml`), Apptainer definition files
(`containers/*.def`) and the rules that use them, read into plain Python for the tests.

conda and PyPI name some packages differently; every such name is mapped here explicitly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
ENVS = REPO / "envs"
CONTAINERS = REPO / "containers"
RULE_FILES = sorted((REPO / "workflow" / "rules").glob("*.smk"))

# conda-forge name -> PyPI name, where they differ.
CONDA_TO_PYPI = {
    "pytorch": "torch",
    "matplotlib-base": "matplotlib",
}
# Not Python packages the stages use: the interpreter and the installer.
NOT_PACKAGES = {"python", "pip"}
# Released in lockstep with another distribution: pinned, it must carry that one's version.
LOCKSTEP = {
    "mlflow-skinny": "mlflow",
    "mlflow-tracing": "mlflow",
}


@dataclass(frozen=True)
class Pin:
    """One package of an environment: its PyPI name and exact version (None when unpinned)."""

    written: str
    name: str
    version: str | None
    source: str  # "conda" or "pip"

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}" if self.version else self.name


@dataclass
class Env:
    path: Path
    channels: list[str]
    python: str | None
    pins: list[Pin]
    editable: list[Path] = field(default_factory=list)
    # The project's extra each editable install asks for ("" for none).
    extras: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem


CONDA_SPEC = re.compile(
    r"^(?P<name>[A-Za-z0-9_.\-]+)\s*(?:(?P<op>==|=|>=|<=|>|<|!=|~=)\s*(?P<version>[^\s=,*]+))?"
)


def pypi_name(conda_name: str) -> str:
    return canonicalize_name(CONDA_TO_PYPI.get(conda_name, conda_name))


def read_env(path: Path) -> Env:
    """A conda env file: channels, the python spec, the packages, and `-e` paths (resolved)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    python = None
    pins: list[Pin] = []
    editable: list[Path] = []
    extras: list[str] = []
    for entry in data.get("dependencies", []):
        if isinstance(entry, dict):
            for line in entry.get("pip", []):
                line = str(line).strip()
                if line.startswith("-e"):
                    target = line[2:].strip().strip('"')
                    location, _, extra = target.partition("[")
                    # As pip expands it, with the value the workflow sets: the repository's root.
                    location = location.replace("${ACCOUNT_TAX_ROOT}", str(path.parents[1]))
                    editable.append((path.parent / location).resolve())
                    extras.append(extra.rstrip("]"))
                    continue
                if line.startswith("-"):
                    raise ValueError(f"{path.name}: unsupported pip option line {line!r}")
                requirement = Requirement(line)
                specifiers = list(requirement.specifier)
                version = (
                    specifiers[0].version
                    if len(specifiers) == 1 and specifiers[0].operator == "=="
                    else None
                )
                pins.append(Pin(line, canonicalize_name(requirement.name), version, "pip"))
            continue
        match = CONDA_SPEC.match(str(entry).strip())
        if match is None:
            raise ValueError(f"{path.name}: cannot read the conda spec {entry!r}")
        name, op, version = match["name"], match["op"], match["version"]
        if name == "python":
            python = version
        if name in NOT_PACKAGES:
            continue
        pinned = version if op in {"=", "=="} else None
        pins.append(Pin(str(entry), pypi_name(name), pinned, "conda"))
    return Env(path, list(data.get("channels", [])), python, pins, editable, extras)


def env_files() -> list[Path]:
    return sorted(ENVS.glob("*.yaml"))


@dataclass
class Definition:
    path: Path
    header: dict[str, str]
    sections: dict[str, str]
    arguments: dict[str, str]

    @property
    def name(self) -> str:
        return self.path.stem

    def base_image(self) -> str:
        """`From:` with the `%arguments` defaults filled in."""
        image = self.header.get("From", "")
        return re.sub(
            r"\{\{\s*(\w+)\s*\}\}", lambda m: self.arguments.get(m[1], m[0]), image
        ).strip()

    def pins(self) -> dict[str, str]:
        """Every `name==version` that `%post` installs, by PyPI name."""
        found = re.findall(
            r"(?<![\w.\-=])([A-Za-z0-9][A-Za-z0-9._\-]*)==([0-9][^\s\\'\";]*)",
            self.sections.get("post", ""),
        )
        return {canonicalize_name(name): version for name, version in found}


def read_definition(path: Path) -> Definition:
    """An Apptainer definition file: header keywords, sections by name, build-arg defaults."""
    header: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("%"):
            current = stripped[1:].split()[0]
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
        elif stripped and not stripped.startswith("#") and ":" in stripped:
            key, _, value = stripped.partition(":")
            header[key.strip()] = value.strip()
    text = {name: "\n".join(lines) for name, lines in sections.items()}
    arguments = {}
    for line in text.get("arguments", "").splitlines():
        key, equals, value = line.strip().partition("=")
        if equals:
            arguments[key.strip()] = value.strip()
    return Definition(path, header, text, arguments)


@dataclass(frozen=True)
class Rule:
    name: str
    file: Path
    conda: str | None
    container: str | None
    script: str | None
    runs_command: bool

    def conda_env(self) -> Path | None:
        """The env file, as Snakemake resolves it: relative to the rule's own file."""
        return (self.file.parent / self.conda).resolve() if self.conda else None


def directive(block: str, name: str) -> str | None:
    """A one-value directive (`conda:`, `container:`) in snakefmt's layout."""
    match = re.search(rf'^ {{4}}{name}:\s*\n?\s*"([^"]+)"', block, re.M)
    return match[1] if match else None


def read_rules(files: list[Path] = RULE_FILES) -> list[Rule]:
    rules = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", text, re.M | re.S):
            block = match[2]
            script = re.search(r'script=script\("(\w+)"\)', block)
            rules.append(
                Rule(
                    name=match[1],
                    file=path,
                    conda=directive(block, "conda"),
                    container=directive(block, "container"),
                    script=script[1] if script else None,
                    runs_command=bool(re.search(r"^ {4}(shell|script|run|notebook):", block, re.M)),
                )
            )
    return rules
