"""Malformed CSV records: each goes to clean's rejects with its line and problem, and the rest of
the file is read; files written as plain text, since no CSV writer writes them."""

import csv

import polars as pl
import pytest
from sample_ledger import ledger_row, ledger_spec

from account_tax.data.clean import REASON, CleanSettings, clean
from account_tax.data.ingest import RECORD_PROBLEM, ingest

HEADER = ",".join(ledger_row(1))


def line(n: int, **overrides) -> str:
    return ",".join(ledger_row(n, **overrides).values())


def write_lines(tmp_path, lines: list[str], name: str = "ledger.csv"):
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *lines]) + "\n", encoding="utf-8")
    return path


def ingest_and_clean(tmp_path, path, **data_overrides):
    spec = ledger_spec(path, **data_overrides)
    records = tmp_path / "records.parquet"
    ingest(spec, records)
    out, rejects = tmp_path / "clean.parquet", tmp_path / "rejects.parquet"
    counts = clean(records, spec, out, rejects, CleanSettings.of())
    assert counts.rows_in == counts.rows_out + counts.rejected + counts.duplicates
    return counts, pl.read_parquet(records), pl.read_parquet(out), pl.read_parquet(rejects)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (line(6) + ",surplus", "line 7: 7 fields, expected 6"),
        (line(6).rpartition(",")[0], "line 7: 5 fields, expected 6"),
        ("E00006", "line 7: 1 field, expected 6"),
        (line(6, memo='"Office chairs'), "line 7: unclosed quote"),
        (line(6, memo='"Office" chairs'), "line 7: text after a closing quote"),
    ],
)
def test_a_malformed_record_is_rejected_with_its_line_and_the_rest_is_read(tmp_path, bad, reason):
    path = write_lines(tmp_path, [*(line(n) for n in range(1, 6)), bad, line(7), line(8)])
    counts, _, frame, rejects = ingest_and_clean(tmp_path, path)
    assert (counts.rows_in, counts.rows_out, counts.rejected) == (8, 7, 1)
    assert rejects.get_column("source_row").to_list() == [6]
    assert rejects.get_column(REASON).to_list() == [reason]
    assert rejects.get_column("source_file").to_list() == [str(path)]
    assert frame.get_column("source_row").to_list() == [1, 2, 3, 4, 5, 7, 8]
    assert frame.get_column("entry_id").to_list()[-2:] == ["E00007", "E00008"]


def test_a_malformed_record_keeps_the_values_its_fields_give(tmp_path):
    short = line(2).rpartition(",")[0]  # no account
    path = write_lines(tmp_path, [line(1), short, line(3) + ",surplus"])
    _, _, _, rejects = ingest_and_clean(tmp_path, path)
    first, second = rejects.rows(named=True)
    assert (first["entry_id"], first["amount"], first["account"]) == ("E00002", "1234.50", None)
    assert (second["entry_id"], second["account"]) == ("E00003", "4930")
    assert second[REASON] == "line 4: 7 fields, expected 6"


def test_an_unclosed_quote_costs_its_line_even_in_a_long_file(tmp_path):
    # The quote would swallow over 131072 characters, the csv module's limit for a field.
    rows = [line(1), line(2, memo='"Office chairs'), *(line(n) for n in range(3, 3003))]
    path = write_lines(tmp_path, rows)
    counts, _, frame, rejects = ingest_and_clean(tmp_path, path)
    assert (counts.rows_in, counts.rows_out, counts.rejected) == (3002, 3001, 1)
    assert rejects.get_column(REASON).item() == (
        "line 3: unclosed quote (a quoted field runs on for over 131072 characters)"
    )
    assert frame.get_column("entry_id").to_list()[-1] == "E03002"


def test_record_numbers_and_physical_lines_differ_by_multiline_fields(tmp_path):
    # Record 2 spans lines 3 and 4; record 3 is an empty line (all values missing, as polars
    # reads it); record 4 on line 6 has a field too many.
    multiline = line(2, memo='"Office chairs\nsecond line"')
    path = write_lines(tmp_path, [line(1), multiline, "", line(4) + ",surplus", line(5)])
    counts, records, frame, rejects = ingest_and_clean(tmp_path, path)
    assert counts.rows_in == 5
    assert records.get_column("source_row").to_list() == [1, 2, 3, 4, 5]
    assert frame.get_column("source_row").to_list() == [1, 2, 5]
    assert frame.get_column("memo").to_list()[1] == "office chairs second line"
    assert dict(zip(*rejects.select("source_row", REASON), strict=True)) == {
        3: "missing id in column 'entry_id'; no value in any of the columns 'memo', 'vendor',"
        " 'amount', 'date'; missing label in column 'account'",
        4: "line 6: 7 fields, expected 6",
    }


def test_well_formed_files_stay_on_the_fast_path(tmp_path):
    # Quoted separators, and an empty last value, which a short record would also give.
    rows = [ledger_row(1, memo="Chairs, desks"), ledger_row(2, account=""), ledger_row(3)]
    path = tmp_path / "ledger.csv"
    pl.DataFrame(rows).write_csv(path)
    _, records, frame, rejects = ingest_and_clean(tmp_path, path)
    assert RECORD_PROBLEM not in records.columns
    assert frame.get_column("memo").to_list()[0] == "chairs, desks"
    assert rejects.get_column(REASON).to_list() == ["missing label in column 'account'"]


def test_a_malformed_file_with_another_separator(tmp_path):
    path = tmp_path / "ledger.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=";")
        writer.writerow(ledger_row(1))
        writer.writerow(ledger_row(1, memo="Chairs; desks").values())
        writer.writerow([*ledger_row(2).values(), "surplus"])
    counts, _, frame, rejects = ingest_and_clean(tmp_path, path, csv_separator=";")
    assert (counts.rows_out, counts.rejected) == (1, 1)
    assert frame.get_column("memo").to_list() == ["chairs; desks"]
    assert rejects.get_column(REASON).to_list() == ["line 3: 7 fields, expected 6"]


def test_a_short_record_is_found_when_the_last_column_is_not_read(tmp_path):
    path = tmp_path / "ledger.csv"
    rows = [line(1) + ",paid", line(2), line(3) + ",open"]
    path.write_text("\n".join([HEADER + ",note", *rows]) + "\n", encoding="utf-8")
    _, records, frame, rejects = ingest_and_clean(tmp_path, path)
    assert "note" not in records.columns
    assert rejects.get_column(REASON).to_list() == ["line 3: 6 fields, expected 7"]
    assert frame.get_column("source_row").to_list() == [1, 3]


def test_a_carriage_return_outside_quotes_is_malformed_where_the_csv_module_reads(tmp_path):
    # Polars keeps such a carriage return as text; the csv module, which reads a file that has
    # other malformed records, takes it for a line break inside the record.
    rows = [line(1, memo="Office\rchairs"), line(2) + ",surplus", line(3)]
    path = write_lines(tmp_path, rows)
    _, _, frame, rejects = ingest_and_clean(tmp_path, path)
    assert rejects.get_column(REASON).to_list() == [
        "line 2: a carriage return inside an unquoted field",
        "line 3: 7 fields, expected 6",
    ]
    assert frame.get_column("source_row").to_list() == [3]
