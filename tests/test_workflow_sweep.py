"""A sweep through the real workflow: each trial its own train job and nested MLflow run, the best
on validation chosen, and the train rule resuming that trial's finished run (nothing trained
twice) so that its model is the chosen trial's."""

import json

import polars as pl
import pytest
import torch
from mlflow import MlflowClient
from safetensors.torch import load_file
from sample_ledger import ledger_config, small_ledger
from tiny_models import build_tiny_bert
from workflow_runner import jobs_run, snakemake

pytestmark = pytest.mark.workflow

CORPUS = ["memo office supplies rent sales revenue bank no", *"0123456789|:#+"] * 3
TRAINED = "results/train/segment-1"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sweep")
    small_ledger(workdir / "ledger.csv")
    config = ledger_config(workdir / "ledger.csv", classes=["4930", "4210", "4400", "1800"])
    config["train"] = {
        "model": str(build_tiny_bert(workdir / "tiny-bert", CORPUS)),
        "max_length": 48,
        "epochs": 3,
        "per_device_batch_size": 8,
        "checkpoint_every_steps": 4,
        "lora": {"r": 4, "alpha": 8},
    }
    config["sweep"] = {
        "parameters": {"learning_rate": [0.0001, 0.01], "head": ["cosine", "linear"]},
        "method": "random",
        "trials": 3,
    }
    config["upload"] = {"enabled": False}
    result = snakemake(workdir, f"{TRAINED}/metrics.json", config=config)
    return workdir, config, result


def test_each_trial_trains_once_and_the_train_rule_resumes_the_chosen_one(swept):
    workdir, _, result = swept
    assert {rule: jobs_run(result)[rule] for rule in ("train_trial", "choose_trial", "train")} == {
        "train_trial": 3,
        "choose_trial": 1,
        "train": 1,
    }
    table = pl.read_csv(workdir / "results/sweep/trials.tsv", separator="\t")
    assert table.height == 3
    chosen = table.sort("validation_macro_f1", descending=True, maintain_order=True)["trial"][0]
    selected = json.loads((workdir / "results/sweep/selected.json").read_text())["train"]
    trial = workdir / "results/sweep" / chosen
    assert f"learning_rate~{selected['learning_rate']:g}__head~{selected['head']}" == chosen

    trial_metrics = json.loads((trial / "metrics.json").read_text())
    metrics = json.loads((workdir / TRAINED / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == metrics["steps"] == trial_metrics["steps"]
    assert metrics["validation_macro_f1"] == trial_metrics["validation_macro_f1"]
    ours = load_file(workdir / TRAINED / "model" / "adapter_model.safetensors")
    theirs = load_file(trial / "model" / "adapter_model.safetensors")
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=0)
    assert (workdir / "results/sweep/trials.png").stat().st_size > 10_000


def test_every_trial_is_a_nested_mlflow_run_of_the_workflow_run(swept):
    workdir, _, _ = swept
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    client = MlflowClient(tracking_uri=run["tracking_uri"])
    parent = client.get_run(run["run_id"])
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{run['run_id']}'"
    )
    table = pl.read_csv(workdir / "results/sweep/trials.tsv", separator="\t")
    assert sorted(child.info.run_name for child in children) == sorted(table["trial"])
    for child in children:
        trial = json.loads(
            (workdir / "results/sweep" / child.info.run_name / "metrics.json").read_text()
        )
        assert child.info.status == "FINISHED"
        assert child.data.metrics["validation_macro_f1"] == pytest.approx(
            trial["validation_macro_f1"]
        )
        assert child.info.run_name.startswith(
            f"learning_rate~{float(child.data.params['train/learning_rate']):g}__"
        )
        history = client.get_metric_history(child.info.run_id, "history/loss")
        assert len(history) == trial["steps"]
    assert parent.data.tags["sweep/chosen"] in set(table["trial"])


def test_a_value_added_to_the_sweep_plans_only_its_new_trial(swept):
    workdir, config, _ = swept
    grown = json.loads(json.dumps(config))
    grown["sweep"]["trials"] = 4
    planned = jobs_run(snakemake(workdir, "-n", f"{TRAINED}/metrics.json", config=grown))
    assert planned["train_trial"] == 1
    assert planned["choose_trial"] == planned["train"] == 1
