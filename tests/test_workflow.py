"""End to end: the real Snakemake workflow on a small ledger, partial re-runs, bad config."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest
import yaml
from mlflow import MlflowClient
from sample_ledger import LEDGER_COLUMNS, ledger_config, ledger_row, small_ledger
from workflow_runner import (
    REPO,
    SECRETS,
    VENV_BIN,
    jobs_run,
    snakemake,
    snakemake_command,
    snakemake_env,
)

from account_tax.evaluation.ledger_rules import LedgerRules
from account_tax.ports import free_ports

pytestmark = pytest.mark.workflow

SERIALIZED = [f"results/serialize/{name}.parquet" for name in ("train", "validation", "test")]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("workflow")
    rows = small_ledger(workdir / "ledger.csv")
    config = ledger_config(workdir / "ledger.csv", classes=["4930", "4210", "4400", "1800", "0000"])
    result = snakemake(workdir, *SERIALIZED, config=config)
    return workdir, rows, config, result


def test_workflow_produces_serialized_splits(finished_run):
    workdir, rows, _, result = finished_run
    assert jobs_run(result) == {
        "ingest": 1,
        "clean": 1,
        "features": 1,
        "split": 1,
        "serialize": 3,
    }

    counts = json.loads((workdir / "results/clean/counts.json").read_text())
    assert counts == {"rows_in": rows, "rows_out": 60, "rejected": 3, "duplicates": 2}
    rejects = pl.read_parquet(workdir / "results/clean/rejects.parquet")
    assert sorted(rejects.get_column("source_row").to_list()) == [63, 64, 65]

    label_map = json.loads((workdir / "results/features/label_map.json").read_text())
    assert label_map["labels"] == ["4930", "4210", "4400", "1800", "0000"]
    assert label_map["counts"]["0000"] == 0

    frames = [pl.read_parquet(workdir / path) for path in SERIALIZED]
    assert sum(frame.height for frame in frames) == 60
    train = frames[0]
    assert train.columns == ["id", "text", "label_id", "label_source"]
    assert train.get_column("text")[0].startswith("memo: ")
    assert " | vendor: acme gmbh | amount: +1e1 | month: 3" in train.get_column("text")[0]
    assert set(train.get_column("label_id").to_list()) == {0, 1, 2, 3}
    report = json.loads((workdir / "results/split/split_report.json").read_text())
    assert report["train_only_classes"] == ["1800"]
    for plot in ("features/class_distribution.png", "split/split_distribution.png"):
        assert (workdir / "results" / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (workdir / "logs/clean/clean.log").read_text().count("row(s) rejected: ") == 3


def test_one_mlflow_run_holds_the_provenance(finished_run):
    workdir, rows, config, _ = finished_run
    summary = json.loads((workdir / "results/tracking/run.json").read_text())
    assert summary["status"] == "FINISHED"
    assert summary["reused_rules"] == []
    mlflow = MlflowClient(tracking_uri=summary["tracking_uri"])
    assert summary["tracking_uri"].startswith("sqlite:///")
    runs = mlflow.search_runs(mlflow.get_experiment_by_name("account-tax").experiment_id)
    assert [run.info.run_id for run in runs] == [summary["run_id"]]
    run = runs[0]
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert metrics["clean/rows_in"] == rows
    assert metrics["clean/rejected"] == 3
    assert metrics["split/train_only_classes"] == 1
    assert metrics["serialize/train_rows"] + metrics["serialize/test_rows"] > 0
    for rule in ("ingest", "clean", "features", "split", "serialize/train"):
        assert metrics[f"{rule}/wall_s"] > 0
        assert f"{rule}/max_rss_mb" in metrics
    params = run.data.params
    assert params["split/seed"] == str(config["split"]["seed"])
    assert json.loads(params["data/classes"]) == config["data"]["classes"]
    tags = run.data.tags
    ledger = workdir / "ledger.csv"
    assert tags["input_sha256.ledger.csv"] == hashlib.sha256(ledger.read_bytes()).hexdigest()
    assert len(tags["git_commit"]) == 40
    assert tags["git_dirty"] in {"True", "False"}
    assert tags["version.snakemake"] == "9.27.1"
    assert "--configfile" in tags["command"]
    artifacts = {a.path for a in mlflow.list_artifacts(run.info.run_id, "features")}
    assert artifacts == {"features/class_distribution.png", "features/label_map.json"}


def test_secrets_never_reach_logs_params_tags_or_results(finished_run):
    workdir, _, _, result = finished_run
    summary = json.loads((workdir / "results/tracking/run.json").read_text())
    run = MlflowClient(tracking_uri=summary["tracking_uri"]).get_run(summary["run_id"])
    recorded = json.dumps([run.data.params, run.data.tags, list(run.data.metrics)])
    for secret in SECRETS.values():
        assert secret not in recorded
        assert secret not in result.stdout + result.stderr
        for path in workdir.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


def test_second_run_does_nothing(finished_run):
    workdir, _, config, _ = finished_run
    result = snakemake(workdir, *SERIALIZED, config=config)
    assert jobs_run(result) == {}
    assert "Nothing to be done" in result.stdout + result.stderr


def test_partial_rerun_by_target_file_runs_only_what_is_downstream(finished_run):
    workdir, _, config, _ = finished_run
    # A changed class list feeds clean and features; naming the split report as the target
    # must re-run those and split, but no serialize job.
    config = json.loads(json.dumps(config))
    classes = workdir / "classes.txt"
    classes.write_text("4930\n4210\n4400\n1800\n0000\n")
    config["data"]["classes"] = str(classes)
    snakemake(workdir, *SERIALIZED, config=config)

    classes.write_text("4930\n4210\n4400\n1800\n0000\n9000\n")
    result = snakemake(workdir, "results/split/split_report.json", config=config)
    assert jobs_run(result) == {"clean": 1, "features": 1, "split": 1}
    label_map = json.loads((workdir / "results/features/label_map.json").read_text())
    assert label_map["labels"][-1] == "9000"
    dry = snakemake(workdir, "-n", *SERIALIZED, config=config)
    assert jobs_run(dry) == {"serialize": 3}
    # Each workflow run that ran jobs is one MLflow run; this one reused ingest's output.
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    assert run["reused_rules"] == [
        "ingest",
        "serialize/test",
        "serialize/train",
        "serialize/validation",
    ]
    mlflow = MlflowClient(tracking_uri=run["tracking_uri"])
    runs = mlflow.search_runs(run["experiment_id"])
    assert len(runs) == 3
    assert runs[0].info.run_id == run["run_id"]
    assert runs[0].data.params["data/classes"] == str(classes)
    assert (
        runs[0].data.tags["input_sha256.classes.txt"]
        == hashlib.sha256(classes.read_bytes()).hexdigest()
    )


def config_error_lines(result) -> list[str]:
    """What Snakemake printed for a config it refused, less its two opening notes."""
    return [line for line in result.stderr.splitlines() if not line.startswith(("Using", "Config"))]


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        (
            "split",
            "sead",
            3,
            "config `split`: unknown key 'sead'; allowed keys: date_column, group_column, "
            "min_class_size, seed, strategy, test_fraction, validation_fraction",
        ),
        ("split", "seed", "seven", "config `split.seed`: 'seven' is not of type 'integer'"),
        (
            "split",
            "strategy",
            "by-month",
            "config `split.strategy`: 'by-month' is not one of ['stratified', 'time', 'group']",
        ),
        (
            "sweep",
            "parameters",
            {"lora.r": [4, 0]},
            "sweep trial lora.r~0: config `train.lora.r`: 0 is less than the minimum of 1",
        ),
        (
            "review",
            "rules",
            {"columns": ["vendor", "payee"]},
            "review.rules.columns: ['payee'] not among the data's columns other than the label"
            " (['entry_id', 'memo', 'vendor', 'amount', 'date'])",
        ),
        (
            "split",
            "min_class_size",
            2,
            "split.min_class_size must exceed the number of held-out splits (2) so that every"
            " stratified class keeps a training row",
        ),
        (
            "split",
            "strategy",
            "time",
            "split.strategy 'time' needs split.date_column to name one of the data's date"
            " columns (data.columns.date: ['date']), not None",
        ),
        (
            "evaluate",
            "amount_column",
            "vendor",
            "config `evaluate.amount_column`: 'vendor' is not among the data's numeric columns"
            " (data.columns.numeric: ['amount'])",
        ),
        (
            "data",
            "columns",
            {**LEDGER_COLUMNS, "categorical": ["vendor", "entry_id"]},
            "config `data.columns`: column 'entry_id' has more than one role (id, categorical);"
            " give each column one",
        ),
        (
            "train",
            "init_from",
            "results/train/segment-1/model",
            "config `train.init_from`: 'results/train/segment-1/model' is under results/, which"
            " this run writes (its training replaces the model it would start from); copy the"
            " model folder elsewhere, e.g. models/, and name that",
        ),
        (
            "register",
            "champion_alias",
            "prod champion",
            "config `register.champion_alias`: 'prod champion' is not allowed: an MLflow alias is"
            " letters, digits, `_` and `-`, and neither `latest` nor `v` and digits (names MLflow"
            " reserves)",
        ),
        (
            "serialize",
            "fields",
            [{"column": "memo"}, {"column": "account", "name": "booked to"}],
            "config `serialize.fields` names 'account', which gives each record's account away"
            " (the label, or where it came from); new records to predict have none",
        ),
        (
            "backtest",
            "date_column",
            "memo",
            "config `backtest.date_column`: 'memo' is not among the data's date columns"
            " (data.columns.date: ['date'])",
        ),
        (
            "register",
            "champion_alias",
            "candidate",
            "config `register`: candidate_alias and champion_alias are the same alias, which"
            " every new version would take without the champion comparison",
        ),
        (
            "tracking",
            "tracking_uri",
            "https://alice:s3cr3t@mlflow.example.com",
            "config `tracking.tracking_uri` holds a user name or password, which never belong in"
            " a config file: set the URI with them in MLFLOW_TRACKING_URI, or set"
            " MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)",
        ),
    ],
)
def test_a_bad_config_stops_before_any_job_with_one_line(tmp_path, section, key, value, message):
    """The key, the problem and what is allowed, and not the schema (hundreds of lines); a
    secret in the config is not repeated."""
    config = ledger_config(tmp_path / "ledger.csv")
    config.setdefault(section, {})[key] = value
    result = snakemake(tmp_path, *SERIALIZED, config=config, check=False)
    assert result.returncode != 0
    lines = config_error_lines(result)
    assert message in lines
    assert len(lines) <= 4, result.stderr
    assert "schema" not in result.stderr
    assert "s3cr3t" not in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_a_warm_start_without_record_ids_stops_before_any_job(tmp_path):
    config = ledger_config(tmp_path / "ledger.csv", columns={**LEDGER_COLUMNS, "id": None})
    config["train"] = {"init_from": "champion"}
    result = snakemake(tmp_path, *SERIALIZED, config=config, check=False)
    assert result.returncode != 0
    assert (
        "config `train.init_from` needs `data.columns.id`: a warm start keeps the records its"
        " model learned in train by their ids, and a row number names another record once the"
        " ledger is sorted or cut otherwise"
    ) in config_error_lines(result)
    assert not (tmp_path / "results").exists()


def test_a_warm_start_from_a_registry_that_cannot_be_read_stops_before_any_job(tmp_path):
    """The workflow asks the registry which version holds the champion alias as it plans (a
    moved champion is fetched again): a server that does not answer stops it with the reason,
    its address without the password."""
    config = ledger_config(tmp_path / "ledger.csv")
    config["train"] = {"init_from": "champion"}
    config["upload"] = {"enabled": False}
    small_ledger(tmp_path / "ledger.csv")
    (port,) = free_ports(1)
    env = {
        "MLFLOW_TRACKING_URI": f"http://reviewer:pw-4b1e9d@127.0.0.1:{port}",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
    }
    result = snakemake(tmp_path, "-n", config=config, env=env, check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "train.init_from: champion: the Model Registry could not be read" in output
    assert f"http://127.0.0.1:{port}/api/" in output
    assert "pw-4b1e9d" not in output
    assert not (tmp_path / "results").exists()


def test_a_backtest_of_undated_records_stops_before_any_job(tmp_path):
    """The bundled data has no date column: `snakemake backtest` says so before it cleans."""
    columns = {role: column for role, column in LEDGER_COLUMNS.items() if role != "date"}
    config = ledger_config(tmp_path / "ledger.csv", columns=columns)
    config["upload"] = {"enabled": False}
    small_ledger(tmp_path / "ledger.csv")
    result = snakemake(tmp_path, "backtest", config=config, check=False)
    assert result.returncode != 0
    assert "backtest: the data has no date column (data.columns.date)" in result.stderr
    assert not (tmp_path / "results").exists()


def test_bad_input_fails_the_job_with_the_file_and_column(tmp_path):
    row = ledger_row(1)
    del row["vendor"]
    pl.DataFrame([row]).write_csv(tmp_path / "ledger.csv")
    result = snakemake(
        tmp_path, *SERIALIZED, config=ledger_config(tmp_path / "ledger.csv"), check=False
    )
    assert result.returncode != 0
    log = (tmp_path / "logs/ingest/ingest.log").read_text()
    assert "ledger.csv: missing required column(s) 'vendor'" in log
    assert "Traceback" not in log


def test_a_chart_of_accounts_names_the_classes_and_a_bad_one_stops_the_run(tmp_path):
    small_ledger(tmp_path / "ledger.csv")
    chart = pl.DataFrame(
        {
            "konto": ["4000", "4930", "4210", "4400", "1000", "1800"],
            "name": ["Expenses", "Office supplies", "Rent", "Sales revenue", "Assets", "Bank"],
            "gruppe": [None, "4000", "4000", None, None, "1000"],
        }
    )
    chart.write_csv(tmp_path / "chart.csv")
    config = ledger_config(
        tmp_path / "ledger.csv",
        classes="chart.csv",
        chart_columns={"code": "konto", "name": "name", "parent": "gruppe"},
    )
    snakemake(tmp_path, "results/features/label_map.json", config=config)
    label_map = json.loads((tmp_path / "results/features/label_map.json").read_text())
    assert label_map["labels"] == ["4000", "4930", "4210", "4400", "1000", "1800"]
    assert label_map["counts"] == {
        "4000": 0,
        "4930": 30,
        "4210": 18,
        "4400": 10,
        "1000": 0,
        "1800": 2,
    }
    assert label_map["names"] == chart.get_column("name").to_list()
    assert label_map["parents"] == [None, "4000", "4000", None, None, "1000"]
    assert label_map["descriptions"] == [None] * 6

    # The chart is checked with the config: a cycle stops the run before any job (and before
    # an MLflow run is opened), naming the row.
    run_file = tmp_path / "results/tracking/run.json"
    last_run = run_file.read_text()
    chart.with_columns(gruppe=pl.Series([None, "4210", "4930", None, None, "1000"])).write_csv(
        tmp_path / "chart.csv"
    )
    result = snakemake(tmp_path, "results/features/label_map.json", config=config, check=False)
    assert result.returncode != 0
    assert (
        "chart.csv: row 2, column 'gruppe': the parent links form a cycle: 4930 -> 4210 -> 4930"
    ) in result.stderr
    assert jobs_run(result) == {}
    assert run_file.read_text() == last_run
    # A chart file that is not there is named the same way.
    config["data"]["classes"] = "no-such-chart.csv"
    result = snakemake(tmp_path, "results/features/label_map.json", config=config, check=False)
    assert result.returncode != 0
    assert "data.classes: no chart file no-such-chart.csv" in result.stderr


def test_uploads_without_s3_stop_before_any_job(tmp_path, monkeypatch):
    """Uploads are on by default: with no S3 credentials in the environment the whole workflow
    stops before its first job, before an MLflow run is opened, saying what to set."""
    small_ledger(tmp_path / "ledger.csv")
    config = ledger_config(tmp_path / "ledger.csv")
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    env = {
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    # The sentinel secret of every workflow run, without a key id, is no credential.
    result = snakemake(tmp_path, config=config, env=env, check=False)
    assert result.returncode != 0
    assert (
        "uploads are on (upload.enabled) but S3 cannot take them: no S3 credentials in the "
        "environment. Set AWS_ENDPOINT_URL"
    ) in result.stderr
    assert "upload: {enabled: false}" in result.stderr
    # Snakemake printed its plan, then stopped before the first job: nothing was written.
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()
    # An experiment named as a folder path (as on Databricks) cannot name a folder of the keys.
    named = snakemake(
        tmp_path, config=config | {"tracking": {"experiment": "team/ledger"}}, env=env, check=False
    )
    assert "tracking.experiment 'team/ledger' cannot name a folder of S3 keys" in named.stderr
    assert not (tmp_path / "results").exists()

    # Without uploads the same config plans the workflow up to evaluate, register and predict.
    config["upload"] = {"enabled": False}
    planned = snakemake(tmp_path, "-n", config=config, env=env)
    assert "train" in jobs_run(planned) and "upload_model" not in jobs_run(planned)


def test_each_data_stage_runs_on_its_own_as_in_the_workflow(finished_run, tmp_path):
    """ingest to serialize, each script run by hand on the last one's files (no Snakemake),
    write what the workflow's jobs wrote."""
    workdir, _, config, _ = finished_run
    # Other tests change this workdir's config; bring its results back in line with it first.
    snakemake(workdir, *SERIALIZED, config=config)
    settings = tmp_path / "config.yaml"
    settings.write_text(json.dumps(config))
    out = tmp_path / "out"

    def stage(name, *options):
        subprocess.run(
            [sys.executable, str(REPO / "scripts" / f"{name}.py"), "--settings", str(settings)]
            + [str(option) for option in options],
            check=True,
            capture_output=True,
        )

    stage("ingest", "--output", out / "records.parquet")
    stage(
        "clean",
        "--input", out / "records.parquet",
        "--output", out / "clean.parquet",
        "--rejects", out / "rejects.parquet",
        "--counts", out / "counts.json",
        "--summary", out / "summary.tsv",
    )  # fmt: skip
    stage(
        "features",
        "--input", out / "clean.parquet",
        "--output", out / "features.parquet",
        "--label-map", out / "label_map.json",
        "--plot", out / "classes.png",
    )  # fmt: skip
    stage(
        "split",
        "--input", out / "features.parquet",
        "--out-dir", out / "split",
        "--plot", out / "split.png",
        "--counts-table", out / "split.tsv",
    )  # fmt: skip
    for name in ("train", "validation", "test"):
        stage(
            "serialize",
            "--input", out / "split" / f"{name}.parquet",
            "--label-map", out / "label_map.json",
            "--output", out / f"{name}.parquet",
            "--split", name,
        )  # fmt: skip

    results = workdir / "results"
    assert pl.read_parquet(out / "records.parquet").equals(
        pl.read_parquet(results / "ingest/records.parquet")
    )
    for mine, workflows in (
        ("counts.json", "clean/counts.json"),
        ("label_map.json", "features/label_map.json"),
        ("split/split_report.json", "split/split_report.json"),
    ):
        assert json.loads((out / mine).read_text()) == json.loads(
            (results / workflows).read_text()
        ), mine
    for name in ("train", "validation", "test"):
        assert pl.read_parquet(out / f"{name}.parquet").equals(
            pl.read_parquet(results / f"serialize/{name}.parquet")
        ), name


def test_readme_forced_rerun_and_rerun_triggers(finished_run):
    workdir, _, config, _ = finished_run
    # Other tests change this workdir's config; bring its results back in line with it first.
    snakemake(workdir, *SERIALIZED, config=config)
    forced = snakemake(
        workdir, "-n", "results/serialize/train.parquet", "-R", "clean", config=config
    )
    assert jobs_run(forced) == {"clean": 1, "features": 1, "split": 1, "serialize": 1}
    # docs/development.md's command for editing code without re-running: with all results in
    # place nothing is to be done (an edit under it is the next test's).
    quiet = snakemake(
        workdir,
        "-n",
        *SERIALIZED,
        "--rerun-triggers",
        "mtime",
        "input",
        "software-env",
        config=config,
    )
    assert "Nothing to be done" in quiet.stdout + quiet.stderr


def test_readme_standalone_stage_command(finished_run, tmp_path):
    workdir, _, config, _ = finished_run
    settings = tmp_path / "config.yaml"
    settings.write_text(json.dumps(config))
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "clean.py"),
            "--settings",
            str(settings),
            "--input",
            str(workdir / "results/ingest/records.parquet"),
            "--output",
            str(tmp_path / "clean.parquet"),
            "--rejects",
            str(tmp_path / "rejects.parquet"),
            "--counts",
            str(tmp_path / "counts.json"),
            "--summary",
            str(tmp_path / "summary.tsv"),
        ],
        check=True,
        capture_output=True,
    )
    assert json.loads((tmp_path / "counts.json").read_text()) == json.loads(
        (workdir / "results/clean/counts.json").read_text()
    )


def test_readme_mlflow_ui_shows_the_run(finished_run):
    workdir, *_ = finished_run
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    (port,) = free_ports(1)
    ui = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "ui",
            "--backend-store-uri",
            "sqlite:///results/tracking/mlflow.db",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/get?run_id={run['run_id']}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    found = json.load(response)
                break
            except OSError:
                if time.monotonic() > deadline or ui.poll() is not None:
                    raise
                time.sleep(1)
        assert found["run"]["info"]["run_id"] == run["run_id"]
    finally:
        ui.terminate()
        ui.wait(timeout=30)


def make_run_configs(config: str) -> list[str]:
    """The config files `make run CONFIG=<config>` gives snakemake, from make's recipe."""
    recipe = subprocess.run(
        ["make", "--dry-run", "run", f"CONFIG={config}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    arguments = re.search(r"/snakemake ([^|;]*?) --cores ", recipe).group(1).split()
    assert arguments[0] == "--configfile", recipe
    return arguments


def test_user_data_section_does_not_inherit_the_bundled_roles(tmp_path):
    """A config naming only a label and a text column describes the user's file alone, under
    `make run CONFIG=my.yaml` as under `snakemake --configfile my.yaml`."""
    # As in a clone: the bundled config/config.yaml is there, and the user's file goes over it.
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    pl.DataFrame(
        {
            "memo": [f"office chairs {i}" if i % 2 else f"monthly rent {i}" for i in range(40)],
            "account": ["4930" if i % 2 else "4210" for i in range(40)],
        }
    ).write_csv(tmp_path / "mine.csv")
    config = {
        "data": {"path": "mine.csv", "columns": {"label": "account", "text": ["memo"]}},
        "serialize": {"fields": [{"column": "memo"}]},
    }
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(config))
    target = "results/clean/records.parquet"
    for configs in (["--configfile", "my.yaml"], make_run_configs("my.yaml")):
        shutil.rmtree(tmp_path / "results", ignore_errors=True)
        result = snakemake(tmp_path, target, *configs, check=False)
        assert result.returncode == 0, (configs, (tmp_path / "logs/ingest/ingest.log").read_text())
        clean = pl.read_parquet(tmp_path / target)
        assert clean.columns == ["source_row", "memo", "account"]
        assert clean.height == 40


def test_editing_a_stage_script_reruns_its_rule_and_what_follows(tmp_path):
    """The script reaches a rule as a path, so its content is a param (with the package modules
    it imports): an edit re-runs the rule under Snakemake's default triggers."""
    copy = tmp_path / "workflow-copy"
    for part in ("workflow", "scripts", "config", "profiles", "envs"):
        shutil.copytree(REPO / part, copy / part)
    shutil.copy(REPO / "Snakefile", copy / "Snakefile")
    workdir = tmp_path / "work"
    workdir.mkdir()
    small_ledger(workdir / "ledger.csv")
    config_path = workdir / "config.yaml"
    config_path.write_text(json.dumps(ledger_config(workdir / "ledger.csv")))

    def run(*args):
        command = [*snakemake_command(workdir), "--snakefile", str(copy / "Snakefile")]
        command += ["--cores", "2", *SERIALIZED, *args, "--configfile", str(config_path)]
        return subprocess.run(
            command, cwd=workdir, env=snakemake_env(workdir), capture_output=True, text=True
        )

    first = run()
    assert first.returncode == 0, first.stderr[-3000:]
    with (copy / "scripts" / "split.py").open("a") as handle:
        handle.write("# an edit\n")
    planned = run("-n")
    assert jobs_run(planned) == {"split": 1, "serialize": 3}, planned.stderr[-2000:]
    # Leaving params out of the triggers (as docs/development.md says) keeps the results as they
    # are.
    quiet = run("-n", "--rerun-triggers", "mtime", "input", "software-env")
    assert "Nothing to be done" in quiet.stdout + quiet.stderr


def test_readme_holdout_config_keeps_classes_out_of_train_and_validation(tmp_path):
    """`--configfile config/holdout.yaml` on the bundled data: 20 classes go
    wholly to test. Split takes only `evaluate.holdout_classes` of its section: another
    evaluate setting leaves the split as it is."""
    (tmp_path / "config").mkdir()
    for name in ("config.yaml", "holdout.yaml"):
        shutil.copy(REPO / "config" / name, tmp_path / "config" / name)
    target = "results/split/split_report.json"
    configs = ["--configfile", "config/holdout.yaml"]
    snakemake(tmp_path, target, *configs)
    report = json.loads((tmp_path / target).read_text())
    held = report["holdout_classes"]
    assert len(held) == 20
    for code in held:
        counts = report["per_class"][code]
        assert counts["train"] == counts["validation"] == 0 and counts["test"] >= 3
    (tmp_path / "more.yaml").write_text("evaluate: {bootstrap_resamples: 500}\n")
    dry = snakemake(tmp_path, target, "-n", *configs, "more.yaml")
    assert "Nothing to be done" in dry.stdout + dry.stderr


def test_decoder_config_plans_the_whole_workflow_with_smollm2(tmp_path):
    """`make run CONFIG=config/decoder.yaml`: the decoder's config merged over the bundled one
    passes the schema and every stage is planned, with the decoder as the model to train
    (tests/training/test_train_decoder.py trains it)."""
    configs = make_run_configs("config/decoder.yaml")
    assert configs == ["--configfile", "config/decoder.yaml"]
    (tmp_path / "config").mkdir()
    for name in ("config.yaml", "decoder.yaml"):
        shutil.copy(REPO / "config" / name, tmp_path / "config" / name)
    dry = snakemake(tmp_path, "-n", "--printshellcmds", *configs)
    planned = jobs_run(dry)
    for rule in ("ingest", "split", "baseline", "train", "evaluate"):
        assert planned.get(rule) == 1, (rule, planned)
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in dry.stdout
    assert "gate_proj" in dry.stdout


MODULE_SNAKEFILE = """\
configfile: "config.yaml"


module account_tax:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from account_tax as at_*
"""


def test_used_as_a_module_from_another_folder(finished_run, tmp_path):
    """A user's folder with its own config and a Snakefile that imports this workflow as a
    module (docs/development.md, "Using it as a Snakemake module"): the data stages run the
    repository's scripts and write into the user's folder the same files as the workflow run
    from here."""
    workdir, _, config, _ = finished_run
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp_path / "Snakefile").write_text(MODULE_SNAKEFILE.format(snakefile=REPO / "Snakefile"))
    result = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--cores", "2", *SERIALIZED],
        cwd=tmp_path,
        env=snakemake_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "localrules directive specifies rules that are not present" not in result.stderr
    stages = {"ingest": 1, "clean": 1, "features": 1, "split": 1, "serialize": 3}
    assert jobs_run(result) == {f"at_{rule}": count for rule, count in stages.items()}
    for path in [*SERIALIZED, "results/features/label_map.json"]:
        assert (tmp_path / path).read_bytes() == (workdir / path).read_bytes(), path
    assert (tmp_path / "logs/ingest/ingest.log").is_file()


def test_corrections_relabel_records_before_features_and_are_tracked(tmp_path):
    """data.corrections adds the correct stage between clean and features: the corrected label
    reaches the serialized split with its source, the file's sha256 the MLflow run, and a later
    edit of the file re-runs correct and what follows, not ingest or clean."""
    small_ledger(tmp_path / "ledger.csv")
    reviewed = tmp_path / "reviewed.csv"
    pl.DataFrame(
        {"entry_id": ["E00001", "E00002", "E09999"], "account": ["4210", "4210", "4210"]}
    ).write_csv(reviewed)
    config = ledger_config(tmp_path / "ledger.csv", classes=["4930", "4210", "4400", "1800"])
    config["data"]["corrections"] = [str(reviewed)]

    result = snakemake(tmp_path, *SERIALIZED, config=config)

    assert jobs_run(result)["correct"] == 1
    counts = json.loads((tmp_path / "results/correct/counts.json").read_text())
    assert (counts["applied"], counts["changed"], counts["rejected"]) == (2, 2, 1)
    summary = (tmp_path / "results/correct/summary.tsv").read_text().splitlines()
    assert "applied\t2" in summary
    refused = "no record with id 'E09999' in the ledger, and the file lacks a record's columns"
    assert f"rejected: {refused}\t1" in summary
    splits = pl.concat(pl.read_parquet(path) for path in (tmp_path / p for p in SERIALIZED))
    labels = json.loads((tmp_path / "results/features/label_map.json").read_text())["labels"]
    corrected = splits.filter(pl.col("id").is_in(["E00001", "E00002"]))
    assert corrected["label_source"].to_list() == ["correction", "correction"]
    assert {labels[i] for i in corrected["label_id"]} == {"4210"}
    assert set(splits["label_source"]) == {"ledger", "correction"}
    run = json.loads((tmp_path / "results/tracking/run.json").read_text())
    tags = MlflowClient(tracking_uri=run["tracking_uri"]).get_run(run["run_id"]).data.tags
    assert tags["input_sha256.reviewed.csv"] == hashlib.sha256(reviewed.read_bytes()).hexdigest()

    reviewed.write_text(reviewed.read_text().replace("E00002,4210", "E00002,4400"))
    planned = jobs_run(snakemake(tmp_path, "-n", *SERIALIZED, config=config))
    assert planned.get("ingest", 0) == planned.get("clean", 0) == 0
    assert planned["correct"] == planned["features"] == 1


def test_ledger_rules_are_learned_replayed_and_tracked_and_predict_reads_them(tmp_path):
    """review.rules.columns adds the ledger_rules stage: a vendor booked to one account on 30
    dates makes a rule that the replay finds right 28 times in 28 (from its third date on),
    trusted at a target below their lower bound; a vendor booked to two accounts makes none.
    Its figures reach the MLflow run, and predict and register take the rules as their input."""
    rows = []
    for n in range(60):
        vendor, account = (
            ("Acme GmbH", "4930") if n % 2 else ("Globex", "1800" if n % 4 else "4210")
        )
        rows.append(ledger_row(n, date=f"2024-03-{1 + n // 2:02d}", vendor=vendor, account=account))
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(tmp_path / "ledger.csv")
    config = ledger_config(tmp_path / "ledger.csv")
    config["review"] = {"target_precision": 0.85, "rules": {"columns": ["vendor"]}}

    snakemake(tmp_path, "results/ledger_rules/report.json", config=config)

    rules = pl.read_parquet(tmp_path / "results/ledger_rules/rules.parquet")
    assert rules.to_dicts() == [
        {"vendor": "acme gmbh", "rule_account": "4930", "rule_bookings": 30}
    ]
    report = json.loads((tmp_path / "results/ledger_rules/report.json").read_text())
    assert (report["matched"], report["right"], report["trusted"]) == (28, 28, True)
    assert report["lower_bound"] == pytest.approx(0.05 ** (1 / 28))
    run = json.loads((tmp_path / "results/tracking/run.json").read_text())
    metrics = MlflowClient(tracking_uri=run["tracking_uri"]).get_run(run["run_id"]).data.metrics
    assert metrics["ledger_rules/replay_right"] == 28
    assert metrics["ledger_rules/trusted"] == 1.0
    read = LedgerRules.read(
        tmp_path / "results/ledger_rules/rules.parquet",
        tmp_path / "results/ledger_rules/report.json",
    )
    assert read.trusted and read.columns == ["vendor"]
    matched = read.matched(pl.LazyFrame({"vendor": ["globex", "acme gmbh"]})).collect()
    assert matched["rule_account"].to_list() == [None, "4930"]
    config["predict"] = {"inputs": {"new": str(tmp_path / "ledger.csv")}}
    planned = snakemake(tmp_path, "-n", "--printshellcmds", config=config).stdout
    # The predict jobs and the registered model apply the same rules.
    for script in ("scripts/predict.py", "scripts/register.py"):
        command = next(line for line in planned.splitlines() if script in line)
        assert "--rules results/ledger_rules/rules.parquet" in command, script
        assert "--rules-report results/ledger_rules/report.json" in command, script
