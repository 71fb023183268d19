"""The data stages in a real Apptainer container: `snakemake --sdm apptainer` runs ingest and
clean in the image containers/data.def describes (which installs envs/data.yaml's packages) and
writes the same tables as a run on the host.

Apptainer comes from PATH, else from the shared tarball (../shared/tools, unpacked into
.cache/apptainer); without either the tests skip and say so. The image is built once (about two
to three minutes) and cached in .cache/apptainer/images, keyed by the definition; see
tests/apptainer_image.py.
"""

from __future__ import annotations

import json
import os
import subprocess

import polars as pl
import pytest
from apptainer_envs import REPO, read_env
from apptainer_image import Apptainer, Unavailable, definition_image, runtime_binds
from missing_tools import unavailable
from mlflow import MlflowClient
from polars.testing import assert_frame_equal
from sample_ledger import ledger_config, small_ledger
from workflow_runner import jobs_run, snakemake, snakemake_command

pytestmark = pytest.mark.workflow

DATA_ENV = REPO / "envs" / "data.yaml"
APPTAINER_INSTALL = (
    "apptainer on PATH, or the Apptainer tarball in ../shared/tools/, and its runtime packages "
    "from make system-packages (as root)"
)
TARGET = "results/clean/records.parquet"


@pytest.fixture(scope="module")
def apptainer(tmp_path_factory):
    try:
        return Apptainer.find(tmp_path_factory.mktemp("apptainer-home"))
    except Unavailable as reason:
        unavailable(str(reason), APPTAINER_INSTALL)


@pytest.fixture(scope="module")
def data_image(apptainer):
    try:
        return definition_image(apptainer, REPO / "containers" / "data.def")
    except Unavailable as reason:
        unavailable(str(reason), APPTAINER_INSTALL)


def test_data_image_holds_the_data_env(apptainer, data_image, tmp_path, monkeypatch):
    env = read_env(DATA_ENV)
    names = [pin.name for pin in env.pins]
    # Python paths on the host (a cluster's modules set them), which the container inherits with
    # the rest of the environment: a package there that would shadow the image's, and a home
    # that is no Python's.
    shadow = tmp_path / "host-packages"
    for package in ("account_tax", "polars"):
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text("raise ImportError('the host package')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    monkeypatch.setenv("PYTHONHOME", str(tmp_path / "no-python"))
    probe = (
        "import json, sys, importlib.metadata as m, account_tax, polars; "
        f"print(json.dumps([sys.version_info[:2], {{n: m.version(n) for n in {names!r}}}, "
        "account_tax.__file__]))"
    )
    output = apptainer.exec(data_image, "python", "-c", probe, args=runtime_binds()).stdout
    python, versions, package = json.loads(output.strip().splitlines()[-1])
    assert ".".join(map(str, python)) == env.python
    assert versions == {pin.name: pin.version for pin in env.pins}
    # The checkout's code, bound over the copy in the image.
    assert package == "/opt/account-tax/src/account_tax/__init__.py"


def container_run(apptainer, workdir, image, config_file, host_python_guard):
    """`snakemake --sdm apptainer` on the repo's Snakefile in `workdir`, the image at
    containers/data.sif there (where the rules look for it)."""
    (workdir / "containers").mkdir()
    (workdir / "containers" / "data.sif").symlink_to(image)
    apptainer_args = " ".join([*apptainer.capability_args(), *runtime_binds()])
    command = [
        *snakemake_command(workdir),
        "--cores",
        "2",
        TARGET,
        "--sdm",
        "apptainer",
        f"--apptainer-args={apptainer_args}",
        "--configfile",
        str(config_file),
    ]
    env = apptainer.env() | {"XDG_CACHE_HOME": str(workdir / ".cache")}
    # A host `python` that always fails comes first on PATH: the jobs must use the image's.
    env["PATH"] = os.pathsep.join([str(host_python_guard), env["PATH"]])
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    assert result.returncode == 0, (
        f"snakemake --sdm apptainer failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
        f"{result.stderr[-6000:]}"
    )
    return result


def python_guard(folder):
    folder.mkdir()
    for name in ("python", "python3"):
        path = folder / name
        path.write_text("#!/bin/sh\necho 'the host python ran, not the image one' >&2\nexit 97\n")
        path.chmod(0o755)
    return folder


def test_clean_in_the_container_matches_the_host(apptainer, data_image, tmp_path):
    host, inside = tmp_path / "host", tmp_path / "container"
    host.mkdir()
    inside.mkdir()
    # One ledger for both (rejects name their source file), where the container sees it.
    ledger = inside / "ledger.csv"
    small_ledger(ledger)
    config = ledger_config(ledger, classes=["4930", "4210", "4400", "1800", "0000"])
    snakemake(host, TARGET, config=config)

    config_file = inside / "config.yaml"
    config_file.write_text(json.dumps(config))
    guard = python_guard(tmp_path / "host-python")
    result = container_run(apptainer, inside, data_image, config_file, guard)

    assert jobs_run(result) == {"ingest": 1, "clean": 1}
    log = result.stderr + result.stdout
    assert log.count("Activating singularity image containers/data.sif") == 2, log[-3000:]

    outputs = sorted(path.name for path in (host / "results/clean").iterdir())
    assert "records.parquet" in outputs
    assert outputs == sorted(path.name for path in (inside / "results/clean").iterdir())
    for name in outputs:
        ours, theirs = host / "results/clean" / name, inside / "results/clean" / name
        if name.endswith(".parquet"):
            assert_frame_equal(pl.read_parquet(theirs), pl.read_parquet(ours))
        else:
            assert theirs.read_bytes() == ours.read_bytes(), name

    # The stages in the container logged into the run the host's onstart handler created.
    run = json.loads((inside / "results/tracking/run.json").read_text())
    assert run["status"] == "FINISHED"
    metrics = MlflowClient(tracking_uri=run["tracking_uri"]).get_run(run["run_id"]).data.metrics
    assert metrics["clean/rows_in"] == 65
    assert metrics["clean/rejected"] == 3


def test_python_guard_would_catch_a_host_python(tmp_path):
    guard = python_guard(tmp_path / "guard")
    env = os.environ | {"PATH": os.pathsep.join([str(guard), os.environ["PATH"]])}
    result = subprocess.run(["python", "-c", "print(1)"], env=env, capture_output=True)
    assert result.returncode == 97
