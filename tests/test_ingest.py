import json
import re

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sample_ledger import ledger_row, ledger_spec

from account_tax.data.ingest import SOURCE_FILE_KEY, camel_to_words, ingest, read_edgar_gaap
from account_tax.errors import DataError
from account_tax.io import resolve_input
from account_tax.settings import SOURCE_ROW


def test_camel_case_becomes_words():
    names = pl.Series(["AccountsPayableCurrent", "EBITDAMargin", "IncomeTaxes2024Paid"])
    words = pl.select(camel_to_words(pl.lit(names))).to_series().to_list()
    assert words == ["Accounts Payable Current", "EBITDA Margin", "Income Taxes2024 Paid"]


def test_edgar_reader_takes_first_standard_tag_and_drops_section(tmp_path):
    mapping = {
        "_metadata": {"version": "3"},
        "AccountsPayableCurrent": {
            "standard_tags": ["AccountsPayable", "TradePayables"],
            "display_name": "Accounts Payable",
            "statement": "BalanceSheet",
            "section": "Current Liabilities",
            "company_count": 12,
            "occurrence_rate": 0.5,
            "first_year": 2019,
            "last_year": 2025,
        },
    }
    path = tmp_path / "gaap.json"
    path.write_text(json.dumps(mapping))
    frame = read_edgar_gaap(path)
    assert frame.height == 1
    row = frame.row(0, named=True)
    assert row["label"] == "AccountsPayable"
    assert row["concept_words"] == "Accounts Payable Current"
    assert row["statement"] == "Balance Sheet"
    assert "section" not in frame.columns


def test_bundled_default_dataset_is_found_and_read():
    path = resolve_input("pkg:edgar/xbrl/standardization/gaap_mappings.json")
    frame = read_edgar_gaap(path)
    assert 2800 < frame.height < 3100
    assert 200 < frame.get_column("label").n_unique() < 260


def test_csv_rows_keep_their_source_row_and_raw_text(tmp_path, write_csv):
    path = write_csv([ledger_row(1), ledger_row(2, amount="12,x")])
    out = tmp_path / "records.parquet"
    assert ingest(ledger_spec(path), out) == 2
    frame = pl.read_parquet(out)
    assert frame.get_column(SOURCE_ROW).to_list() == [1, 2]
    assert frame.get_column("amount").to_list() == ["1234.50", "12,x"]


def test_output_names_the_raw_file_it_was_read_from(tmp_path, write_csv):
    path = write_csv([ledger_row(1)])
    out = tmp_path / "records.parquet"
    ingest(ledger_spec(path), out)
    assert pl.read_parquet_metadata(out)[SOURCE_FILE_KEY] == str(path)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_missing_column_names_file_and_only_the_files_columns(tmp_path, suffix):
    row = ledger_row(1)
    del row["vendor"]
    path = tmp_path / f"ledger.{suffix}"
    frame = pl.DataFrame([row])
    if suffix == "csv":
        frame.write_csv(path)
    else:
        frame.write_parquet(path)
    message = (
        f"{path}: missing required column(s) 'vendor'; "
        "the file has ['account', 'amount', 'date', 'entry_id', 'memo']"
    )
    with pytest.raises(DataError, match=f"^{re.escape(message)}$"):
        ingest(ledger_spec(path), tmp_path / "out.parquet")


def test_csv_with_a_repeated_column_name_is_refused(tmp_path):
    path = tmp_path / "ledger.csv"
    header = ",".join(ledger_row(1))
    path.write_text(f"{header},amount\n{','.join(ledger_row(1).values())},99\n")
    out = tmp_path / "out.parquet"
    message = (
        f"{path}: column name(s) 'amount' appear more than once; "
        "every column needs a name of its own"
    )
    with pytest.raises(DataError, match=f"^{re.escape(message)}$"):
        ingest(ledger_spec(path), out)
    assert not out.exists()


def test_parquet_with_a_repeated_column_name_is_refused(tmp_path):
    row = ledger_row(1) | {"extra": "99"}
    names = [*ledger_row(1), "amount"]
    path = tmp_path / "ledger.parquet"
    pq.write_table(pa.table([pa.array([v]) for v in row.values()], names=names), path)
    message = (
        f"{path}: column name(s) 'amount' appear more than once; "
        "every column needs a name of its own"
    )
    with pytest.raises(DataError, match=f"^{re.escape(message)}$"):
        ingest(ledger_spec(path), tmp_path / "out.parquet")


def test_empty_file_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(DataError, match=r"empty\.csv: input file is empty"):
        ingest(ledger_spec(path), tmp_path / "out.parquet")


def test_header_only_file_is_a_clear_error(tmp_path):
    path = tmp_path / "header.csv"
    path.write_text(",".join(ledger_row(1)) + "\n")
    out = tmp_path / "out.parquet"
    with pytest.raises(DataError, match=r"header\.csv: input file has a header but no data rows"):
        ingest(ledger_spec(path), out)
    assert not out.exists()


def test_parquet_input_keeps_its_types(tmp_path):
    path = tmp_path / "ledger.parquet"
    pl.DataFrame([ledger_row(1)]).with_columns(pl.col("amount").cast(pl.Float64)).write_parquet(
        path
    )
    out = tmp_path / "out.parquet"
    ingest(ledger_spec(path), out)
    assert pl.read_parquet(out).schema["amount"] == pl.Float64


def test_package_path_that_does_not_exist_names_the_package():
    with pytest.raises(DataError, match="package 'no_such_package_xyz' is not installed"):
        resolve_input("pkg:no_such_package_xyz/data.json")


def windows_1252_ledger(path):
    """A ledger as Excel or accounting software saves plain CSV in Western Europe: in the system's
    code page, semicolons between its fields; one record has a field too many."""
    lines = [
        "entry_id;date;vendor;memo;amount;account",
        "E1;2024-03-15;Müller GmbH;Gebühr März;12.50;4930",
        "E2;2024-03-16;Café Crème;Bewirtung 19 € Trinkgeld;19.00;4650",
        "E3;2024-03-17;Bäckerei;Brötchen;3.10;4650;extra",
    ]
    path.write_bytes("\r\n".join(lines).encode("windows-1252") + b"\r\n")
    return path


def test_a_csv_in_the_configured_code_page_reads_as_its_text(tmp_path, caplog):
    """A ledger saved in windows-1252 reads with `data.encoding: windows-1252`, its accents and
    the euro sign as written, its rows numbered as in the file, a malformed one among them; the
    log and the output name the user's file."""
    path = windows_1252_ledger(tmp_path / "ledger.csv")
    spec = ledger_spec(path, csv_separator=";", encoding="windows-1252")
    out = tmp_path / "records.parquet"

    assert ingest(spec, out) == 3

    frame = pl.read_parquet(out)
    assert frame["vendor"].to_list() == ["Müller GmbH", "Café Crème", "Bäckerei"]
    assert frame["memo"].to_list()[:2] == ["Gebühr März", "Bewirtung 19 € Trinkgeld"]
    assert frame[SOURCE_ROW].to_list() == [1, 2, 3]
    assert frame["source_problem"].to_list() == [None, None, "line 4: 7 fields, expected 6"]
    assert pl.read_parquet_metadata(out)[SOURCE_FILE_KEY] == str(path)
    assert f"{path}: 1 malformed record(s)" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.csv", "records.parquet"]


def test_a_utf8_csv_reads_as_utf8_whatever_the_configured_code_page(tmp_path, write_csv):
    """A file saved as CSV UTF-8 by a team whose other files are windows-1252 is not misread as
    windows-1252 (Müller as MÃ¼ller)."""
    path = write_csv([ledger_row(1, vendor="Müller GmbH", memo="€ 12")])
    out = tmp_path / "records.parquet"
    ingest(ledger_spec(path, encoding="windows-1252"), out)
    assert pl.read_parquet(out).select("vendor", "memo").row(0) == ("Müller GmbH", "€ 12")


def test_a_file_that_mixes_utf8_and_code_page_lines_reads_each_as_written(tmp_path):
    """Two exports joined into one file: each line is read as what it is, none misread."""
    header = ",".join(ledger_row(1))
    utf8 = ",".join(ledger_row(1, vendor="Müller GmbH").values())
    code_page = ",".join(ledger_row(2, vendor="Bäckerei Groß").values())
    path = tmp_path / "ledger.csv"
    path.write_bytes(f"{header}\n{utf8}\n".encode() + f"{code_page}\n".encode("cp1252"))
    out = tmp_path / "records.parquet"
    ingest(ledger_spec(path, encoding="windows-1252"), out)
    assert pl.read_parquet(out)["vendor"].to_list() == ["Müller GmbH", "Bäckerei Groß"]


def test_with_utf8_configured_a_code_page_files_rows_are_kept_for_clean_to_reject(tmp_path):
    path = windows_1252_ledger(tmp_path / "ledger.csv")
    out = tmp_path / "records.parquet"
    ingest(ledger_spec(path, csv_separator=";"), out)
    assert pl.read_parquet(out)["vendor"].to_list() == [
        "M\ufffdller GmbH",
        "Caf\ufffd Cr\ufffdme",
        "B\ufffdckerei",
    ]
