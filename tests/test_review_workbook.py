"""The rows to review as an Excel workbook (`predict.review_format: xlsx`): written so that a
spreadsheet keeps ids, accounts, dates and amounts as they were, filled in and saved as a
spreadsheet saves it (openpyxl, and a reviewer typing in LibreOffice Calc), and read back as a
corrections file."""

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
from datetime import datetime
from pathlib import Path

import openpyxl
import polars as pl
import pytest
from missing_tools import unavailable
from reviewed_ledger import apply_in, clean_ledger, review_file
from sample_ledger import ledger_row

from account_tax.data.clean import REASON
from account_tax.errors import DataError
from account_tax.evaluation import prediction_parts
from account_tax.evaluation.prediction_parts import write_review_workbook

CLASSES = ["4930", "4210", "4400", "1800", "0000", "0420"]


@pytest.fixture
def ledger(tmp_path):
    return clean_ledger(tmp_path, CLASSES)


def label_map(path, postable=None):
    mapping = {
        "label_column": "account",
        "labels": CLASSES,
        "counts": dict(zip(CLASSES, [30, 18, 10, 2, 0, 0], strict=True)),
        "names": ["Bürobedarf", "Miete", "Erlöse", "Bank", None, "Fahrzeuge"],
        "descriptions": [None] * len(CLASSES),
    }
    if postable is not None:
        mapping["postable"] = postable
    path.write_text(json.dumps(mapping))
    return path


def column_format(sheet, index):
    """The number format of the `index`th column (from 0), which a workbook may hold as one
    entry for several columns."""
    (dimension,) = [d for d in sheet.column_dimensions.values() if d.min <= index + 1 <= d.max]
    return dimension.number_format


def review_rows(records):
    """Predict's rows to review for the records (each a dict of the ledger's columns as read):
    their columns, the prediction's, the top k and the evidence as lists, the account empty."""
    frame = pl.DataFrame(records, schema=dict.fromkeys(records[0], pl.String))
    return frame.with_columns(
        pl.int_range(1, pl.len() + 1).alias("source_row"),
        pl.col("entry_id").alias("id"),
        pl.format("memo: {}", "memo").alias("text"),
        # No account yet: a column of nulls, which a Parquet file may type as nothing but null.
        pl.lit(None).alias("account"),
        pl.lit("4930").alias("predicted_label"),
        pl.lit(0.61234567, pl.Float32).alias("confidence"),
        pl.lit(["4930", "4210"]).alias("top_k_labels"),
        pl.lit([0.61234567, 0.2]).alias("top_k_probabilities"),
        pl.Series("novel", [i % 2 == 1 for i in range(len(records))]),
        pl.lit("review").alias("decision"),
    )


def test_the_review_workbook_keeps_what_a_spreadsheet_would_rewrite(tmp_path):
    """Every text is a text cell: an id with leading zeros, a German amount, an ISO date and a
    memo that starts like a formula come back as written, never as a number, a date or a formula.
    The account column is formatted as text, so what is typed there stays as typed, and it
    offers the accounts that take postings, by their names on a sheet of their own. Lists are a
    cell with an item a line, numbers are numbers, the header is frozen and filtered."""
    new = [
        ledger_row(500, entry_id="00500", amount="1.234,56", memo='=HYPERLINK("x","y")'),
        ledger_row(501, amount="-45,00", memo="bell\x07 in the memo"),
    ]
    review_rows(new).write_parquet(tmp_path / "new.review.parquet")
    mapping = label_map(tmp_path / "label_map.json", postable=[True] * 5 + [False])

    write_review_workbook(tmp_path / "new.review.parquet", tmp_path / "new.review.xlsx", mapping, 1)

    book = openpyxl.load_workbook(tmp_path / "new.review.xlsx")
    assert book.sheetnames == ["review", "accounts"]
    sheet = book["review"]
    header = [cell.value for cell in sheet[1]]
    assert header == pl.read_parquet_schema(tmp_path / "new.review.parquet").names()
    column = {name: index for index, name in enumerate(header)}
    first, second = sheet[2], sheet[3]
    for name, value in [
        ("entry_id", "00500"),
        ("id", "00500"),
        ("amount", "1.234,56"),
        ("date", "2024-03-15"),
        ("memo", '=HYPERLINK("x","y")'),
    ]:
        assert (first[column[name]].value, first[column[name]].data_type) == (value, "s")
    assert second[column["memo"]].value == "bell  in the memo"
    assert first[column["confidence"]].value == pytest.approx(0.61234567, rel=1e-6)
    assert first[column["confidence"]].data_type == "n"
    assert [row[column["novel"]].value for row in (first, second)] == [False, True]
    assert first[column["top_k_labels"]].value == "4930\n4210"
    assert first[column["top_k_probabilities"]].value == "0.6123\n0.2"
    assert first[column["top_k_labels"]].alignment.wrap_text
    account = column["account"]
    assert [row[account].value for row in (first, second)] == [None, None]
    # Columns of text are formatted as text, so what is typed there stays text; others not.
    assert [column_format(sheet, column[name]) for name in ("account", "id", "memo")] == ["@"] * 3
    assert column_format(sheet, column["confidence"]) == "General"
    assert sheet.freeze_panes == "A2"
    assert sheet.auto_filter.ref == f"A1:{openpyxl.utils.get_column_letter(len(header))}3"
    (choice,) = sheet.data_validations.dataValidation
    letter = openpyxl.utils.get_column_letter(account + 1)
    assert (choice.type, choice.formula1, str(choice.sqref)) == (
        "list",
        "accounts!$A$2:$A$6",
        f"{letter}2:{letter}3",
    )
    assert choice.errorStyle == "warning"
    listed = [tuple(cell.value for cell in row) for row in book["accounts"].iter_rows()]
    assert listed == [
        ("account", "name", "description"),
        ("4930", "Bürobedarf", None),
        ("4210", "Miete", None),
        ("4400", "Erlöse", None),
        ("1800", "Bank", None),
        ("0000", None, None),
    ]


def test_a_memo_longer_than_a_workbook_cell_is_an_error_not_a_cut_record(tmp_path):
    """A workbook cell holds 32,767 characters: a longer memo would come back cut, as the
    record's. The job says which row and column, and that a CSV review file holds it."""
    rows = [ledger_row(500), ledger_row(501, memo="x" * 40_000)]
    review_rows(rows).write_parquet(tmp_path / "new.review.parquet")
    mapping = label_map(tmp_path / "label_map.json")
    with pytest.raises(
        DataError,
        match=r"new.review.parquet: row 2, column 'memo' holds 40,000 characters, more than a"
        r" workbook cell takes \(32,767\): set predict.review_format: csv",
    ):
        write_review_workbook(
            tmp_path / "new.review.parquet", tmp_path / "new.review.xlsx", mapping, 1
        )
    assert not (tmp_path / "new.review.xlsx").exists()


def test_the_review_workbook_filled_in_and_saved_is_a_corrections_file(ledger, tmp_path, caplog):
    """A reviewer fills in the account column: one account picked from the list (text), one
    typed into a cell a spreadsheet had made a number cell (4210.0), a review time as a date
    cell, and a new record's amount typed again as a number. Read back, the new record joins the
    ledger with that amount (a number cell read with `data.number_format`'s decimal separator),
    the record the ledger has is relabelled, the later of its two corrections counts, neither
    the accounts sheet nor a row cleared adds a row, and the suggestions make the track record
    with their confidence and novelty."""
    spec, records = ledger
    spec = dataclasses.replace(spec, number_format="1.234,5")
    rows = [
        # Word's soft line break, which no workbook holds: a space there.
        ledger_row(500, entry_id="00500", amount="1.234,00", memo="Drucker\x0bToner"),
        ledger_row(1),
        ledger_row(1),
    ]
    review_rows(rows).write_parquet(tmp_path / "new.review.parquet")
    write_review_workbook(
        tmp_path / "new.review.parquet",
        tmp_path / "new.review.xlsx",
        label_map(tmp_path / "label_map.json"),
        2,
    )
    book = openpyxl.load_workbook(tmp_path / "new.review.xlsx")
    sheet = book["review"]
    header = [cell.value for cell in sheet[1]]
    account = header.index("account") + 1
    # The amount typed again where the cell was not text: a number cell.
    sheet.cell(2, header.index("amount") + 1, 1234.56)
    sheet.cell(2, account, "0420")
    sheet.cell(3, account, 4210.0)
    sheet.cell(4, account, "4400")
    reviewed_at = len(header) + 1
    sheet.cell(1, reviewed_at, "reviewed_at")
    sheet.cell(3, reviewed_at, datetime(2026, 11, 30, 14, 30))
    sheet.cell(4, reviewed_at, datetime(2026, 11, 30, 9, 5))
    # A row whose contents were cleared keeps its cells' formats, and holds no correction.
    sheet.cell(6, account).number_format = "@"
    # A sheet of the reviewer's own: its rows are no corrections, and the log says so.
    notes = book.create_sheet("notes")
    notes.append(["checked by", "on"])
    notes.append(["anna", "2026-11-30"])
    book.save(tmp_path / "reviewed.xlsx")

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.xlsx"], spec)

    assert f"{tmp_path / 'reviewed.xlsx'} [notes] read as no corrections" in caplog.text
    assert "[accounts] read as no corrections" not in caplog.text

    assert (counts.rows_in, counts.applied, counts.added, counts.superseded) == (3, 1, 1, 1)
    assert counts.rejected == 1
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    labels = dict(corrected.select("entry_id", "account").iter_rows())
    assert (labels["00500"], labels["E00001"]) == ("0420", "4210")
    joined = corrected.filter(pl.col("entry_id") == "00500").row(0, named=True)
    assert (joined["amount"], joined["memo"]) == (1234.56, "drucker toner")
    (superseded,) = pl.read_parquet(tmp_path / "rejects.parquet").iter_rows(named=True)
    assert superseded["source_file"] == f"{tmp_path / 'reviewed.xlsx'} [review]"
    assert superseded["source_row"] == 3
    assert superseded[REASON].startswith("superseded by the later correction in row 2 of")
    track = pl.read_parquet(tmp_path / "track_record.parquet").sort("id")
    assert track["id"].to_list() == ["00500", "E00001"]
    assert track["right"].to_list() == [False, False]
    assert track["confidence"].to_list() == pytest.approx([0.61234567] * 2, rel=1e-6)
    assert track["novel"].to_list() == [False, True]


def test_a_blank_row_between_corrections_keeps_the_rows_numbered_as_in_the_csv(ledger, tmp_path):
    """A row left blank between two corrections of one record: the rows after it keep their
    numbers, and it is the rejected row of nothing, as in the CSV file of the same sheet."""
    spec, records = ledger
    rows = [["entry_id", "account"], ["E00001", "4210"], [None, None], ["E00001", "4930"]]
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    # Blank rows after the last correction, as formatting leaves them, are no rows at all.
    book.active.cell(9, 1).number_format = "@"
    book.save(tmp_path / "reviewed.xlsx")
    pl.DataFrame(rows[1:], schema=rows[0], orient="row").write_csv(tmp_path / "reviewed.csv")

    rejected = {}
    for name in ("reviewed.xlsx", "reviewed.csv"):
        counts = apply_in(tmp_path, records, [tmp_path / name], spec)
        assert (counts.rows_in, counts.applied, counts.rejected) == (3, 1, 2)
        rejects = pl.read_parquet(tmp_path / "rejects.parquet").sort("source_row")
        source = rejects["source_file"][0]
        rejected[name] = [
            (row, reason.replace(source, "<file>"))
            for row, reason in rejects.select("source_row", REASON).rows()
        ]
    assert rejected["reviewed.xlsx"] == rejected["reviewed.csv"]
    assert [row for row, _ in rejected["reviewed.csv"]] == [1, 2]
    assert rejected["reviewed.csv"][0][1] == "superseded by the later correction in row 3 of <file>"


def test_a_review_queue_longer_than_a_sheet_goes_on_in_the_next(ledger, tmp_path, monkeypatch):
    """Rows beyond a worksheet's (1,048,575 under the header) go on in `review 2` and so on, each
    sheet with its header and the account list; read back, every row counts once, named by its
    sheet and row."""
    spec, records = ledger
    monkeypatch.setattr(prediction_parts, "EXCEL_ROWS", 4)
    ids = [f"E{n:05d}" for n in range(1, 8)]
    review_file(ids, ["4930"] * 7, [0.5] * 7, [False] * 7).write_parquet(tmp_path / "q.parquet")
    write_review_workbook(
        tmp_path / "q.parquet", tmp_path / "q.xlsx", label_map(tmp_path / "map.json"), 2
    )
    book = openpyxl.load_workbook(tmp_path / "q.xlsx")
    assert book.sheetnames == ["review", "review 2", "review 3", "accounts"]
    read = [
        [row[1] for row in book[name].iter_rows(min_row=2, values_only=True)]
        for name in book.sheetnames[:3]
    ]
    assert read == [ids[:3], ids[3:6], ids[6:]]
    for name in book.sheetnames[:3]:
        assert book[name].data_validations.dataValidation[0].formula1 == "accounts!$A$2:$A$7"
    for name in book.sheetnames[:3]:
        for row in book[name].iter_rows(min_row=2):
            row[3].value = "4210"
    book.save(tmp_path / "q-reviewed.xlsx")

    counts = apply_in(tmp_path, records, [tmp_path / "q-reviewed.xlsx"], spec)

    assert (counts.rows_in, counts.applied) == (7, 7)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    assert set(corrected.filter(pl.col("entry_id").is_in(ids))["account"]) == {"4210"}


def test_an_empty_review_queue_is_a_workbook_with_its_header(tmp_path):
    review_file([], [], [], []).write_parquet(tmp_path / "none.parquet")
    write_review_workbook(
        tmp_path / "none.parquet", tmp_path / "none.xlsx", label_map(tmp_path / "m.json"), 8
    )
    book = openpyxl.load_workbook(tmp_path / "none.xlsx")
    assert book.sheetnames == ["review", "accounts"]
    assert [cell.value for cell in book["review"][1]][:4] == ["source_row", "id", "text", "account"]
    assert book["review"].max_row == 1


def test_a_workbook_that_is_not_a_corrections_file_is_one_clear_error(ledger, tmp_path):
    """A file named .xlsx that is not a workbook, a workbook without the id and account columns,
    and a sheet with two columns of one name each stop the run with the file and what is wrong."""
    spec, records = ledger
    (tmp_path / "broken.xlsx").write_text("entry_id,account\nE00001,4210\n")
    with pytest.raises(DataError, match=r"broken\.xlsx: not a readable corrections file"):
        apply_in(tmp_path, records, [tmp_path / "broken.xlsx"], spec)

    book = openpyxl.Workbook()
    book.active.title = "Notes"
    book.active.append(["entry", "account"])
    book.active.append(["E00001", "4210"])
    book.save(tmp_path / "notes.xlsx")
    with pytest.raises(
        DataError, match=r"notes\.xlsx \[Notes\]: a corrections file needs .* missing: id$"
    ):
        apply_in(tmp_path, records, [tmp_path / "notes.xlsx"], spec)

    book = openpyxl.Workbook()
    book.active.append(["entry_id", "account", "account"])
    book.save(tmp_path / "twice.xlsx")
    with pytest.raises(
        DataError,
        match=r"twice\.xlsx \[Sheet\]: column name\(s\) 'account' appear more than once",
    ):
        apply_in(tmp_path, records, [tmp_path / "twice.xlsx"], spec)

    book = openpyxl.Workbook()
    book.save(tmp_path / "blank.xlsx")
    with pytest.raises(DataError, match=r"blank\.xlsx: no sheet of the workbook has a header row"):
        apply_in(tmp_path, records, [tmp_path / "blank.xlsx"], spec)


DEBIAN_PYTHON = Path("/usr/bin/python3")


def libreoffice_python() -> Path:
    """Debian's Python with LibreOffice's `uno` module, beside LibreOffice Calc."""
    usable = (
        shutil.which("soffice")
        and DEBIAN_PYTHON.is_file()
        and subprocess.run([DEBIAN_PYTHON, "-c", "import uno"], capture_output=True).returncode == 0
    )
    if not usable:
        unavailable(
            "LibreOffice Calc and its Python bridge are not installed",
            "make system-packages (as root)",
        )
    return DEBIAN_PYTHON


def review_in_libreoffice(python, workbook, reviewed, typed, tries=3):
    """`tests/libreoffice_reviewer.py`: `typed` typed into `workbook`, saved as `reviewed`, in a
    process group of its own, ended after each run with whatever LibreOffice left. Headless
    LibreOffice 7.4 now and then crashes in its own event loop as text is entered ("Fatal
    exception: Signal 6") or stops answering, when the machine is busy (a run in 20 beside a test
    run here, none in 20 quiet): such a run is run again, in a new profile, up to `tries`
    times. Any other failure fails at once."""
    for attempt in range(1, tries + 1):
        run = subprocess.Popen(
            [
                python,
                Path(__file__).parent / "libreoffice_reviewer.py",
                workbook,
                reviewed,
                typed,
                reviewed.parent / f"libreoffice-profile-{attempt}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, errors = run.communicate(timeout=180)
            lost = "Fatal exception: Signal" in errors
        except subprocess.TimeoutExpired:
            errors, lost = "LibreOffice gave no answer in 180 s", True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        if run.returncode == 0:
            return
        if not lost or attempt == tries:
            pytest.fail(f"LibreOffice reviewer failed:\n{errors[-4000:]}")


def test_a_reviewer_in_libreoffice_types_an_account_that_stays_as_typed(ledger, tmp_path):
    """The workbook in a real spreadsheet, LibreOffice Calc: a reviewer types 0420, 4210 and 1800
    into the account column, a review time into a column of their own, and 0420 once more into a
    column the workbook left unformatted, then saves it as .xlsx. The account column keeps 0420
    as text where the unformatted cell made it the number 420, and the saved workbook corrects:
    the new records join the ledger as written (an id of 20 digits, an id with leading zeros, a
    German amount, a memo that starts like a formula), the reviewed time orders nothing away, and
    every suggestion makes the track record."""
    python = libreoffice_python()
    spec, records = ledger
    spec = dataclasses.replace(spec, number_format="1.234,5")
    rows = [
        ledger_row(500, entry_id="00500", amount="1.234,56", memo='=HYPERLINK("x","y")'),
        ledger_row(1),
        ledger_row(501, entry_id="12345678901234567890", amount="89,90", vendor="Müller GmbH"),
    ]
    review_rows(rows).write_parquet(tmp_path / "new.review.parquet")
    write_review_workbook(
        tmp_path / "new.review.parquet",
        tmp_path / "new.review.xlsx",
        label_map(tmp_path / "label_map.json"),
        64,
    )
    typed = [
        ["review", 2, "account", "0420"],
        ["review", 3, "account", "4210"],
        ["review", 4, "account", "1800"],
        ["review", 2, "reviewed_at", "2026-11-30 14:30"],
        ["review", 2, "typed_where_not_formatted", "0420"],
    ]
    (tmp_path / "typed.json").write_text(json.dumps(typed))
    review_in_libreoffice(
        python, tmp_path / "new.review.xlsx", tmp_path / "reviewed.xlsx", tmp_path / "typed.json"
    )

    sheet = openpyxl.load_workbook(tmp_path / "reviewed.xlsx")["review"]
    header = [cell.value for cell in sheet[1]]
    typed_account = sheet.cell(2, header.index("account") + 1)
    assert (typed_account.value, typed_account.data_type) == ("0420", "s")
    assert sheet.cell(2, header.index("typed_where_not_formatted") + 1).value == 420
    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.xlsx"], spec)

    assert (counts.rows_in, counts.applied, counts.added, counts.rejected) == (3, 1, 2, 0)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    joined = corrected.filter(pl.col("label_source") == "correction").sort("entry_id")
    assert joined.select("entry_id", "account", "amount", "memo", "vendor").rows() == [
        ("00500", "0420", 1234.56, '=hyperlink("x","y")', "acme gmbh"),
        ("12345678901234567890", "1800", 89.9, "office chairs invoice 501", "müller gmbh"),
        ("E00001", "4210", 11.0, "office supplies no 1", "acme gmbh"),
    ]
    track = pl.read_parquet(tmp_path / "track_record.parquet")
    assert track.height == 3 and set(track["predicted_label"]) == {"4930"}
