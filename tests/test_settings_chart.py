"""data.classes as a chart of accounts: a CSV or Parquet table with codes, names, descriptions
and parents, checked like any input."""

import re
from dataclasses import asdict
from pathlib import Path

import polars as pl
import pytest
from sample_ledger import ledger_spec

from account_tax.data.spec import Chart, ChartColumns, read_chart
from account_tax.errors import DataError

REPO = Path(__file__).resolve().parents[1]

# A three-level chart under its own column names, as an export of a bookkeeping system would be.
CHART = {
    "Konto": ["4000", "4900", "4930", "4210", "1000", "1800", "0042"],
    "Bezeichnung": ["Expenses", "Other costs", " Office supplies ", "Rent", "Assets", "Bank", ""],
    "Beschreibung": [None, None, "Paper, toner", None, None, "Current account", None],
    "Gruppe": [None, "4000", " 4900", "4000", "", "1000", None],
}
COLUMNS = ChartColumns.of(
    code="Konto", name="Bezeichnung", description="Beschreibung", parent="Gruppe"
)


def write_chart(path: Path, columns: dict[str, list]) -> Path:
    frame = pl.DataFrame(columns, schema=dict.fromkeys(columns, pl.String))
    if path.suffix == ".csv":
        frame.write_csv(path)
    else:
        frame.write_parquet(path)
    return path


EXPECTED = Chart(
    codes=("4000", "4900", "4930", "4210", "1000", "1800", "0042"),
    names=("Expenses", "Other costs", "Office supplies", "Rent", "Assets", "Bank", None),
    descriptions=(None, None, "Paper, toner", None, None, "Current account", None),
    parents=(None, "4000", "4900", "4000", None, "1000", None),
    # Without a postable column the leaves take postings, the groups do not.
    postable=(False, False, True, True, False, True, True),
)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_chart_table_gives_codes_in_file_order_with_names_descriptions_and_parents(
    tmp_path, suffix
):
    path = write_chart(tmp_path / f"chart{suffix}", CHART)
    assert read_chart(str(path), COLUMNS, "utf-8") == EXPECTED


def test_the_data_section_reads_the_chart_with_its_configured_columns(tmp_path):
    path = write_chart(tmp_path / "chart.csv", CHART)
    spec = ledger_spec(tmp_path / "ledger.csv", classes=str(path), chart_columns=asdict(COLUMNS))
    assert spec.classes == EXPECTED.codes
    assert spec.chart == EXPECTED


def test_a_code_only_chart_and_a_numeric_parquet_code_column(tmp_path):
    path = tmp_path / "chart.parquet"
    pl.DataFrame({"code": [4930, 4210], "other": ["x", "y"]}).write_parquet(path)
    chart = read_chart(str(path), ChartColumns.of(), "utf-8")
    assert chart == Chart(("4930", "4210"), (None, None), (None, None), (None, None), (True, True))


def test_a_plain_list_and_a_text_file_say_nothing_but_the_codes(tmp_path):
    text = tmp_path / "classes.txt"
    text.write_text(" 4930\n\n4210\t\n")
    for value in (str(text), ["4930 ", "4210"]):
        assert read_chart(value, COLUMNS, "utf-8") == Chart(
            ("4930", "4210"), (None, None), (None, None), (None, None), (True, True)
        )


def test_a_postable_column_says_which_accounts_take_postings(tmp_path):
    """The column wins over the leaves rule: here a group takes postings and a leaf does not."""
    flags = ["no", "yes", "X", "0", "", "TRUE", " 1 "]
    path = write_chart(tmp_path / "chart.csv", CHART | {"Bebuchbar": flags})
    columns = ChartColumns.of(**asdict(COLUMNS) | {"postable": "Bebuchbar"})
    assert read_chart(str(path), columns, "utf-8").postable == (
        False,
        True,
        True,
        False,
        False,
        True,
        True,
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["yes", "no", "maybe", "yes", "yes", "yes", "yes"],
            "<dir>/chart.csv: row 3, column 'Bebuchbar': 'maybe' is not yes or no",
        ),
        (["no"] * 7, "<dir>/chart.csv: no account takes postings (column 'Bebuchbar')"),
    ],
)
def test_a_bad_postable_flag_names_the_row_and_column(tmp_path, flags, message):
    path = write_chart(tmp_path / "chart.csv", CHART | {"Bebuchbar": flags})
    columns = ChartColumns.of(**asdict(COLUMNS) | {"postable": "Bebuchbar"})
    with pytest.raises(DataError) as error:
        read_chart(str(path), columns, "utf-8")
    assert str(error.value).replace(str(tmp_path), "<dir>").startswith(message)


def test_unknown_chart_column_keys_are_refused(tmp_path):
    expected = r"`data.chart_columns`: unknown key 'label'; allowed keys: code, description"
    with pytest.raises(DataError, match=expected):
        ledger_spec(tmp_path / "ledger.csv", classes=["4930"], chart_columns={"label": "x"})


def chart_error(tmp_path, columns: dict[str, list], suffix: str = ".csv") -> str:
    path = write_chart(tmp_path / f"chart{suffix}", columns)
    with pytest.raises(DataError) as error:
        read_chart(str(path), COLUMNS, "utf-8")
    return str(error.value).replace(str(tmp_path), "<dir>")


def with_column(name: str, values: list) -> dict[str, list]:
    return CHART | {name: values}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_duplicate_code_names_file_row_and_column(tmp_path, suffix):
    codes = ["4000", "4900", "4930", "4210", "1000", "4930 ", "0042"]
    assert chart_error(tmp_path, with_column("Konto", codes), suffix) == (
        f"<dir>/chart{suffix}: row 6, column 'Konto': code '4930' repeats row 3"
    )


def test_an_empty_code_names_file_row_and_column(tmp_path):
    codes = ["4000", "4900", "4930", "4210", " ", "1800", "0042"]
    assert chart_error(tmp_path, with_column("Konto", codes)) == (
        "<dir>/chart.csv: row 5, column 'Konto': empty code"
    )


def test_a_parent_outside_the_chart_names_file_row_and_column(tmp_path):
    parents = [None, "4000", "4900", "4000", None, "1100", None]
    assert chart_error(tmp_path, with_column("Gruppe", parents)) == (
        "<dir>/chart.csv: row 6, column 'Gruppe': parent '1100' is not a code of the chart"
    )


def test_a_cycle_of_parents_is_named_from_its_first_row(tmp_path):
    # 4000 (row 1) leads into 4210 -> 4930 -> 4900 -> 4210, named from 4900 (row 2); each code
    # is followed by its parent.
    parents = ["4210", "4210", "4900", "4930", None, "1000", None]
    assert chart_error(tmp_path, with_column("Gruppe", parents)) == (
        "<dir>/chart.csv: row 2, column 'Gruppe': the parent links form a cycle: "
        "4900 -> 4210 -> 4930 -> 4900"
    )


def test_an_account_that_is_its_own_parent_is_a_cycle(tmp_path):
    parents = [None, "4000", "4900", "4000", None, "1800", None]
    assert chart_error(tmp_path, with_column("Gruppe", parents)) == (
        "<dir>/chart.csv: row 6, column 'Gruppe': the parent links form a cycle: 1800 -> 1800"
    )


@pytest.mark.parametrize("key", ["code", "name", "description", "parent"])
def test_a_missing_configured_column_names_file_and_column(tmp_path, key):
    missing = asdict(COLUMNS)[key]
    columns = {name: values for name, values in CHART.items() if name != missing}
    message = chart_error(tmp_path, columns, ".parquet")
    assert message.startswith(
        f"<dir>/chart.parquet: no column '{missing}' (data.chart_columns.{key}); "
        "the chart's columns: ["
    )


def test_an_empty_chart_is_refused(tmp_path):
    columns = {name: [] for name in CHART}
    assert chart_error(tmp_path, columns) == "<dir>/chart.csv: the chart of accounts lists no class"


def test_a_text_file_and_a_list_name_the_line_and_item(tmp_path):
    text = tmp_path / "classes.txt"
    text.write_text("4930\n\n4210\n4930\n")
    with pytest.raises(DataError, match=re.escape(f"{text}: line 4: code '4930' repeats line 1")):
        read_chart(str(text), ChartColumns.of(), "utf-8")
    with pytest.raises(DataError, match=r"^data\.classes: item 2: empty code$"):
        read_chart(["4930", " "], ChartColumns.of(), "utf-8")


def test_an_unreadable_chart_names_the_file(tmp_path):
    path = tmp_path / "chart.parquet"
    path.write_text("code\n4930\n")
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}: cannot read the chart"):
        read_chart(str(path), ChartColumns.of(), "utf-8")


def test_a_chart_saved_by_a_spreadsheet_in_its_code_page_reads_with_data_encoding(tmp_path):
    """A German chart export: semicolons, windows-1252. It reads with `data.encoding`; without
    it, the run stops naming the file and the first line that is not UTF-8."""
    path = tmp_path / "kontenrahmen.csv"
    lines = ["Konto;Bezeichnung", "4930;Bürobedarf", "4650;Bewirtungskosten", "1800;Bank (€)"]
    path.write_bytes("\r\n".join(lines).encode("windows-1252"))
    columns = ChartColumns.of(code="Konto", name="Bezeichnung")

    chart = read_chart(str(path), columns, "windows-1252")

    assert chart.codes == ("4930", "4650", "1800")
    assert chart.names == ("Bürobedarf", "Bewirtungskosten", "Bank (€)")
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}: line 2 is not UTF-8 text"):
        read_chart(str(path), columns, "utf-8")


def test_an_encoding_python_does_not_know_or_that_is_not_read_line_by_line_stops_the_config(
    tmp_path,
):
    with pytest.raises(DataError, match=r"^config `data.encoding`: 'ansi' is not an encoding"):
        ledger_spec(tmp_path / "ledger.csv", encoding="ansi")
    with pytest.raises(DataError, match=r"'utf-16' does not write ASCII as ASCII does"):
        ledger_spec(tmp_path / "ledger.csv", encoding="utf-16")
    for accepted in ("cp1252", "latin-1", "shift_jis", "UTF8", "utf-8-sig"):
        assert ledger_spec(tmp_path / "ledger.csv", encoding=accepted).encoding == accepted
