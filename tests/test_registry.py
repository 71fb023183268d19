"""Who gets the champion alias: a real SQLite Model Registry with versions whose test
predictions are real files; the decision moves the alias only as docs/serving.md says."""

import datetime
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import polars as pl
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    PERMISSION_DENIED,
    RESOURCE_ALREADY_EXISTS,
    RESOURCE_DOES_NOT_EXIST,
)
from sample_ledger import ledger_row, ledger_spec

from account_tax.data.clean import CleanSettings, clean
from account_tax.data.ingest import ingest
from account_tax.errors import DataError
from account_tax.evaluation.ledger_rules import RuleSettings, learn_rules, report
from account_tax.evaluation.shipped import ShippedCandidate
from account_tax.io import sha256_file, write_json, write_parquet
from account_tax.ports import free_ports
from account_tax.tracking.champion import RegisterSettings, fetch_champion_model
from account_tax.tracking.registry import (
    TEST_PREDICTIONS,
    RefusedRequest,
    champion_decision,
    check_request,
    evaluated_rows_sha256,
    input_example,
    ledger_rules_tags,
    register_version,
    request_records,
    rules_sentence,
)

LABELS = ["1000", "2000", "3000", "4000"]
ROWS = 200


def predictions(correct: float, seed: int, ids: range = range(ROWS)) -> pl.DataFrame:
    """Test predictions where a fraction `correct` of the rows is right."""
    rng = np.random.default_rng(seed)
    truth = [LABELS[i % len(LABELS)] for i in ids]
    right = rng.random(len(truth)) < correct
    predicted = [
        t if ok else LABELS[(LABELS.index(t) + 1) % 4] for t, ok in zip(truth, right, strict=True)
    ]
    return pl.DataFrame(
        {
            "id": [f"r{i:04d}" for i in ids],
            "label": truth,
            "predicted_label": predicted,
            "confidence": rng.uniform(0.3, 1.0, len(truth)).astype(np.float32),
            "top_k_labels": [[p, t] for p, t in zip(predicted, truth, strict=True)],
        }
    )


@pytest.fixture
def registry(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_registered_model("m")
    return client, uri, tmp_path


def add_champion(registry, frame: pl.DataFrame, threshold: str = "0.5") -> str:
    client, _, folder = registry
    source = folder / f"version-{len(list(folder.glob('version-*')))}"
    (source / "artifacts").mkdir(parents=True)
    frame.write_parquet(source / "artifacts" / TEST_PREDICTIONS)
    tags = {"test_split_sha256": evaluated_rows_sha256(frame), "auto_threshold": threshold}
    version = client.create_model_version("m", source.as_uri(), tags=tags)
    client.set_registered_model_alias("m", "champion", version.version)
    return version.version


def decide(registry, verdict: str | None, ours: pl.DataFrame, name: str = "m", uri=None) -> dict:
    """The champion decision for a new version of model `name`, in the registry's store or in
    the one at `uri`."""
    client, registry_uri, _ = registry
    if uri is not None:
        client = MlflowClient(uri)
    shipped = ShippedCandidate.from_dict(
        {"candidate": "model", "threshold": 0.5, "verdict": verdict}
    )
    return champion_decision(
        client, uri or registry_uri, name, "champion", shipped, ours, LABELS, resamples=300, seed=1
    )


@pytest.mark.parametrize("verdict", ["no significant difference", "worse", None])
def test_not_better_than_the_baseline_never_takes_the_alias(registry, verdict):
    decision = decide(registry, verdict, predictions(0.99, seed=1))
    assert not decision["moved"]
    assert "against the baseline on test" in decision["why"]


def test_better_than_the_baseline_and_no_champion_takes_it(registry):
    decision = decide(registry, "better", predictions(0.9, seed=1))
    assert decision == {
        "moved": True,
        "why": "better than the baseline on test; there was no champion",
    }


def test_a_model_not_yet_registered_has_no_champion(registry):
    decision = decide(registry, "better", predictions(0.9, seed=1), name="new-model")
    assert decision["why"] == "better than the baseline on test; there was no champion"


def test_a_registry_that_cannot_be_read_moves_no_alias(registry, monkeypatch):
    """Only a model or alias that does not exist means "no champion": a server that does not
    answer is an error, never a champion alias moved without the comparison."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    (port,) = free_ports(1)
    uri = f"http://127.0.0.1:{port}"
    with pytest.raises(MlflowException, match=re.escape(uri)):
        decide(registry, "better", predictions(0.9, seed=1), uri=uri)


def test_a_champion_on_the_same_rows_must_be_beaten(registry):
    champion = predictions(0.6, seed=2)
    version = add_champion(registry, champion)
    tie = decide(registry, "better", champion)
    assert not tie["moved"]
    assert f"no significant difference from champion version {version}" in tie["why"]
    assert tie["difference_from_champion"]["value"] == 0
    better = decide(registry, "better", predictions(0.95, seed=3))
    assert better["moved"]
    assert better["difference_from_champion"]["low"] > 0
    worse = decide(registry, "better", predictions(0.3, seed=4))
    assert not worse["moved"] and worse["why"].startswith("worse than champion")


def test_a_champion_registered_without_a_threshold_is_compared_all_the_same(registry):
    """A champion whose evaluation found no auto-post threshold (its tag reads "None", as
    register writes it) is compared on the same rows like any other."""
    champion = predictions(0.6, seed=2)
    version = add_champion(registry, champion, threshold="None")
    better = decide(registry, "better", predictions(0.95, seed=3))
    assert better["moved"]
    assert f"better than champion version {version} on the same test rows" in better["why"]


def test_a_champion_tested_on_other_rows_compares_through_the_baseline(registry):
    version = add_champion(registry, predictions(0.99, seed=2, ids=range(ROWS, 2 * ROWS)))
    decision = decide(registry, "better", predictions(0.7, seed=1))
    assert decision["moved"]
    assert f"champion version {version} was tested on other rows" in decision["why"]


COLUMNS = {
    "id": {"type": "string", "required": True},
    "memo": {"type": "string", "required": True},
    "account": {"type": "string", "required": False},
}


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (pd.DataFrame({"id": ["1", "2"], "memo": ["x", 5]}), "column 'memo', row 2: 5 is not text"),
        (pd.DataFrame({"id": [True], "memo": ["x"]}), "column 'id', row 1: True is not text"),
        (pd.DataFrame({"id": ["1"]}), "missing column(s) 'memo'"),
        (
            pd.DataFrame({"id": ["1"], "memo": ["x"], "note": ["y"]}),
            "unknown column(s) 'note' (the model takes 'id', 'memo', 'account')",
        ),
        (
            pd.DataFrame({"id": pd.Series([], dtype=str), "memo": pd.Series([], dtype=str)}),
            "no records",
        ),
        (
            pd.DataFrame({"id": ["1"], "memo": [["a", "b"]]}),
            "column 'memo', row 1: ['a', 'b'] is not text (list)",
        ),
        (
            pd.DataFrame([["1", "x", "y"]], columns=["id", "memo", "memo"]),
            "the request: column name(s) 'memo' appear more than once",
        ),
        ({"id": ["1"], "memo": ["x"]}, "send the records as a table"),
    ],
)
def test_a_bad_request_is_refused_with_a_short_message(records, message):
    with pytest.raises(RefusedRequest) as refused:
        check_request(records, COLUMNS)
    assert refused.value.message.startswith(message)
    assert refused.value.get_http_status_code() == 400


def test_a_refusal_keeps_its_message_when_mlflow_prefixes_the_request():
    refused = RefusedRequest("no records")
    refused.message = "Failed to predict data '...'. \nError: no records"  # as MLflow's server does
    assert json.loads(refused.serialize_as_json())["message"] == "no records"


def test_text_and_missing_values_pass():
    check_request(
        pd.DataFrame({"id": ["1", "2"], "memo": ["x", None], "account": [None, "4930"]}), COLUMNS
    )


def test_a_request_reads_as_its_records_would_from_a_csv_file(tmp_path):
    """The served model reads a request in memory as ingest reads the same records from a CSV
    file: every value as text, a configured null value ("NA") and an empty cell missing, the
    label optional, rows counted from 1."""
    rows = [
        ledger_row(1, memo="NA", account=""),
        ledger_row(2, vendor="", amount="12,5"),
        ledger_row(3, memo="  spaced  out  ", date="NA"),
    ]
    records = pd.DataFrame(rows)
    source = tmp_path / "records.csv"
    records.to_csv(source, index=False)
    spec = ledger_spec(source, null_values=["", "NA"])
    ingested = tmp_path / "records.parquet"
    ingest(spec, ingested, source, require_label=False)
    from_file = pl.read_parquet(ingested)
    in_memory = request_records(records, spec).select(from_file.columns)
    assert in_memory.equals(from_file)
    assert in_memory["memo"][0] is None and in_memory["vendor"][1] is None


def run_file(registry) -> Path:
    _, uri, folder = registry
    path = folder / "run.json"
    path.write_text(json.dumps({"run_id": "r", "tracking_uri": uri}))
    return path


def test_the_champions_model_is_fetched_where_a_warm_start_begins(registry, tmp_path):
    client, _, folder = registry
    source = folder / "version-0"
    model = source / "artifacts" / "model"
    model.mkdir(parents=True)
    (model / "adapter_model.safetensors").write_bytes(b"weights")
    (model / "label_map.json").write_text('{"labels": ["1000"]}')
    mlmodel = {
        "flavors": {"python_function": {"artifacts": {"model": {"path": "artifacts/model"}}}}
    }
    (source / "MLmodel").write_text(json.dumps(mlmodel))  # YAML reads JSON
    version = client.create_model_version("m", source.as_uri())
    client.set_registered_model_alias("m", "champion", version.version)
    fetched = fetch_champion_model(
        run_file(registry), RegisterSettings.of(name="m"), tmp_path / "init"
    )
    assert fetched["version"] == version.version
    assert (tmp_path / "init" / "adapter_model.safetensors").read_bytes() == b"weights"
    assert json.loads((tmp_path / "init" / "label_map.json").read_text()) == {"labels": ["1000"]}


def test_without_a_champion_a_warm_start_from_it_says_so(registry, tmp_path, monkeypatch):
    """The error names the store it asked: the run's, or, where MLFLOW_TRACKING_URI overrides it
    (and may hold a token), that variable, never its value."""
    _, uri, folder = registry
    with pytest.raises(DataError, match=r"holds alias 'champion' in sqlite:///"):
        fetch_champion_model(run_file(registry), RegisterSettings.of(name="m"), tmp_path / "x")
    other = f"sqlite:///{folder / 'other.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    MlflowClient(other).create_registered_model("m")
    with pytest.raises(DataError, match="in the store MLFLOW_TRACKING_URI names") as raised:
        fetch_champion_model(run_file(registry), RegisterSettings.of(name="m"), tmp_path / "x")
    assert uri not in str(raised.value) and other not in str(raised.value)


@pytest.mark.parametrize(("target", "trusted"), [(0.5, "trusted"), (0.99, "not trusted")])
def test_a_version_names_its_ledger_rules_and_whether_they_may_post(tmp_path, target, trusted):
    """The rules and replay report as the ledger_rules job writes them: acme booked to one account
    on 20 dates, globex to two."""
    rows = [("acme", n, "4930") for n in range(20)] + [("globex", 0, "4210"), ("globex", 1, "1800")]
    ledger = pl.LazyFrame(
        [
            {
                "vendor": v,
                "date": datetime.date(2024, 1, 1) + datetime.timedelta(days=n),
                "account": a,
            }
            for v, n, a in rows
        ]
    )
    settings = RuleSettings.of({"columns": ["vendor"]})
    rules, replay = tmp_path / "rules.parquet", tmp_path / "report.json"
    write_parquet(learn_rules(ledger, ["vendor"], "account", settings.min_bookings), rules)
    write_json(replay, report(ledger, "account", "date", settings, target, 0.95))
    tags = ledger_rules_tags(rules, replay)
    assert tags == {
        "ledger_rules": trusted,
        "ledger_rules_count": "1",
        "ledger_rules_sha256": sha256_file(rules),
    }
    assert rules_sentence(tags) == f"1 learned, {trusted}"
    assert ledger_rules_tags(None, None) == {"ledger_rules": "none"}
    assert rules_sentence({"ledger_rules": "none"}) == "none"


def test_the_input_example_is_written_as_the_ledger_writes_its_records(tmp_path, write_csv):
    """The model registered for serving is checked on a few test records as a request sends
    them, as text: in a German ledger's formats, they read back as the records they were."""
    german = {"date_format": "%d.%m.%Y", "number_format": "1.234,5"}
    rows = [
        ledger_row(1, amount="1.234,56", date="15.03.2024"),
        ledger_row(2, amount="-0,5", date="01.12.2023"),
        ledger_row(3, amount="7", date="29.02.2024"),
    ]
    path = write_csv(rows)
    spec = ledger_spec(path, **german)

    def cleaned(source, folder):
        folder.mkdir()
        ingest(spec, folder / "records.parquet", source)
        clean(
            folder / "records.parquet",
            spec,
            folder / "clean.parquet",
            folder / "rejects.parquet",
            CleanSettings.of(),
        )
        return pl.read_parquet(folder / "clean.parquet")

    records = cleaned(path, tmp_path / "ledger")
    records.write_parquet(tmp_path / "validation.parquet")
    # The test split is empty (split.test_fraction 0): the example is validation's.
    records.clear().write_parquet(tmp_path / "test.parquet")
    example = input_example([tmp_path / "test.parquet", tmp_path / "validation.parquet"], spec)
    assert example["amount"].tolist() == ["1234,56", "-0,5", "7,0"]
    assert example["date"].tolist() == ["15.03.2024", "01.12.2023", "29.02.2024"]
    example.to_csv(tmp_path / "request.csv", index=False)
    again = cleaned(tmp_path / "request.csv", tmp_path / "request")
    assert again.select("amount", "date").equals(records.select("amount", "date"))


class RegistryServer:
    """A tracking server's registry as `register_version` sees it, at the moment another run's
    registration of the same name is under way: the model is not there when asked for, and
    there when this run creates it."""

    def __init__(self, asked: int):
        self.asked, self.versions = asked, []

    def log_artifacts(self, run_id, folder, path):
        pass

    def get_run(self, run_id):
        return SimpleNamespace(info=SimpleNamespace(artifact_uri=f"s3://bucket/{run_id}"))

    def get_registered_model(self, name):
        raise MlflowException(f"{name} not found", error_code=self.asked)

    def create_registered_model(self, name, description):
        raise MlflowException(f"{name} already exists", error_code=RESOURCE_ALREADY_EXISTS)

    def create_model_version(self, name, source, run_id, tags):
        self.versions.append(source)
        return len(self.versions)


def test_a_model_another_run_registered_meanwhile_takes_the_version(tmp_path):
    server = RegistryServer(RESOURCE_DOES_NOT_EXIST)
    assert register_version(server, "account-tax", "r1", tmp_path, {}) == 1
    assert server.versions == ["s3://bucket/r1/prediction_model"]


def test_a_registry_that_refuses_is_an_error_not_a_new_model(tmp_path):
    """Only a model that does not exist is created: a refused login is raised as it is."""
    server = RegistryServer(PERMISSION_DENIED)
    with pytest.raises(MlflowException, match="not found"):
        register_version(server, "account-tax", "r1", tmp_path, {})
    assert server.versions == []
