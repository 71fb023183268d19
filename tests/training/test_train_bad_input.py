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
