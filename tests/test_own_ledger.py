"""The README's own-ledger section, done as a new user would: the repository as a clone holds it,
a ledger CSV and a chart of accounts, a config file like the README's, and
`make run CONFIG=my.yaml`, which starts the local S3 server for the uploads and stops it after.
The environment is this test run's (the Makefile is told where it is, and that it is up to date)."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
import pytest
import yaml
from sample_ledger import LEDGER_COLUMNS, ledger_config, small_ledger

from account_tax.ports import free_ports

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parents[1]

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


def clone(target: Path) -> Path:
    """The repository's tracked files, as `git clone` would lay them out (no results, no venv)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, copy = REPO / name, target / name
        if source.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(source.read_bytes())
            copy.chmod(source.stat().st_mode)
    return target


def make_run(repository: Path, s3: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`make run CONFIG=my.yaml` with no AWS variables in the environment but `s3`."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env |= s3 or {}
    # DeepSpeed's compiled CPU module, shared with the other tests (minutes to build).
    env["TORCH_EXTENSIONS_DIR"] = str(REPO / ".cache" / "torch_extensions")
    command = ["make", "run", "CONFIG=my.yaml", f"VENV={VENV}", "-o", f"{VENV}/.installed"]
    return subprocess.run(
        command, cwd=repository, env=env, capture_output=True, text=True, timeout=1200
    )


def excel_csv(frame: pl.DataFrame, path: Path) -> None:
    """`frame` as German Excel or accounting software saves plain CSV: semicolons, windows-1252."""
    path.write_bytes(frame.write_csv(separator=";").encode("windows-1252"))


def german_export(path: Path) -> None:
    """The ledger as German accounting software exports it (`excel_csv`): amounts a hundred
    times larger, written 1.234,00, dates 15.03.2024, and the vendor Müller GmbH (the bad rows'
    values stay as they were)."""
    rows = pl.read_csv(path, infer_schema=False)
    german = (pl.col("amount").cast(pl.Float64, strict=False) * 100).map_elements(
        lambda a: f"{a:,.2f}".translate(str.maketrans(",.", ".,")), return_dtype=pl.String
    )
    date = pl.col("date").str.to_date("%Y-%m-%d", strict=False).dt.strftime("%d.%m.%Y")
    exported = rows.with_columns(
        pl.coalesce(german, "amount").alias("amount"),
        pl.coalesce(date, "date").alias("date"),
        pl.col("vendor").str.replace("Acme", "Müller"),
    )
    excel_csv(exported, path)


@pytest.fixture
def short_folder():
    """A folder with a short path: the local S3 server's sockets live in the clone, and a socket
    path may have 107 bytes at most (pytest's folders under a parallel run come close)."""
    with tempfile.TemporaryDirectory(prefix="own-ledger-") as folder:
        yield Path(folder)


def test_make_run_on_my_own_ledger_and_chart(short_folder):
    repository = clone(short_folder / "account-tax")
    exports = repository / "exports"
    exports.mkdir()
    rows_in = small_ledger(exports / "ledger-2025.csv")
    german_export(exports / "ledger-2025.csv")
    chart = pl.DataFrame(
        {
            "account": ["4000", "4930", "4210", "4400", "1000", "1800"],
            "title": ["Aufwand", "Bürobedarf", "Miete", "Erlöse", "Vermögen", "Bank"],
            "group": [None, "4000", "4000", None, None, "1000"],
        }
    )
    excel_csv(chart, exports / "chart-of-accounts.csv")
    ledger = ledger_config(exports / "ledger-2025.csv")
    my_config = {
        "data": {
            "path": "exports/ledger-2025.csv",
            "columns": LEDGER_COLUMNS,
            "csv_separator": ";",
            "encoding": "windows-1252",
            "date_format": "%d.%m.%Y",
            "number_format": "1.234,5",
            "classes": "exports/chart-of-accounts.csv",
            "chart_columns": {"code": "account", "name": "title", "parent": "group"},
        },
        # The README's features and serialize sections, which the test ledger's config shares.
        "features": ledger["features"],
        "serialize": ledger["serialize"],
    }
    (repository / "my.yaml").write_text(yaml.safe_dump(my_config, sort_keys=False))

    result = make_run(repository)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    results = repository / "results"
    counts = json.loads((results / "clean/counts.json").read_text())
    assert counts["rows_in"] == rows_in
    # Only small_ledger's three bad rows are rejects: the German text, amounts and dates read.
    assert (counts["rejected"], counts["duplicates"]) == (3, 2)
    cleaned = pl.read_parquet(results / "clean/records.parquet")
    assert cleaned["amount"].sort().to_list() == [(10 + i) * 100.0 for i in range(60)]
    assert str(cleaned["date"].max()) == "2024-03-15"
    assert cleaned["vendor"].unique().to_list() == ["müller gmbh"]
    label_map = json.loads((results / "features/label_map.json").read_text())
    assert label_map["labels"] == ["4000", "4930", "4210", "4400", "1000", "1800"]
    assert label_map["names"][1] == "Bürobedarf"
    evaluation = json.loads((results / "evaluate/metrics.json").read_text())
    assert evaluation["comparison"]["shipped"]["candidate"]
    receipt = json.loads((results / "upload/model.json").read_text())
    assert receipt["bucket"] == "account-tax" and receipt["objects"]
    assert json.loads((results / "register/model.json").read_text())["version"]
    # The local S3 server is stopped again, and a second run has nothing to do.
    assert not (repository / ".cache/s3/server.pid").exists()
    again = make_run(repository)
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout


@pytest.mark.parametrize(
    ("s3_environment", "problem"),
    [
        # An endpoint of your own: here one where nothing answers.
        (
            {
                "AWS_ENDPOINT_URL": "http://127.0.0.1:{port}",
                "AWS_ACCESS_KEY_ID": "key",
                "AWS_SECRET_ACCESS_KEY": "secret",
            },
            "cannot check bucket 'account-tax' at endpoint http://127.0.0.1:{port}",
        ),
        # AWS itself: credentials and no endpoint; here a profile that does not exist.
        ({"AWS_PROFILE": "no-such-profile"}, "profile (no-such-profile) could not be found"),
        # A key without its secret.
        ({"AWS_ACCESS_KEY_ID": "key"}, "missing: AWS_SECRET_ACCESS_KEY"),
    ],
)
def test_make_run_uploads_where_the_environment_says(short_folder, s3_environment, problem):
    """With an endpoint or credentials in the environment, `make run` starts no local S3
    server: the workflow takes the S3 they name, and where that cannot take the uploads it stops
    before any job, saying why."""
    repository = clone(short_folder / "account-tax")
    small_ledger(repository / "ledger.csv")
    config = ledger_config(Path("ledger.csv"))
    (repository / "my.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (port,) = free_ports(1)
    environment = {name: value.format(port=port) for name, value in s3_environment.items()}

    result = make_run(repository, environment)

    assert result.returncode != 0
    assert "uploads are on (upload.enabled) but S3 cannot take them" in result.stderr
    assert problem.format(port=port) in result.stderr
    assert not (repository / ".cache/s3").exists()
    assert not (repository / "results").exists()
