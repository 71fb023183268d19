"""Corrections applied to the clean ledger: labels replaced, every row accounted for, the latest
correction of a record counts, and predict's review file reads as a corrections file."""

import dataclasses
import datetime
import json
import re

import polars as pl
import pytest
from reviewed_ledger import OPTIONS, apply_in, clean_ledger, review_file
from sample_ledger import ledger_config, ledger_row

from account_tax.data.clean import REASON, clean
from account_tax.data.corrections import LEDGER_LABEL, apply_corrections, correction_summary
from account_tax.data.ingest import ingest
from account_tax.data.spec import LABEL_SOURCE, DataSpec
from account_tax.errors import DataError
from account_tax.evaluation.predict import Predictor, check_record_columns
from account_tax.evaluation.prediction_parts import write_review_csv
from account_tax.settings import complete

CLASSES = ["4930", "4210", "4400", "1800", "0000"]


@pytest.fixture
def ledger(tmp_path):
    return clean_ledger(tmp_path, CLASSES)


def corrections_file(path, rows, separator=","):
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(
        path, separator=separator
    )
    return path


def test_corrections_replace_labels_and_every_row_is_accounted_for(ledger, tmp_path):
    spec, records = ledger
    first = corrections_file(
        tmp_path / "monday.csv",
        [
            {"entry_id": "E00001", "account": "4210", "reviewed_at": "2025-01-06"},
            {"entry_id": "E00002", "account": "4930", "reviewed_at": "2025-01-06"},  # confirmed
            {"entry_id": "E00003", "account": "9999", "reviewed_at": ""},
            {"entry_id": "E09999", "account": "4400", "reviewed_at": ""},
            {"entry_id": "", "account": "4400", "reviewed_at": ""},
            {"entry_id": "E00004", "account": "4400", "reviewed_at": "next week"},
            {"entry_id": "E00005", "account": "4400", "reviewed_at": "2025-01-06T09:00:00"},
        ],
    )
    # Parquet, with predict's `id` column and no times: file order decides.
    second = tmp_path / "tuesday.parquet"
    # E00006 as typed on a full-width keyboard: read as clean reads the ledger's ids (NFKC).
    full_width = "\uff25\uff10\uff10\uff10\uff10\uff16"
    pl.DataFrame(
        {"id": ["E00005", "E00006", full_width], "account": ["4210", "1800", " 0000 "]}
    ).write_parquet(second)
    output, rejects = tmp_path / "corrected.parquet", tmp_path / "rejects.parquet"
    track_record = tmp_path / "track_record.parquet"

    counts = apply_corrections(
        records, [first, second], spec, OPTIONS, output, rejects, track_record, ledger_rows=65
    )

    corrected = pl.read_parquet(output)
    assert corrected.height == pl.read_parquet(records).height
    labels = dict(corrected.select("entry_id", "account").iter_rows())
    assert labels["E00001"] == "4210" and labels["E00002"] == "4930"
    # E00005: the timed correction is later than one without a time; E00006: the later row.
    assert labels["E00005"] == "4400" and labels["E00006"] == "0000"
    sources = dict(corrected.select("entry_id", LABEL_SOURCE).iter_rows())
    assert [k for k, v in sources.items() if v == "correction"] == [
        "E00001",
        "E00002",
        "E00005",
        "E00006",
    ]
    assert set(sources.values()) == {"ledger", "correction"}
    before = dict(corrected.select("entry_id", LEDGER_LABEL).iter_rows())
    assert before["E00001"] == "4930" and before["E00007"] is None

    reasons = dict(
        pl.read_parquet(rejects)
        .select(pl.format("{}:{}", "source_file", "source_row"), REASON)
        .iter_rows()
    )
    assert reasons == {
        f"{first}:3": "unknown class '9999' in column 'account' (not in data.classes)",
        f"{first}:4": (
            "no record with id 'E09999' in the ledger, and the file lacks a record's columns"
        ),
        f"{first}:5": "missing id in column 'entry_id' or 'id'",
        f"{first}:6": "unparseable time in column 'reviewed_at': 'next week' (an ISO date or time)",
        f"{second}:1": f"superseded by the later correction in row 7 of {first}",
        f"{second}:2": f"superseded by the later correction in row 3 of {second}",
    }
    assert json.loads(json.dumps(counts.__dict__)) == {
        "rows_in": 10,
        "applied": 4,
        "changed": 3,
        "added": 0,
        "superseded": 2,
        "rejected": 6,
        "track_record": 0,
    }
    # Neither file says what was suggested: nothing to learn the threshold from.
    assert pl.read_parquet(track_record).is_empty()
    # The report's table: the superseded on their own line, not once per winner among reasons.
    assert correction_summary(counts, rejects, track_record).splitlines() == [
        "what\trows",
        "rows_in\t10",
        "applied\t4",
        "changed\t3",
        "added\t0",
        "superseded\t2",
        "rejected\t6",
        "track_record\t0",
        "track_record: suggestion kept\t0",
        "rejected: missing id in column 'entry_id' or 'id'\t1",
        "rejected: no record with id 'E09999' in the ledger, and the file lacks a record's "
        "columns\t1",
        "rejected: unknown class '9999' in column 'account' (not in data.classes)\t1",
        "rejected: unparseable time in column 'reviewed_at': 'next week' (an ISO date or time)\t1",
    ]


def test_a_file_without_the_id_or_account_column_is_one_clear_error(ledger, tmp_path):
    spec, records = ledger
    bad = corrections_file(tmp_path / "bad.csv", [{"record": "E00001", "account": "4210"}])
    with pytest.raises(DataError, match=r"bad.csv: a corrections file needs the record's id"):
        apply_corrections(
            records,
            [bad],
            spec,
            OPTIONS,
            tmp_path / "o.parquet",
            tmp_path / "r.parquet",
            tmp_path / "t.parquet",
            ledger_rows=65,
        )


def test_corrections_need_an_id_column(tmp_path):
    config = ledger_config(tmp_path / "ledger.csv")
    config["data"]["columns"] = {**config["data"]["columns"], "id": None}
    config["data"]["corrections"] = ["reviewed.csv"]
    with pytest.raises(DataError, match=r"`data.corrections` needs `data.columns.id`"):
        DataSpec.from_config(complete(config))


def test_predicts_review_file_is_a_corrections_file_once_its_account_is_filled_in(ledger, tmp_path):
    """Its `id` and label column are all a correction needs."""
    spec, records = ledger
    review = review_file(["E00001", "E00002"], ["4930", "4210"], [0.51, 0.48], [False, False])
    reviewed = review.with_columns(pl.Series("account", ["4210", "4930"]))
    reviewed.write_parquet(tmp_path / "new.review.parquet")

    counts = apply_in(tmp_path, records, [tmp_path / "new.review.parquet"], spec)

    assert (counts.applied, counts.rejected) == (2, 0)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    reviewed_rows = corrected.filter(pl.col("entry_id").is_in(["E00001", "E00002"])).sort(
        "entry_id"
    )
    # The ledger booked both to 4930: one moved, one confirmed.
    assert reviewed_rows["account"].to_list() == ["4210", "4930"]
    assert reviewed_rows["label_source"].to_list() == ["correction", "correction"]
    assert corrected.filter(pl.col("label_source") == "correction").height == 2


def test_a_reviewed_record_the_ledger_lacks_joins_it_cleaned(ledger, tmp_path):
    """Predict's review file carries each record's columns as read: with the account filled in,
    a new record joins the ledger through clean, and one clean refuses is a reject."""
    spec, records = ledger
    new = [
        ledger_row(500, memo="Printer TONER", amount="89.90"),
        ledger_row(501, memo="desk lamp", amount="12,x"),
    ]
    review = pl.DataFrame(new, schema=dict.fromkeys(new[0], pl.String)).with_columns(
        pl.Series("source_row", [1, 2]),
        pl.col("entry_id").alias("id"),
        pl.lit("memo: ...").alias("text"),
        pl.Series("account", ["4930", "4930"]),
        pl.lit("review").alias("decision"),
    )
    review.write_parquet(tmp_path / "march.review.parquet")

    counts = apply_in(tmp_path, records, [tmp_path / "march.review.parquet"], spec)

    assert (counts.rows_in, counts.applied, counts.added, counts.rejected) == (2, 0, 1, 1)
    ledger_rows = pl.read_parquet(records)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    assert corrected.height == ledger_rows.height + 1
    joined = corrected.filter(pl.col("entry_id") == "E00500").row(0, named=True)
    assert joined["memo"] == "printer toner" and joined["amount"] == 89.9
    assert joined["account"] == "4930" and joined["label_source"] == "correction"
    # Numbered after the ledger file's 65 rows, whose last ones clean refused or dropped.
    assert ledger_rows["source_row"].max() < 65
    assert joined["source_row"] == 66
    (refused,) = pl.read_parquet(tmp_path / "rejects.parquet").iter_rows(named=True)
    assert (refused["source_row"], refused["entry_id"]) == (2, "E00501")
    assert refused["reason"] == "unparseable number (format 1234.5) in column 'amount': '12,x'"


def test_a_reviewed_records_amount_reads_in_the_ledgers_number_format(ledger, tmp_path):
    """A German ledger's amounts come back from the review as predict wrote them (1.234,56) or
    as a German spreadsheet saves them (1234,56): both read, in `data.number_format`, and a
    number that format does not read is a reject that names it."""
    spec, records = ledger
    spec = dataclasses.replace(spec, number_format="1.234,5")
    rows = [
        ledger_row(500, amount="1.234,56") | {"reviewed_at": ""},
        ledger_row(501, amount="1234,56") | {"reviewed_at": ""},
        ledger_row(502, amount="1.5") | {"reviewed_at": ""},
    ]
    corrections_file(tmp_path / "reviewed.csv", rows, ";")

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.csv"], spec)

    assert (counts.added, counts.rejected) == (2, 1)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    joined = corrected.filter(pl.col("entry_id").is_in(["E00500", "E00501"])).sort("entry_id")
    assert joined["amount"].to_list() == [1234.56, 1234.56]
    assert pl.read_parquet(tmp_path / "rejects.parquet")[REASON].to_list() == [
        "unparseable number (format 1.234,5) in column 'amount': '1.5'"
    ]


def test_a_typed_parquet_records_date_and_amount_come_back_from_review_as_read(ledger, tmp_path):
    """Records predicted from a Parquet file with a datetime and a float: the review row writes
    them as data.date_format and data.number_format read them, so the reviewed record joins the
    ledger, as it was, where the file's types written as text were rejects."""
    spec, records = ledger
    spec = dataclasses.replace(spec, number_format="1.234,5", date_format="%d.%m.%Y")
    config = complete(ledger_config(tmp_path / "ledger.csv", classes=CLASSES))
    predictor = Predictor(spec, config, None, None, k=1, evidence_k=1, chunk_rows=10)
    typed = pl.DataFrame(
        {
            "source_row": [1],
            **{key: [value] for key, value in ledger_row(500).items()},
        }
    ).with_columns(
        pl.datetime(2024, 3, 15, 9, 30).alias("date"),
        pl.lit(1234.56).alias("amount"),
        pl.lit(None, dtype=pl.String).alias("account"),
    )

    rows, rejected = predictor.serialized(typed, "new.parquet")
    assert rejected.height == 0
    assert rows.select("date", "amount").row(0) == ("15.03.2024", "1234,56")
    rows.with_columns(pl.lit("4210").alias("account")).write_parquet(tmp_path / "r.parquet")
    counts = apply_in(tmp_path, records, [tmp_path / "r.parquet"], spec)

    assert (counts.added, counts.rejected) == (1, 0)
    joined = pl.read_parquet(tmp_path / "corrected.parquet").filter(pl.col("entry_id") == "E00500")
    assert joined.select("date", "amount", "account").row(0) == (
        datetime.date(2024, 3, 15),
        1234.56,
        "4210",
    )


def test_a_data_column_named_like_one_of_predicts_is_refused(tmp_path):
    """Its value would be predict's in the review file, and a reviewed row would bring back
    another record: `text` (the serialized text) here. An id column named `id` is predict's
    own `id`, and fine."""
    columns = {"id": "id", "label": "account", "text": ["memo", "text"]}
    config = complete(ledger_config(tmp_path / "ledger.csv", columns=columns))
    with pytest.raises(DataError, match=r"`data.columns`: 'text' named like a column that predict"):
        check_record_columns(DataSpec.from_config(config))
    config["data"]["columns"]["text"] = ["memo"]
    check_record_columns(DataSpec.from_config(config))
    config["data"]["columns"]["label"] = "confidence"
    with pytest.raises(DataError, match=r"'confidence' named like a column that predict"):
        check_record_columns(DataSpec.from_config(config))


def test_a_review_file_saved_in_the_spreadsheets_code_page_reads_with_data_encoding(
    ledger, tmp_path
):
    """Excel saves plain CSV in the system's code page (windows-1252 in Germany): the reviewed
    file reads with `data.encoding`, a new record's umlauts and euro sign as written. Without it,
    the file stops the run, naming the line that is not UTF-8 and what to do."""
    spec, records = ledger
    rows = [
        ledger_row(1, account="4210") | {"reviewed_at": ""},
        ledger_row(500, vendor="Müller GmbH", memo="Gebühr 12 €") | {"reviewed_at": ""},
    ]
    header = ";".join(rows[0])
    text = "\r\n".join([header, *(";".join(row.values()) for row in rows)])
    path = tmp_path / "reviewed.csv"
    path.write_bytes(text.encode("windows-1252"))

    counts = apply_in(tmp_path, records, [path], dataclasses.replace(spec, encoding="cp1252"))

    assert (counts.applied, counts.added, counts.rejected) == (1, 1, 0)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    joined = corrected.filter(pl.col("entry_id") == "E00500").row(0, named=True)
    # Cleaned as the ledger is (lower case, digits kept: the fixture masks none).
    assert (joined["vendor"], joined["memo"]) == ("müller gmbh", "gebühr 12 €")
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}: line 3 is not UTF-8 text"):
        apply_in(tmp_path, records, [path], spec)


def test_leading_zeros_a_spreadsheet_dropped_are_put_back_where_one_code_fits(tmp_path):
    """A spreadsheet reads 00101 and 0420 as numbers and saves 101 and 420, and turns an account
    a reviewer types as 27 for 0027 the same way: an id or account that is not known, but is
    exactly one known code without its leading zeros, is that code. A value known as it is stays,
    and one that two codes fit (42: 0042 and 00042) is not guessed."""
    ids = ["00101", "00102", "00103", "500"]
    rows = [ledger_row(n, entry_id=i, account="4930") for n, i in enumerate(ids)]
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(tmp_path / "l.csv")
    classes = ["0420", "4930", "0027", "0500", "500", "0042", "00042"]
    spec = DataSpec.from_config(complete(ledger_config(tmp_path / "l.csv", classes=classes)))
    ingest(spec, tmp_path / "ingested.parquet")
    records = tmp_path / "clean.parquet"
    clean(tmp_path / "ingested.parquet", spec, records, tmp_path / "r.parquet", OPTIONS)
    review = review_file(
        ["101", "102", "500", "103"], ["420", "4930", "0500", "4930"], [0.5] * 4, [False] * 4
    )
    reviewed = review.with_columns(pl.Series("account", ["420", "27", "500", "42"]))
    reviewed.write_csv(tmp_path / "reviewed.csv")

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.csv"], spec)

    assert (counts.applied, counts.rejected) == (3, 1)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    assert dict(corrected.select("entry_id", "account").iter_rows()) == {
        "00101": "0420",
        "00102": "0027",
        "00103": "4930",
        "500": "500",
    }
    (refused,) = pl.read_parquet(tmp_path / "rejects.parquet")[REASON]
    assert refused == "unknown class '42' in column 'account' (not in data.classes)"
    track = pl.read_parquet(tmp_path / "track_record.parquet").sort("id")
    assert track["predicted_label"].to_list() == ["0420", "4930", "0500"]
    assert track["right"].to_list() == [True, False, False]


def test_a_parquet_review_file_keeps_its_ids_and_accounts_as_written(tmp_path):
    """Parquet keeps text as text: its 101 is another id than the ledger's 00101, and its
    account 420 another than 0420, not a spreadsheet's dropped zeros."""
    rows = [ledger_row(1, entry_id="00101", account="4930")]
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(tmp_path / "l.csv")
    spec = DataSpec.from_config(
        complete(ledger_config(tmp_path / "l.csv", classes=["0420", "4930"]))
    )
    ingest(spec, tmp_path / "ingested.parquet")
    records = tmp_path / "clean.parquet"
    clean(tmp_path / "ingested.parquet", spec, records, tmp_path / "r.parquet", OPTIONS)
    review_file(["101", "00101"], ["4930", "4930"], [0.5] * 2, [False] * 2).with_columns(
        pl.Series("account", ["4930", "420"])
    ).write_parquet(tmp_path / "reviewed.parquet")

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.parquet"], spec)

    assert (counts.applied, counts.rejected) == (0, 2)
    assert sorted(pl.read_parquet(tmp_path / "rejects.parquet")[REASON].to_list()) == [
        "no record with id '101' in the ledger, and the file lacks a record's columns",
        "unknown class '420' in column 'account' (not in data.classes)",
    ]
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    assert dict(corrected.select("entry_id", "account").iter_rows()) == {"00101": "4930"}


def test_reviewed_suggestions_make_the_track_record(ledger, tmp_path, caplog):
    """Each correction used that says what was suggested gives one row: the suggestion, its
    confidence, whether the record was novel, and whether people chose that account. A review
    file read back as CSV (all text) gives the same; a superseded correction gives none, and one
    without a suggestion (a plain corrections file) none either, nor one whose suggestion does
    not read (with a warning)."""
    spec, records = ledger
    january = review_file(
        ["E00001", "E00002", "E00003", "E00004", "E00005"],
        ["4930", "4210", "4400", "4930", "4930"],
        [0.97, 0.62, 0.91, 0.88, 0.9],
        [False, False, True, False, False],
    ).with_columns(pl.Series("account", ["4930", "4930", "4400", "1800", "4210"]))
    # Edited by hand: E00005's confidence no longer reads; it still corrects its record.
    csv = january.write_csv().replace(
        "E00005,memo: office supplies no 4,4210,4930,0.9",
        "E00005,memo: office supplies no 4,4210,4930,high",
    )
    assert ",4930,high" in csv
    (tmp_path / "january.review.csv").write_text(csv)
    # E00004 booked again later, by hand, without a suggestion: that correction counts.
    later = corrections_file(
        tmp_path / "later.csv",
        [{"entry_id": "E00004", "account": "4210", "reviewed_at": "2025-02-03"}],
    )

    counts = apply_in(tmp_path, records, [tmp_path / "january.review.csv", later], spec)

    assert (counts.applied, counts.superseded, counts.track_record) == (5, 1, 3)
    assert "1 corrections come from files that say what was suggested, but not" in caplog.text
    rows = pl.read_parquet(tmp_path / "track_record.parquet").sort("id")
    assert rows["id"].to_list() == ["E00001", "E00002", "E00003"]
    assert rows["predicted_label"].to_list() == ["4930", "4210", "4400"]
    assert rows["account"].to_list() == ["4930", "4930", "4400"]
    assert rows["right"].to_list() == [True, False, True]
    assert rows["novel"].to_list() == [False, False, True]
    summary = correction_summary(
        counts, tmp_path / "rejects.parquet", tmp_path / "track_record.parquet"
    )
    assert "track_record: suggestion kept\t2" in summary.splitlines()
    assert rows["confidence"].to_list() == pytest.approx([0.97, 0.62, 0.91], abs=1e-6)


@pytest.mark.parametrize("separator", [",", ";"])
def test_a_memo_a_spreadsheet_would_run_is_escaped_in_the_review_csv_and_read_back(
    ledger, tmp_path, separator
):
    """A new record's memo or vendor that starts like a formula (CSV injection) is written to the
    review file's CSV copy with a leading apostrophe, so that a spreadsheet shows it as text; a
    number such as -45.00 is not. Filled in and read back, the record joins the ledger as it was
    written."""
    spec, records = ledger
    new = ledger_row(500, memo='=HYPERLINK("http://example.invalid","invoice")', amount="-45.00")
    new["vendor"] = "@SUM(A1)"
    review = pl.DataFrame([new], schema=dict.fromkeys(new, pl.String)).with_columns(
        pl.col("entry_id").alias("id"),
        pl.lit("memo: ...").alias("text"),
        pl.lit(None, pl.String).alias("account"),
        pl.lit("review").alias("decision"),
    )
    review.write_parquet(tmp_path / "march.review.parquet")
    write_review_csv(tmp_path / "march.review.parquet", tmp_path / "march.review.csv", separator)
    sheet = pl.read_csv(tmp_path / "march.review.csv", infer_schema=False, separator=separator)
    assert sheet.row(0, named=True) | {"account": None} == {
        **review.row(0, named=True),
        "memo": """'=HYPERLINK("http://example.invalid","invoice")""",
        "vendor": "'@SUM(A1)",
    }
    sheet.with_columns(pl.lit("4930").alias("account")).write_csv(
        tmp_path / "reviewed.csv", separator=separator
    )

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.csv"], spec)

    assert (counts.added, counts.rejected) == (1, 0)
    joined = pl.read_parquet(tmp_path / "corrected.parquet").filter(pl.col("entry_id") == "E00500")
    assert joined.select("memo", "vendor", "amount", "account").row(0) == (
        '=hyperlink("http://example.invalid","invoice")',
        "@sum(a1)",
        -45.0,
        "4930",
    )


@pytest.mark.parametrize(
    ("separator", "yes", "no"), [(";", "WAHR", "FALSCH"), ("\t", "Vrai", "faux")]
)
def test_a_review_file_saved_by_a_spreadsheet_with_its_locales_separators_reads(
    ledger, tmp_path, separator, yes, no
):
    """A spreadsheet saves CSV with its locale's list separator, decimal comma and words for true
    and false (a semicolon, `0,97` and WAHR in German): the file reads as the comma-separated one
    does, its confidences and novelty included, though a column name holds a comma."""
    spec, records = ledger
    review = review_file(["E00001", "E00002"], ["4930", "4210"], [0.97, 0.5], [False, True])
    saved = review.with_columns(
        pl.Series("account", ["4930", "4930"]),
        pl.col("confidence").cast(pl.String).str.replace(".", ",", literal=True),
        pl.Series("novel", [no, yes]),
        pl.lit("checked").alias("note, by the reviewer"),
    )
    saved.write_csv(tmp_path / "reviewed.csv", separator=separator)
    assert "0,97" in (tmp_path / "reviewed.csv").read_text()

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.csv"], spec)

    assert (counts.applied, counts.rejected, counts.track_record) == (2, 0, 2)
    rows = pl.read_parquet(tmp_path / "track_record.parquet").sort("id")
    assert rows["confidence"].to_list() == pytest.approx([0.97, 0.5], abs=1e-6)
    assert rows["right"].to_list() == [True, False]
    assert rows["novel"].to_list() == [False, True]


@pytest.mark.parametrize(
    ("separator", "dates", "reviewed"),
    [
        (";", ["15.03.2024", "5.3.2024"], ["01.12.2026", "30.11.2026"]),  # German
        (",", ["3/15/2024", "3/5/2024"], ["12/1/2026", "11/30/2026"]),  # American English
        (",", ["15/03/2024", "05/03/2024"], ["01/12/2026", "30/11/2026"]),  # British English
        (",", ["2024/3/15", "2024/3/5"], ["2026/12/1", "2026/11/30"]),  # Japanese
    ],
)
def test_dates_a_spreadsheet_saved_in_its_locales_form_read_as_the_dates_they_were(
    ledger, tmp_path, separator, dates, reviewed
):
    """A spreadsheet saves the review file's ISO dates in its locale's short form. New records
    join the ledger on the dates they had, and the review times still order two corrections of
    one record; a column's slashed dates that only one order reads say which order it is."""
    spec, records = ledger
    rows = [
        ledger_row(500, date=dates[0], account="4930") | {"reviewed_at": ""},
        ledger_row(501, date=dates[1], account="4210") | {"reviewed_at": ""},
        # Later by its time, earlier in the file.
        ledger_row(1, account="4210") | {"reviewed_at": reviewed[0]},
        ledger_row(1, account="4400") | {"reviewed_at": reviewed[1]},
    ]
    corrections_file(tmp_path / "reviewed.csv", rows, separator)

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.csv"], spec)

    assert (counts.added, counts.applied, counts.superseded, counts.rejected) == (2, 1, 1, 1)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    joined = corrected.filter(pl.col("entry_id").is_in(["E00500", "E00501"])).sort("entry_id")
    assert joined["date"].cast(pl.String).to_list() == ["2024-03-15", "2024-03-05"]
    assert corrected.filter(pl.col("entry_id") == "E00001")["account"].to_list() == ["4210"]


@pytest.mark.parametrize(
    ("separator", "later", "earlier"),
    [
        (";", "30.11.2026 14:30", "30.11.2026 09:05"),  # German
        (",", "11/30/2026 2:30 PM", "11/30/2026 9:05 AM"),  # American English
        (",", "30/11/2026 14:30:00", "30/11/2026 09:05:00"),  # British English
        (",", "2026/11/30 14:30", "2026/11/30 9:05"),  # Japanese
    ],
)
def test_review_times_a_spreadsheet_saved_in_its_locales_form_order_the_corrections(
    ledger, tmp_path, separator, later, earlier
):
    """A review time with its clock time, as a spreadsheet saves it in its locale (the date in
    its short form, the hour without a leading zero, AM and PM), orders two corrections of one
    record made on one day: the afternoon's counts, though it comes first in the file."""
    spec, records = ledger
    rows = [
        {"entry_id": "E00001", "account": "4210", "reviewed_at": later},
        {"entry_id": "E00001", "account": "4400", "reviewed_at": earlier},
    ]
    corrections_file(tmp_path / "reviewed.csv", rows, separator)

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.csv"], spec)

    assert (counts.applied, counts.superseded, counts.rejected) == (1, 1, 1)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    assert corrected.filter(pl.col("entry_id") == "E00001")["account"].to_list() == ["4210"]


@pytest.mark.parametrize(
    ("record_date", "review_time"),
    [
        # 3/5/2024 is the 3rd of May or the 5th of March: no date in its column settles the order.
        ("3/5/2024", "3/5/2026"),
        # A spreadsheet that shortens years: no four-digit form reads them as they were.
        ("15/03/24", "24/03/15"),
    ],
    ids=["slashed-either-order", "two-digit-year"],
)
def test_dates_that_cannot_be_read_as_written_are_rejects_not_guesses(
    ledger, tmp_path, record_date, review_time
):
    """A new record on such a date is a reject with the date in its reason, not a record on a
    guessed date (or in the year 24); a review time on one is a reject, not a correction at a
    guessed time (or in the year 15, which a later correction of the record would beat)."""
    spec, records = ledger
    rows = [
        ledger_row(500, date=record_date) | {"reviewed_at": ""},
        ledger_row(501, date="2024-03-15") | {"reviewed_at": ""},
        ledger_row(1, account="4210") | {"reviewed_at": review_time},
    ]
    corrections_file(tmp_path / "reviewed.csv", rows)

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.csv"], spec)

    assert (counts.added, counts.applied, counts.rejected) == (1, 0, 2)
    assert sorted(pl.read_parquet(tmp_path / "rejects.parquet")[REASON].to_list()) == [
        f"unparseable date (format %Y-%m-%d) in column 'date': '{record_date}'",
        f"unparseable time in column 'reviewed_at': '{review_time}' (an ISO date or time)",
    ]


def test_an_id_a_spreadsheet_rounded_is_a_reject_not_a_new_record(ledger, tmp_path):
    """A spreadsheet shows a 12-digit id as 1,23457E+11 and saves the review CSV so: neither row
    is a new record (the real ones would keep their accounts) nor supersedes the other."""
    spec, records = ledger
    rounded = "1,23457E+11"
    rows = [
        ledger_row(500, entry_id=rounded, account="4930") | {"reviewed_at": ""},
        ledger_row(501, entry_id=rounded, account="4210") | {"reviewed_at": ""},
        ledger_row(502, entry_id="2.5e3", account="4210") | {"reviewed_at": ""},
    ]
    corrections_file(tmp_path / "reviewed.csv", rows, ";")

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.csv"], spec)

    assert (counts.added, counts.superseded, counts.rejected) == (0, 0, 3)
    reasons = pl.read_parquet(tmp_path / "rejects.parquet")[REASON].to_list()
    assert reasons[0] == (
        f"id '{rounded}' is a number a spreadsheet rounded, not the ledger's id: save the review"
        " file as a workbook (predict.review_format: xlsx) or keep the id column as text"
    )
    assert all("a spreadsheet rounded" in reason for reason in reasons)


def test_an_id_with_an_e_in_a_parquet_file_is_a_new_record(ledger, tmp_path):
    """Parquet keeps an id as written: 2024E001 is an invoice's number, not a rounded one."""
    spec, records = ledger
    rows = [ledger_row(500, entry_id="2024E001", account="4930") | {"reviewed_at": None}]
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_parquet(
        tmp_path / "reviewed.parquet"
    )

    counts = apply_in(tmp_path, records, [tmp_path / "reviewed.parquet"], spec)

    assert (counts.added, counts.rejected) == (1, 0)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    assert corrected.filter(pl.col("entry_id") == "2024E001")["account"].item() == "4930"


def test_review_times_in_any_iso_form_are_compared_as_moments(ledger, tmp_path):
    """Times written in different ISO forms (a space or a T, an offset or none, a date alone) are
    each read as what they say, whatever form a column starts with: the latest moment counts,
    though 11:00 at +02:00 reads later on the clock than 09:30 at UTC."""
    spec, records = ledger
    first = corrections_file(
        tmp_path / "monday.csv",
        [
            {"entry_id": "E00001", "account": "4210", "reviewed_at": "2025-01-06 09:30"},
            {"entry_id": "E00001", "account": "4400", "reviewed_at": "2025-01-06"},
        ],
    )
    second = tmp_path / "tuesday.parquet"
    pl.DataFrame(
        {"id": ["E00001"], "account": ["1800"], "reviewed_at": ["2025-01-06T11:00:00+02:00"]}
    ).write_parquet(second)

    counts = apply_in(tmp_path, records, [first, second], spec)

    assert (counts.applied, counts.superseded, counts.rejected) == (1, 2, 2)
    corrected = pl.read_parquet(tmp_path / "corrected.parquet")
    assert corrected.filter(pl.col("entry_id") == "E00001")["account"].to_list() == ["4210"]
    assert (
        pl.read_parquet(tmp_path / "rejects.parquet")[REASON].to_list()
        == [f"superseded by the later correction in row 1 of {first}"] * 2
    )
