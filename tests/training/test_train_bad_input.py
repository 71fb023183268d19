"""Bad input ends the train script in one clear line, as every other stage, not a traceback."""

import subprocess

import polars as pl
from training.conftest import REPO


def test_a_split_without_rows_is_one_line_naming_the_file(
    ledger, tiny_bert, tiny_settings, train_command, tmp_path
):
    empty = tmp_path / "train.parquet"
    pl.read_parquet(ledger["train"]).head(0).write_parquet(empty)
    command, env = train_command(
        ledger | {"train": empty}, tmp_path, tiny_settings(tiny_bert), None
    )

    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)

    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert line.endswith(f"rank 0 ERROR account_tax: {empty}: no rows to train on")


def test_a_max_length_beyond_the_models_positions_is_one_line(
    ledger, tiny_bert, tiny_settings, train_command, tmp_path
):
    """The tiny model has 128 positions: at 256 a long text would fail inside its embeddings,
    in training or at the first long record predict meets."""
    settings = tiny_settings(tiny_bert, max_length=256)
    command, env = train_command(ledger, tmp_path, settings, None)

    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)

    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert line.endswith(
        f"config `train.max_length` is 256, but the model in {tiny_bert} takes at most 128"
        " tokens: set it to 128 or less"
    )
