"""The per-stage software environments agree with each other and with what the stages import.

conda cannot solve environments on the machines these tests run on (no conda channel is
reachable), so the conda side is checked for consistency only: pins against pyproject.toml,
rules against env files, the stages' imports (read with ast) against each env, and each
Apptainer definition file against its env. tests/test_apptainer.py builds a real image of the
data env and runs a rule in it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from apptainer_envs import (
    CONTAINERS,
    LOCKSTEP,
    REPO,
    env_files,
    read_definition,
    read_env,
    read_rules,
)
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from account_tax.training.settings import TrainSettings

SRC = REPO / "src"
PACKAGE = "account_tax"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
ENV_NAMES = [path.stem for path in env_files()]
RULES = read_rules()

# Import names that more than one distribution provides, and which of them really serve it.
IMPORT_PROVIDERS = {"mlflow": {"mlflow", "mlflow-skinny"}}


def pyproject_pins() -> dict[str, str]:
    """Every exact pin in pyproject.toml, optional groups included, by PyPI name."""
    project = PYPROJECT["project"]
    lines = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        lines += group
    pins = {}
    for line in lines:
        requirement = Requirement(line)
        specifiers = list(requirement.specifier)
        if len(specifiers) == 1 and specifiers[0].operator == "==":
            pins[canonicalize_name(requirement.name)] = specifiers[0].version
    return pins


def test_there_is_one_env_per_kind_of_stage():
    assert ENV_NAMES == ["data", "tracking", "train"]


def test_the_name_mapping_is_needed_and_used():
    # conda-forge calls them pytorch and matplotlib-base; the pins compare under PyPI names.
    train = read_env(REPO / "envs" / "train.yaml")
    written = {pin.written.split("=")[0]: pin.name for pin in train.pins}
    assert written["pytorch"] == "torch"
    assert written["matplotlib-base"] == "matplotlib"


@pytest.mark.parametrize("name", ENV_NAMES)
def test_env_pins_agree_with_pyproject(name):
    env = read_env(REPO / "envs" / f"{name}.yaml")
    pins = pyproject_pins()
    assert env.channels[0] == "conda-forge"
    assert env.python is not None, f"{name}.yaml: no python version"
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(env.python + ".0"), (
        f"{name}.yaml: python={env.python} is outside requires-python"
    )
    disagree = []
    for pin in env.pins:
        assert pin.version, f"{name}.yaml: {pin.written!r} is not pinned to one version"
        expected = pins.get(pin.name) or pins.get(LOCKSTEP.get(pin.name, ""))
        if expected is not None and pin.version != expected:
            disagree.append(f"{pin.written} (pyproject.toml: {expected})")
    assert not disagree, f"{name}.yaml disagrees with pyproject.toml: {disagree}"


@pytest.mark.parametrize("name", ENV_NAMES)
def test_env_installs_the_project_from_this_checkout(name):
    env = read_env(REPO / "envs" / f"{name}.yaml")
    assert env.editable == [REPO], f"{name}.yaml must install the checkout: ${{ACCOUNT_TAX_ROOT}}"
    # Only the core dependencies and this kind of stage's extra, not every stage's packages.
    expected = "" if name == "data" else name
    assert env.extras == [expected]
    assert expected == "" or expected in PYPROJECT["project"]["optional-dependencies"]


@pytest.mark.parametrize("name", ENV_NAMES)
def test_the_checkout_installs_from_where_conda_runs_the_envs_pip_step(name, tmp_path):
    """Snakemake copies an env file to .snakemake/conda/<hash>.yaml, and conda runs the file's pip
    lines as a requirements file from that folder: the project's line must name the checkout
    from there, as pip reads it with ACCOUNT_TAX_ROOT set as the workflow sets it."""
    data = yaml.safe_load((REPO / "envs" / f"{name}.yaml").read_text(encoding="utf-8"))
    (pip,) = [entry["pip"] for entry in data["dependencies"] if isinstance(entry, dict)]
    conda_folder = tmp_path / ".snakemake" / "conda"
    conda_folder.mkdir(parents=True)
    requirements = conda_folder / "condaenv.requirements.txt"
    requirements.write_text("".join(f"{line}\n" for line in pip if line.startswith("-e")))
    install = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index"]
    result = subprocess.run(
        [*install, "--no-build-isolation", "-r", requirements.name],
        cwd=conda_folder,
        env=os.environ | {"ACCOUNT_TAX_ROOT": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "Would install account-tax-" in result.stdout


def test_every_rule_runs_in_an_env_and_a_container_of_the_same_kind():
    rules = [rule for rule in RULES if rule.runs_command]
    assert {rule.name for rule in rules} >= {"ingest", "clean", "train", "evaluate", "retain"}
    for rule in rules:
        where = f"rule {rule.name} ({rule.file.name})"
        assert rule.conda, f"{where}: no conda: directive"
        env = rule.conda_env()
        assert env.is_file(), f"{where}: conda env {rule.conda} does not exist"
        assert env.parent == REPO / "envs", f"{where}: {rule.conda} is not in envs/"
        assert rule.container == f"containers/{env.stem}.sif", (
            f'{where}: expected container: "containers/{env.stem}.sif" beside its conda env'
        )
        assert (CONTAINERS / f"{env.stem}.def").is_file(), f"{where}: no definition file"
        assert rule.script and (REPO / "scripts" / f"{rule.script}.py").is_file(), where


@cache
def module_imports(path: Path) -> frozenset[str]:
    """Dotted names a module imports, lazily imported ones (inside functions) included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return frozenset(names)


def package_module(dotted: str) -> Path | None:
    base = SRC.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def third_party_imports(script: Path) -> dict[str, str]:
    """Top-level third-party import -> the first file that imports it, following the
    project's own modules from the script."""
    found: dict[str, str] = {}
    todo, seen = [script], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in sorted(module_imports(path)):
            top = name.split(".")[0]
            if top == PACKAGE:
                module = package_module(name)
                if module is not None:
                    todo.append(module)
            elif top != "__future__" and top not in sys.stdlib_module_names:
                found.setdefault(top, str(path.relative_to(REPO)))
    return found


@cache
def installed_requires(name: str) -> frozenset[str]:
    """A distribution's run-time dependencies (no extras), read from this environment."""
    try:
        lines = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return frozenset()
    needs = set()
    for line in lines:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            needs.add(canonicalize_name(requirement.name))
    return frozenset(needs)


def closure(names: set[str]) -> set[str]:
    """The distributions an env ends up with: its packages and their dependencies. The
    project's own dependency list is not followed: it is the whole workflow's."""
    result, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in result:
            result.add(name)
            todo.extend(installed_requires(name))
    return result


@cache
def import_names() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def providers(top: str) -> set[str]:
    if top in IMPORT_PROVIDERS:
        return IMPORT_PROVIDERS[top]
    distributions = import_names().get(top)
    assert distributions, f"`import {top}`: not installed here, so its distribution is unknown"
    return {canonicalize_name(name) for name in distributions}


def stage_rules() -> list:
    return [rule for rule in RULES if rule.script and rule.conda]


def missing_imports(rule, available: set[str]) -> list[str]:
    """The third-party imports of the rule's script that no distribution of `available` serves."""
    script = REPO / "scripts" / f"{rule.script}.py"
    return [
        f"{top} (imported in {where})"
        for top, where in sorted(third_party_imports(script).items())
        if not providers(top) & available
    ]


@pytest.mark.parametrize("rule", stage_rules(), ids=lambda rule: rule.name)
def test_every_package_a_stage_imports_is_in_its_env(rule):
    env = read_env(rule.conda_env())
    missing = missing_imports(rule, closure({pin.name for pin in env.pins}))
    assert not missing, f"rule {rule.name}: envs/{env.name}.yaml lacks {missing}"


def extra_packages(extra: str) -> set[str]:
    """The distributions `pip install .[extra]` asks for: the core dependencies and the extra's
    ("" for none)."""
    project = PYPROJECT["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"].get(extra, [])]
    return {canonicalize_name(Requirement(line).name) for line in lines}


@pytest.mark.parametrize("rule", stage_rules(), ids=lambda rule: rule.name)
def test_every_package_a_stage_imports_comes_with_its_pyproject_extra(rule):
    """`pip install .[train]` (or `.[tracking]`, or `.` for the data stages) alone runs the
    stages of that kind, as the env that installs the same extra does."""
    extra = read_env(rule.conda_env()).extras[0]
    missing = missing_imports(rule, closure(extra_packages(extra)))
    assert not missing, f"rule {rule.name}: pyproject.toml's [{extra}] lacks {missing}"


def test_the_model_package_of_the_default_config_is_in_the_train_env():
    # `pkg:` paths in train.model are resolved inside the training job, in its env; the default
    # model is the schema's (config/config.yaml does not repeat it).
    model = TrainSettings.of().model
    assert model.startswith("pkg:")
    package = model.removeprefix("pkg:").split("/")[0]
    env = read_env(REPO / "envs" / "train.yaml")
    assert providers(package) & {pin.name for pin in env.pins}, (
        f"envs/train.yaml lacks the package of {model}"
    )


def test_the_backtest_env_holds_the_snakemake_it_runs():
    """A backtest variant's job runs the workflow itself, period by period, as `python -m
    snakemake` (backtest/replay.py): in its env, under --sdm conda or apptainer."""
    (rule,) = [rule for rule in RULES if rule.name == "backtest_variant"]
    assert '"snakemake"' in (REPO / "src/account_tax/backtest/replay.py").read_text()
    assert "snakemake" in {pin.name for pin in read_env(rule.conda_env()).pins}


@pytest.mark.parametrize("name", ENV_NAMES)
def test_container_definition_installs_its_env(name):
    env = read_env(REPO / "envs" / f"{name}.yaml")
    definition = read_definition(CONTAINERS / f"{name}.def")
    assert definition.header["Bootstrap"] == "docker"
    wanted = {pin.name: pin.version for pin in env.pins}
    assert definition.pins() == wanted, (
        f"containers/{name}.def installs {definition.pins()}, envs/{name}.yaml pins {wanted}"
    )
    post = definition.sections["post"]
    assert "--no-deps -e /opt/account-tax" in post, "the project, without its dependencies"
    files = definition.sections["files"].split()
    assert {"pyproject.toml", "README.md", "src"} <= set(files)
    # The host's Python paths would come before the image's packages (tests/test_apptainer.py).
    assert "export PYTHONPATH= PYTHONHOME=" in definition.sections["environment"]
    base = definition.base_image()
    if name == "train":
        assert base.startswith("nvidia/cuda:") and "-cudnn-runtime-ubuntu22.04" in base
        assert f"python{env.python}" in post
    else:
        assert base == f"python:{env.python}-slim-bookworm"


def test_container_readme_documents_a_build_command_for_each_image():
    readme = (CONTAINERS / "README.md").read_text(encoding="utf-8")
    for name in ENV_NAMES:
        assert f"apptainer build containers/{name}.sif containers/{name}.def" in readme


def test_container_readme_lists_each_rule_under_its_environment():
    readme = (CONTAINERS / "README.md").read_text(encoding="utf-8")
    listed = {
        row.split("|")[1].strip().strip("`"): {r.strip() for r in row.split("|")[2].split(",")}
        for row in readme.splitlines()
        if row.startswith("| `")
    }
    for rule in RULES:
        if rule.conda:
            assert rule.name in listed[rule.conda_env().stem], rule.name
    assert sum(map(len, listed.values())) == sum(1 for rule in RULES if rule.conda)
