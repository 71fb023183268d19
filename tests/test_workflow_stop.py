"""Stopping a workflow run during training, the three ways it happens: Ctrl-C on Snakemake,
SIGTERM to the train job (what SLURM sends at a time limit or on preemption), and SIGKILL of
Snakemake's whole process group. Every training process must be gone within seconds, no output
written, and the MLflow run closed (at the latest by the next start)."""

import json
import os
import signal
import subprocess
import time

import psutil
import pytest
from mlflow import MlflowClient
from sample_ledger import ledger_config, small_ledger
from tiny_models import build_tiny_bert
from workflow_runner import snakemake, snakemake_command, snakemake_env

pytestmark = pytest.mark.workflow

CORPUS = ["memo office supplies rent sales revenue bank no", *"0123456789|:#+"] * 3
STOPPED_WITHIN_S = 20


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), CORPUS)


def workflow_config(workdir, model):
    small_ledger(workdir / "ledger.csv")
    config = ledger_config(workdir / "ledger.csv", classes=["4930", "4210", "4400", "1800"])
    config["train"] = {
        "model": str(model),
        "max_length": 32,
        # Far more than the test waits for: training is stopped, never finished.
        "epochs": 500,
        "per_device_batch_size": 4,
        "checkpoint_every_steps": 3,
        "lora": {"r": 4, "alpha": 8},
        "early_stopping": {"patience": None},
    }
    config["train_resources"] = {"cpu_processes": 2}
    config["upload"] = {"enabled": False}
    return config


def trainers(root):
    """The training processes below `root`: the job's shell, the launcher and two workers."""
    found = [
        process
        for process in root.children(recursive=True)
        if any("train.py" in part for part in process.cmdline())
    ]
    ranks = sorted(
        p.environ().get("LOCAL_RANK", "") for p in found if "--nproc_per_node" not in p.cmdline()
    )
    assert ranks.count("0") == ranks.count("1") == 1, ranks
    return found


def launcher(processes):
    return next(
        p for p in processes if "--nproc_per_node" in p.cmdline() and "-c" not in p.cmdline()
    )


def start_training(workdir, config):
    """Snakemake, to the trained model, in a session of its own (as a terminal would start
    it); returns once two workers have written a checkpoint."""
    config_path = workdir / "config.yaml"
    config_path.write_text(json.dumps(config))
    log = (workdir / "snakemake.log").open("w")
    command = [
        *snakemake_command(workdir),
        "--cores",
        "2",
        # Targets first: --configfile takes several values and would swallow them.
        "results/train/segment-1/metrics.json",
        "--configfile",
        str(config_path),
    ]
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=snakemake_env(workdir),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not list(workdir.glob("checkpoints/train/run-*/step-*/manifest.json")):
        assert process.poll() is None, (workdir / "snakemake.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.2)
    return process


def assert_everything_stopped(process, workdir, processes):
    """Every training process ends within STOPPED_WITHIN_S and writes nothing afterwards."""
    _, alive = psutil.wait_procs(processes, timeout=STOPPED_WITHIN_S)
    assert not alive, [p.cmdline() for p in alive]
    process.wait(timeout=60)
    assert not (workdir / "results/train/segment-1/metrics.json").exists()
    assert not (workdir / "results/train/segment-1/model").exists()


def run_status(workdir):
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    return MlflowClient(tracking_uri=run["tracking_uri"]).get_run(run["run_id"]).info.status


@pytest.fixture
def training(tmp_path, tiny_bert):
    config = workflow_config(tmp_path, tiny_bert)
    process = start_training(tmp_path, config)
    processes = trainers(psutil.Process(process.pid))
    try:
        yield tmp_path, process, processes
    finally:
        for child in processes:
            if child.is_running():
                child.kill()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_ctrl_c_on_snakemake_stops_training_and_fails_the_run(training):
    workdir, process, processes = training
    os.killpg(process.pid, signal.SIGINT)  # the terminal sends it to the foreground group
    assert_everything_stopped(process, workdir, processes)
    assert run_status(workdir) in ("FAILED", "KILLED")


def test_sigterm_to_the_train_job_stops_it_after_a_step(training):
    workdir, process, processes = training
    launcher(processes).send_signal(signal.SIGTERM)
    assert_everything_stopped(process, workdir, processes)
    log = (workdir / "logs/train/segment-1.log").read_text()
    assert "SIGTERM received: stopping after the current step" in log
    assert "stopped after step" in log and "SIGTERM received" in log
    assert "training stopped: the launcher received SIGTERM" in log
    assert "Traceback" not in log and "its launcher died" not in log
    assert run_status(workdir) == "FAILED"


def test_sigkill_of_snakemake_stops_training_and_the_next_start_closes_the_run(training):
    workdir, process, processes = training
    os.killpg(process.pid, signal.SIGKILL)
    assert_everything_stopped(process, workdir, processes)
    assert run_status(workdir) == "RUNNING"
    # The workers were told by the kernel (a SIGHUP at their parent's death), and say so.
    log = (workdir / "logs/train/segment-1.log").read_text()
    assert "its launcher died: stopping after the current step" in log
    assert "SIGTERM received" not in log
    dead_run = json.loads((workdir / "results/tracking/run.json").read_text())["run_id"]
    # As Snakemake advises after a kill; then any next start that runs a job (one data stage).
    configfile = ("--configfile", str(workdir / "config.yaml"))
    snakemake(workdir, "--unlock", *configfile)
    snakemake(workdir, "results/ingest/records.parquet", "--forcerun", "ingest", *configfile)
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    assert run["run_id"] != dead_run
    closed = MlflowClient(tracking_uri=run["tracking_uri"]).get_run(dead_run)
    assert closed.info.status == "KILLED"
