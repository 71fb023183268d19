"""The sweep's trials from the config, and the choice among them."""

import json

import polars as pl
import pytest
import yaml
from training.conftest import REPO

from account_tax.errors import DataError
from account_tax.settings import complete
from account_tax.training.sweep import SelectPaths, best_trial, select, trials


def config(parameters, **sweep):
    return complete({"train": {"lora": {"r": 8}}, "sweep": {"parameters": parameters, **sweep}})


def test_no_parameters_no_trials():
    assert trials(complete({"train": {}, "sweep": {}})) == []


def test_a_grid_is_every_combination_named_by_its_values():
    found = trials(config({"learning_rate": [0.0003, 0.001], "lora.r": [4, 16]}))
    assert [t.name for t in found] == [
        "learning_rate~0.0003__lora.r~4",
        "learning_rate~0.0003__lora.r~16",
        "learning_rate~0.001__lora.r~4",
        "learning_rate~0.001__lora.r~16",
    ]
    assert found[1].train["learning_rate"] == 0.0003 and found[1].train["lora"]["r"] == 16
    # Keys not swept keep the section's values and the schema's defaults.
    assert found[1].train["lora"]["alpha"] == 16 and found[1].train["head"] == "cosine"


def test_random_draws_distinct_combinations_seeded_and_at_most_the_grid():
    parameters = {"learning_rate": [1e-4, 3e-4, 1e-3], "head": ["cosine", "linear"], "seed": [1, 2]}
    drawn = trials(config(parameters, method="random", trials=5, seed=3))
    assert len({t.name for t in drawn}) == 5
    again = trials(config(parameters, method="random", trials=5, seed=3))
    assert [t.name for t in again] == [t.name for t in drawn]
    other = trials(config(parameters, method="random", trials=5, seed=4))
    assert [t.name for t in other] != [t.name for t in drawn]
    everything = trials(config(parameters, method="random", trials=50))
    assert len(everything) == 12


def test_a_value_the_schema_refuses_names_the_trial_and_the_key():
    with pytest.raises(DataError, match=r"sweep trial head~tree: config `train.head`: 'tree' is"):
        trials(config({"head": ["cosine", "tree"]}))
    with pytest.raises(
        DataError, match=r"config `sweep.parameters.head`: \[\] should be non-empty"
    ):
        config({"head": []})


def test_a_key_that_changes_only_how_a_run_goes_is_not_swept():
    """Trials that differ only in such a key would share one checkpoint folder (its fingerprint
    leaves them out), and jobs running side by side would overwrite each other's saves."""
    with pytest.raises(DataError, match=r"sweep.parameters: train.dataloader, train.final_head"):
        trials(config({"final_head": ["learned", "refit"], "dataloader.num_workers": [0, 2]}))


def test_the_best_validation_macro_f1_wins_and_a_tie_goes_to_the_earlier_trial():
    found = trials(config({"learning_rate": [0.1, 0.2, 0.3]}))
    scores = {"learning_rate~0.1": 0.5, "learning_rate~0.2": 0.7, "learning_rate~0.3": 0.7}
    metrics = {name: {"validation_macro_f1": score} for name, score in scores.items()}
    assert best_trial(found, metrics).name == "learning_rate~0.2"
    metrics["learning_rate~0.2"]["validation_macro_f1"] = None
    assert best_trial(found, metrics).name == "learning_rate~0.3"
    with pytest.raises(DataError, match="no sweep trial has a validation_macro_f1"):
        best_trial(found, {name: {} for name in scores})


def test_select_writes_the_chosen_settings_the_table_and_the_plot(tmp_path):
    swept = config({"head": ["cosine", "linear"], "lora.r": [4]})
    paths = []
    for index, name in enumerate(["head~cosine__lora.r~4", "head~linear__lora.r~4"]):
        path = tmp_path / name / "metrics.json"
        path.parent.mkdir()
        path.write_text(
            json.dumps(
                {
                    "validation_macro_f1": 0.6 + 0.1 * index,
                    "validation_accuracy": 0.8,
                    "exported_epoch": 2.0,
                    "epochs_run": 3.0,
                    "stopped": "every epoch ran",
                    "training_minutes": 0.5,
                }
            )
        )
        paths.append(path)
    out = SelectPaths(
        trial_metrics=paths,
        selected=tmp_path / "selected.json",
        trials_table=tmp_path / "trials.tsv",
        plot=tmp_path / "trials.png",
    )
    chosen, rows = select(swept, out)

    assert chosen.name == "head~linear__lora.r~4"
    selected = json.loads(out.selected.read_text())
    assert selected == {"train": chosen.train} and selected["train"]["head"] == "linear"
    table = pl.read_csv(out.trials_table, separator="\t")
    assert table["trial"].to_list() == [row["trial"] for row in rows]
    assert table["head"].to_list() == ["cosine", "linear"]
    assert table["validation_macro_f1"].to_list() == pytest.approx([0.6, 0.7])
    assert out.plot.stat().st_size > 10_000
    with pytest.raises(DataError, match="1 trial metrics files for the sweep's 2 trials"):
        select(swept, SelectPaths(paths[:1], out.selected, out.trials_table, out.plot))


def test_the_sweep_in_the_training_docs_is_a_valid_grid_of_eight_trials():
    text = (REPO / "docs" / "training.md").read_text()
    block = text[text.index("```yaml\nsweep:") + len("```yaml\n") :]
    documented = yaml.safe_load(block[: block.index("```")])
    found = trials(complete({"train": {}} | documented))
    assert len(found) == 8
    assert found[-1].name == "learning_rate~0.001__lora.r~16__head~linear"
