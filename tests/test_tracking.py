import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient

from account_tax.errors import DataError
from account_tax.ports import free_ports
from account_tax.rule_resources import read_benchmark
from account_tax.stage_log import MAX_PARAM_LENGTH, flatten, log_stage, log_trial
from account_tax.workflow_run import (
    check_configured_uri,
    close_abandoned_run,
    finish_run,
    log_spooled,
    redact_command,
    start_run,
    without_userinfo,
)


def test_command_line_secrets_are_masked():
    argv = [
        "snakemake",
        "--config",
        "token=abc123",
        "--aws-secret-access-key",
        "hunter2",
        "password=pw",
        "--cores",
        "2",
    ]
    assert redact_command(argv) == (
        "snakemake --config token=*** --aws-secret-access-key *** password=*** --cores 2"
    )


def test_userinfo_is_removed_from_uris():
    assert (
        without_userinfo("https://bob:pw@mlflow.example:5000/x") == "https://mlflow.example:5000/x"
    )
    assert without_userinfo("sqlite:////tmp/m.db") == "sqlite:////tmp/m.db"


def test_config_flattens_to_namespaced_params():
    params = flatten({"split": {"seed": 3}, "data": {"columns": {"text": ["memo"]}}})
    assert params == {"split/seed": "3", "data/columns/text": '["memo"]'}
    long = flatten({"data": {"classes": ["x" * 100] * 100}})["data/classes"]
    assert len(long) == MAX_PARAM_LENGTH
    assert long.endswith("…")


def test_benchmark_file_gives_wall_time_and_peak_memory(tmp_path):
    path = tmp_path / "clean.tsv"
    path.write_text(
        "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
        "3.0900\t0:00:03\t303.38\t1000.1\t290.0\t295.0\t0.01\t1.2\t50.0\t2.9\n"
    )
    assert read_benchmark(path) == {"wall_s": 3.09, "max_rss_mb": 303.38}
    path.write_text("s\th:m:s\tmax_rss\n0.5\t0:00:00\tNA\n")
    assert read_benchmark(path) == {"wall_s": 0.5, "max_rss_mb": 0.0}


# A job records its stage (a count as numpy gives it), then Snakemake removes its output, as it
# does a temporary one.
JOB = """
import sys
from pathlib import Path
import numpy
from account_tax.stage_log import log_stage
run_file, counts, plots = map(Path, sys.argv[1:])
log_stage(run_file, "clean", {"rows_in": numpy.int64(2)}, [counts, plots])
counts.unlink()
print(sorted(name for name in ("mlflow", "sqlalchemy") if name in sys.modules))
"""


def test_run_lifecycle_against_a_real_sqlite_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    raw = tmp_path / "ledger.csv"
    raw.write_text("a,b\n1,2\n")
    run_file = tmp_path / "tracking" / "run.json"
    config = {"data": {"path": str(raw)}, "tracking": {"experiment": "unit"}}
    record = start_run(config, [raw], run_file, repo=tmp_path, command="snakemake --cores 2")
    assert json.loads(run_file.read_text())["run_id"] == record["run_id"]

    counts = tmp_path / "counts.json"
    counts.write_text('{"rows_in": 2}')
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "rows.png").write_bytes(b"png")
    job = subprocess.run(
        [sys.executable, "-c", JOB, run_file, counts, plots],
        capture_output=True,
        text=True,
        check=True,
    )
    # The job loaded neither MLflow nor the store's database library.
    assert job.stdout.strip() == "[]"
    mlflow = MlflowClient(tracking_uri=record["tracking_uri"])
    assert mlflow.get_run(record["run_id"]).data.metrics == {}

    bench = tmp_path / "benchmarks"
    (bench / "serialize").mkdir(parents=True)
    (bench / "serialize" / "train.tsv").write_text("s\tmax_rss\n1.5\t20.0\n")
    finished = finish_run(run_file, bench, "FINISHED", repo=tmp_path)
    assert finished["status"] == "FINISHED"

    run = mlflow.get_run(record["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.metrics == {
        "clean/rows_in": 2.0,
        "serialize/train/wall_s": 1.5,
        "serialize/train/max_rss_mb": 20.0,
    }
    (rows_in,) = mlflow.get_metric_history(record["run_id"], "clean/rows_in")
    # Stamped when the job recorded it, not when the workflow logged it.
    assert rows_in.timestamp < run.info.end_time
    assert run.data.params["data/path"] == str(raw)
    assert run.data.tags["git_commit"] == "unknown"  # tmp_path is not a git checkout
    assert run.data.tags["command"] == "snakemake --cores 2"
    artifacts = [a.path for a in mlflow.list_artifacts(record["run_id"], "clean")]
    assert artifacts == ["clean/counts.json", "clean/plots"]
    downloaded = Path(mlflow.download_artifacts(record["run_id"], "clean", tmp_path / "got"))
    assert (downloaded / "counts.json").read_text() == '{"rows_in": 2}'
    assert (downloaded / "plots" / "rows.png").read_bytes() == b"png"
    assert not any((run_file.parent / "spool").iterdir())
    assert record["tracking_uri"] == f"sqlite:///{tmp_path / 'tracking' / 'mlflow.db'}"


def test_a_run_left_running_by_a_dead_workflow_is_closed_as_killed(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_file = tmp_path / "tracking" / "run.json"
    config = {"tracking": {"experiment": "unit"}}
    record = start_run(config, [], run_file, repo=tmp_path, command="snakemake")
    mlflow = MlflowClient(tracking_uri=record["tracking_uri"])
    # Its owner, this process, still runs: not abandoned.
    assert close_abandoned_run(run_file) is None
    assert mlflow.get_run(record["run_id"]).info.status == "RUNNING"

    # A process that has ended had the run.
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    run = json.loads(run_file.read_text())
    run["owner"] |= {"pid": ended.pid}
    run_file.write_text(json.dumps(run))
    # A stage that ended before the kill.
    log_stage(run_file, "ingest", {"rows": 3})
    closed = close_abandoned_run(run_file)
    assert closed["status"] == json.loads(run_file.read_text())["status"] == "KILLED"
    killed = mlflow.get_run(record["run_id"])
    assert killed.info.status == "KILLED"
    assert killed.data.metrics == {"ingest/rows": 3.0}
    assert f"workflow process {ended.pid}" in killed.data.tags["closed_because"]
    assert close_abandoned_run(run_file) is None  # closed once

    # A run that finished is left alone, whatever its owner.
    record = start_run(config, [], run_file, repo=tmp_path, command="snakemake")
    finish_run(run_file, tmp_path / "benchmarks", "FINISHED", repo=tmp_path)
    run = json.loads(run_file.read_text())
    run["owner"] |= {"host": "another-host"}
    run_file.write_text(json.dumps(run))
    assert close_abandoned_run(run_file) is None
    assert mlflow.get_run(record["run_id"]).info.status == "FINISHED"


def killed_at(method: str) -> type[MlflowClient]:
    """A client whose `method` never returns, as when the workflow process is killed there: the
    record stays in the spool for the next pass."""

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt

    return type(f"KilledAt_{method}", (MlflowClient,), {method: killed})


# Killed before the trial's figures reach the store, and after all of them but its end.
@pytest.mark.parametrize("method", ["log_batch", "set_terminated"])
def test_a_trial_logged_again_after_a_kill_is_still_one_nested_run(tmp_path, monkeypatch, method):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_file = tmp_path / "tracking" / "run.json"
    record = start_run(
        {"tracking": {"experiment": "unit"}}, [], run_file, repo=tmp_path, command=""
    )
    history = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]
    log_trial(run_file, "lora.r~8", {"lora": {"r": 8}}, {"macro_f1": 0.5}, history, ["loss"])
    with pytest.raises(KeyboardInterrupt):
        log_spooled(killed_at(method)(tracking_uri=record["tracking_uri"]), run_file)
    finish_run(run_file, tmp_path / "benchmarks", "FINISHED", repo=tmp_path)

    mlflow = MlflowClient(tracking_uri=record["tracking_uri"])
    experiment = mlflow.get_run(record["run_id"]).info.experiment_id
    parent = f"tags.mlflow.parentRunId = '{record['run_id']}'"
    (trial,) = mlflow.search_runs([experiment], parent)
    assert trial.info.run_name == "lora.r~8"
    assert trial.info.status == "FINISHED"
    assert trial.data.params == {"train/lora/r": "8"}
    assert trial.data.metrics == {"macro_f1": 0.5, "history/loss": 1.5}
    steps = mlflow.get_metric_history(trial.info.run_id, "history/loss")
    assert [(m.step, m.value) for m in steps] == [(1, 2.0), (2, 1.5)]
    assert not any((run_file.parent / "spool").iterdir())


def test_copies_a_killed_job_left_without_a_record_are_removed_at_the_end(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_file = tmp_path / "tracking" / "run.json"
    record = start_run(
        {"tracking": {"experiment": "unit"}}, [], run_file, repo=tmp_path, command=""
    )
    report = tmp_path / "report.json"
    report.write_text("{}")
    log_stage(run_file, "clean", {"rows_in": 2}, [report])
    log_stage(run_file, "split", {"rows": 2}, [report])
    # The split job died after copying its artifact, before writing its record.
    (split_record,) = (run_file.parent / "spool").glob("*-split.json")
    split_record.unlink()

    finish_run(run_file, tmp_path / "benchmarks", "FINISHED", repo=tmp_path)
    assert not any((run_file.parent / "spool").iterdir())
    assert f"removing {split_record.with_suffix('')}" in caplog.text
    mlflow = MlflowClient(tracking_uri=record["tracking_uri"])
    assert mlflow.get_run(record["run_id"]).data.metrics == {"clean/rows_in": 2.0}
    assert [a.path for a in mlflow.list_artifacts(record["run_id"])] == ["clean", "config.json"]


def test_stage_without_run_file_logs_nothing(tmp_path):
    log_stage(None, "clean", {"rows_in": 1})
    log_stage(tmp_path / "missing.json", "clean", {"rows_in": 1})
    assert not any(tmp_path.iterdir())


# Says it is ready, then waits for the go file: both processes have imported everything and
# call start_run within milliseconds of each other.
START_AT_ONCE = """
import sys, time
from pathlib import Path
import mlflow  # slow to import: done before the go
from account_tax.workflow_run import start_run
go, uri, run_file = sys.argv[1:]
print("ready", flush=True)
while not Path(go).exists():
    time.sleep(0.005)
start_run({"tracking": {"experiment": "race", "tracking_uri": uri}}, [], Path(run_file),
          repo=Path(run_file).parent, command="snakemake")
"""


def test_two_runs_starting_at_once_both_create_their_run_in_a_new_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    go = tmp_path / "go"
    run_files = [tmp_path / name / "run.json" for name in ("a", "b")]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", START_AT_ONCE, go, uri, run_file],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for run_file in run_files
    ]
    assert [worker.stdout.readline() for worker in workers] == ["ready\n"] * 2
    go.touch()
    errors = [worker.communicate(timeout=120)[1] for worker in workers]
    # Without a lock, one or both fail in MLflow's alembic migrations of the new database.
    assert [worker.returncode for worker in workers] == [0, 0], errors
    run_ids = {json.loads(run_file.read_text())["run_id"] for run_file in run_files}
    mlflow = MlflowClient(tracking_uri=uri)
    (experiment,) = mlflow.search_experiments(filter_string="name = 'race'")
    stored = mlflow.search_runs([experiment.experiment_id])
    assert {run.info.run_id for run in stored} == run_ids
    assert len(run_ids) == 2


RUN_ON_SERVER = r"""
import sys
from pathlib import Path
from account_tax.workflow_run import finish_run, start_run
raw, run_file = Path(sys.argv[1]), Path(sys.argv[2])
config = {"data": {"path": str(raw)}, "tracking": {"experiment": "server"}}
start_run(config, [raw], run_file, repo=raw.parent, command="snakemake")
finish_run(run_file, raw.parent / "benchmarks", "FINISHED", repo=raw.parent)
"""


def test_a_tracking_servers_password_is_never_printed(tmp_path):
    """A real `mlflow server`, its URI with a user and password in MLFLOW_TRACKING_URI: the run
    is created and closed there, and neither job output nor run.json holds the password (MLflow
    prints a server run's address as the run ends)."""
    (port,) = free_ports(1)
    command = [str(Path(sys.executable).parent / "mlflow"), "server", "-h", "127.0.0.1"]
    command += ["-p", str(port), "--workers", "1"]
    command += ["--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}"]
    command += ["--default-artifact-root", str(tmp_path / "artifacts")]
    server = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, "the MLflow server stopped"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the MLflow server did not come up"
                time.sleep(0.5)
        raw = tmp_path / "ledger.csv"
        raw.write_text("a,b\n1,2\n")
        run_file = tmp_path / "tracking" / "run.json"
        uri = f"http://alice:s3cr3t-word@127.0.0.1:{port}"
        job = subprocess.run(
            [sys.executable, "-c", RUN_ON_SERVER, raw, run_file],
            env=os.environ | {"MLFLOW_TRACKING_URI": uri},
            capture_output=True,
            text=True,
            check=True,
        )
        assert "s3cr3t" not in job.stdout + job.stderr
        assert "s3cr3t" not in run_file.read_text()
        run_id = json.loads(run_file.read_text())["run_id"]
        run = MlflowClient(f"http://127.0.0.1:{port}").get_run(run_id)
        assert run.info.status == "FINISHED"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def test_a_password_in_the_configs_tracking_uri_is_refused_without_being_written():
    with pytest.raises(DataError, match=r"tracking\.tracking_uri` holds a user") as refused:
        check_configured_uri("https://alice:s3cr3t@mlflow.example.com")
    assert "s3cr3t" not in str(refused.value)
    check_configured_uri("https://mlflow.example.com")
    check_configured_uri(None)
