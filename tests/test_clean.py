import polars as pl
import pytest
from sample_ledger import LEDGER_COLUMNS, ledger_row, ledger_spec

import account_tax.data.clean
from account_tax.data.clean import (
    REASON,
    ROW_HASH,
    CleanSettings,
    clean,
    later_duplicates,
    normalise_text,
)
from account_tax.data.ingest import ingest
from account_tax.errors import DataError


def run_clean(tmp_path, csv_path, require_label=True, **kwargs):
    """Ingest and clean a CSV; return (counts, clean frame, rejects frame)."""
    spec = kwargs.pop("spec", None) or ledger_spec(csv_path)
    records = tmp_path / "records.parquet"
    ingest(spec, records)
    out, rejects = tmp_path / "clean.parquet", tmp_path / "rejects.parquet"
    options = CleanSettings.of(**kwargs)
    counts = clean(records, spec, out, rejects, options, require_label=require_label)
    return counts, pl.read_parquet(out), pl.read_parquet(rejects)


def test_text_is_nfkc_normalised_whitespace_collapsed_and_cased():
    # Fullwidth letters and the "fi" ligature: NFKC turns both into plain ASCII. A no-break
    # space becomes a space under NFKC, then joins the space beside it; a lone tab becomes one.
    values = pl.Series(
        [
            "  \uff2f\uff46\uff46\uff49\uff43\uff45\t chairs\n",
            "\ufb01le",
            "   ",
            None,
            "M\u00fcller\u00a0 GmbH",
            "a\tb c",
        ]
    )
    lowered = pl.select(normalise_text(pl.lit(values), "lower")).to_series().to_list()
    assert lowered == ["office chairs", "file", None, None, "m\u00fcller gmbh", "a b c"]
    kept = pl.select(normalise_text(pl.lit(values), "preserve")).to_series().to_list()
    assert kept[0] == "Office chairs"


def test_types_are_enforced_per_role(tmp_path, write_csv):
    path = write_csv([ledger_row(1, amount=" -12.5 ", date="2024-02-29")])
    counts, frame, _ = run_clean(tmp_path, path)
    assert counts.rows_out == 1
    assert frame.schema["amount"] == pl.Float64
    assert frame.schema["date"] == pl.Date
    assert frame.get_column("amount").to_list() == [-12.5]
    assert str(frame.get_column("date")[0]) == "2024-02-29"


def test_labels_keep_their_case(tmp_path, write_csv):
    path = write_csv([ledger_row(1, account="AB-12 ")])
    _, frame, _ = run_clean(tmp_path, path)
    assert frame.get_column("account").to_list() == ["AB-12"]


def test_labels_are_kept_verbatim_and_match_data_classes_as_written(tmp_path):
    # Plain text, so that nothing but ingest decides how "0042" is read.
    header = ",".join(ledger_row(1))
    rows = [
        ledger_row(1, account="BE-58  BARON"),
        ledger_row(2, account=" 0042\t"),
        ledger_row(3, account="\uff2b-1"),
        ledger_row(4, account="BE-58 BARON"),
    ]
    path = tmp_path / "ledger.csv"
    path.write_text("\n".join([header, *(",".join(row.values()) for row in rows)]) + "\n")
    classes = tmp_path / "classes.txt"
    classes.write_text("BE-58  BARON\n0042 \n\n\uff2b-1\n")
    spec = ledger_spec(path, classes=str(classes))
    assert spec.classes == ("BE-58  BARON", "0042", "\uff2b-1")
    _, frame, rejects = run_clean(tmp_path, path, spec=spec)
    # Inner spaces, leading zeros and the fullwidth K stay; only the ends are trimmed.
    assert frame.get_column("account").to_list() == ["BE-58  BARON", "0042", "\uff2b-1"]
    assert rejects.get_column(REASON).to_list() == [
        "unknown class 'BE-58 BARON' in column 'account' (not in data.classes)"
    ]
    assert ledger_spec(path, classes=["  BE-58  BARON ", "0042"]).classes == (
        "BE-58  BARON",
        "0042",
    )


def test_exact_duplicates_are_dropped_and_counted(tmp_path, write_csv):
    rows = [
        ledger_row(1),
        ledger_row(2),
        ledger_row(1),
        ledger_row(1, memo="Office  CHAIRS invoice 1"),
    ]
    counts, frame, rejects = run_clean(tmp_path, write_csv(rows))
    # The last row differs only in case and spacing: after normalisation it is the same record.
    assert (counts.rows_in, counts.rows_out, counts.rejected, counts.duplicates) == (4, 2, 0, 2)
    assert frame.get_column("source_row").to_list() == [1, 2]
    assert rejects.height == 0


def test_columns_with_few_values_are_normalised_as_row_by_row(tmp_path, write_csv, monkeypatch):
    rows = [
        ledger_row(1, vendor="  \uff21cme  GmbH", memo="Office\u00a0 chairs"),
        ledger_row(2, vendor="acme gmbh", account=" 4930"),
        ledger_row(3, vendor="", memo="\ufb01le"),
    ]
    path = write_csv(rows)
    _, by_value, _ = run_clean(tmp_path / "by_value", path)
    # No column has few enough distinct values: every one is normalised row by row.
    monkeypatch.setattr(account_tax.data.clean, "FEW_DISTINCT", 0)
    _, by_row, _ = run_clean(tmp_path / "by_row", path)
    assert by_value.equals(by_row)
    assert by_value.get_column("vendor").to_list() == ["acme gmbh", "acme gmbh", None]


def test_hash_collisions_are_resolved_by_comparing_values():
    records = pl.LazyFrame(
        {
            "memo": ["rent", "fuel", "rent", "rent", "fuel", None, None],
            "amount": [1.0, 1.0, 1.0, 2.0, 1.0, None, None],
            # Every row has the same hash, as if all of them collided.
            ROW_HASH: pl.Series([7] * 7, dtype=pl.UInt64),
        }
    )
    # Rows 2, 4 and 6 repeat rows 0, 1 and 5; row 3 shares only its hash and memo with row 0.
    assert later_duplicates(records, ["memo", "amount"]).to_list() == [2, 4, 6]


def test_distinct_rows_with_colliding_hashes_are_kept(tmp_path, write_csv, monkeypatch):
    monkeypatch.setattr(
        account_tax.data.clean, "row_hash", lambda columns: pl.lit(0, dtype=pl.UInt64)
    )
    rows = [ledger_row(1), ledger_row(2), ledger_row(1), ledger_row(3), ledger_row(2)]
    counts, frame, _ = run_clean(tmp_path, write_csv(rows))
    assert (counts.rows_out, counts.duplicates) == (3, 2)
    assert frame.get_column("source_row").to_list() == [1, 2, 4]
    assert ROW_HASH not in frame.columns


def test_duplicates_kept_when_configured_unless_they_share_an_id(tmp_path, write_csv):
    path = write_csv([ledger_row(1), ledger_row(1)])
    without_ids = ledger_spec(path, columns=LEDGER_COLUMNS | {"id": None})
    counts, _, _ = run_clean(tmp_path, path, drop_duplicates=False, spec=without_ids)
    assert (counts.rows_out, counts.rejected, counts.duplicates) == (2, 0, 0)
    counts, _, rejects = run_clean(tmp_path, path, drop_duplicates=False)
    assert (counts.rows_out, counts.rejected, counts.duplicates) == (1, 1, 0)
    assert rejects.get_column(REASON).to_list() == [
        "duplicate id 'E00001' in column 'entry_id', first in row 1"
    ]


@pytest.mark.parametrize("drop_duplicates", [True, False])
def test_a_later_record_of_an_id_is_rejected_as_read_naming_the_first(
    tmp_path, write_csv, drop_duplicates
):
    # Rows 2 and 5 differ from row 1 and 4 repeats it; row 6's id becomes row 3's once cleaned.
    rows = [
        ledger_row(1),
        ledger_row(1, memo="Office chairs, credit note", amount="-1234.50"),
        ledger_row(3, memo=None),
        ledger_row(1),
        ledger_row(1, account="4210"),
        ledger_row(3, entry_id=" E00003\t"),
        ledger_row(7, amount="twelve"),
    ]
    counts, frame, rejects = run_clean(tmp_path, write_csv(rows), drop_duplicates=drop_duplicates)
    assert frame.get_column("source_row").to_list() == [1, 3]
    first_of_1 = "duplicate id 'E00001' in column 'entry_id', first in row 1"
    repeat = [] if drop_duplicates else [(4, first_of_1)]
    assert list(zip(rejects["source_row"], rejects[REASON], strict=True)) == [
        (2, first_of_1),
        *repeat,
        (5, first_of_1),
        (6, "duplicate id 'E00003' in column 'entry_id', first in row 3"),
        (7, "unparseable number (format 1234.5) in column 'amount': 'twelve'"),
    ]
    # As read, as every reject: the id with its blanks, the amount as written.
    assert rejects.filter(pl.col("source_row") == 6)["entry_id"].item() == " E00003\t"
    assert rejects.filter(pl.col("source_row") == 2)["amount"].item() == "-1234.50"
    assert set(rejects["source_file"]) == {str(tmp_path / "ledger.csv")}
    assert (counts.rows_in, counts.duplicates) == (7, int(drop_duplicates))


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"amount": "12,34x"}, "unparseable number (format 1234.5) in column 'amount': '12,34x'"),
        ({"amount": "inf"}, "unparseable number (format 1234.5) in column 'amount': 'inf'"),
        ({"amount": "+nan"}, "unparseable number (format 1234.5) in column 'amount': '+nan'"),
        (
            {"date": "24-03-15"},
            "date before the year 1000 (format %Y-%m-%d; a two-digit year?) in column 'date':"
            " '24-03-15'",
        ),
        (
            {"date": "2024-13-45"},
            "unparseable date (format %Y-%m-%d) in column 'date': '2024-13-45'",
        ),
        ({"account": ""}, "missing label in column 'account'"),
        ({"account": "NaN"}, "missing label in column 'account'"),
        ({"entry_id": ""}, "missing id in column 'entry_id'"),
        ({"entry_id": "  \t "}, "missing id in column 'entry_id'"),
        (
            {"memo": " ", "vendor": "", "amount": "", "date": ""},
            "no value in any of the columns 'memo', 'vendor', 'amount', 'date'",
        ),
    ],
)
def test_bad_values_go_to_rejects_with_row_and_column(tmp_path, write_csv, overrides, reason):
    path = write_csv([ledger_row(1), ledger_row(2, **overrides), ledger_row(3)])
    counts, frame, rejects = run_clean(tmp_path, path)
    assert (counts.rows_out, counts.rejected) == (2, 1)
    assert rejects.get_column("source_row").to_list() == [2]
    assert rejects.get_column(REASON).to_list() == [reason]
    # The user's file, where source_row counts: not ingest's records.parquet.
    assert rejects.get_column("source_file").item() == str(path)
    assert frame.get_column("source_row").to_list() == [1, 3]


def test_rejects_keep_the_raw_values(tmp_path, write_csv):
    path = write_csv([ledger_row(1, amount="12,34x", memo="Kept  AS written"), ledger_row(2)])
    _, _, rejects = run_clean(tmp_path, path)
    row = rejects.row(0, named=True)
    assert row["amount"] == "12,34x"
    assert row["memo"] == "Kept  AS written"


def test_several_problems_in_one_row_are_all_named(tmp_path, write_csv):
    path = write_csv([ledger_row(1, amount="x", date="never"), ledger_row(2)])
    _, _, rejects = run_clean(tmp_path, path)
    reason = rejects.get_column(REASON).item()
    assert "column 'amount'" in reason
    assert "column 'date'" in reason


def test_invalid_utf8_is_rejected_naming_the_column(tmp_path):
    path = tmp_path / "ledger.csv"
    header = ",".join(ledger_row(1))
    good = ",".join(ledger_row(1).values())
    bad = ",".join(ledger_row(2).values()).replace("Office", "Off\xffice")
    path.write_bytes(f"{header}\n{good}\n".encode() + bad.encode("latin-1") + b"\n")
    counts, _, rejects = run_clean(tmp_path, path)
    assert (counts.rows_out, counts.rejected) == (1, 1)
    assert rejects.get_column(REASON).item() == "invalid UTF-8 in column 'memo'"
    assert rejects.get_column("source_row").item() == 2


def test_bytes_no_encoding_reads_are_rejected_naming_both_encodings(tmp_path):
    """Byte 0x81 means nothing in windows-1252 (nor in UTF-8): in a windows-1252 file, its row
    is a reject that says what the text is not."""
    path = tmp_path / "ledger.csv"
    header = ",".join(ledger_row(1))
    rows = [",".join(ledger_row(n, memo=memo).values()) for n, memo in ((1, "Büro"), (2, "x\x81"))]
    path.write_bytes("\n".join([header, *rows]).encode("latin-1"))
    spec = ledger_spec(path, encoding="windows-1252")
    counts, frame, rejects = run_clean(tmp_path, path, spec=spec)
    assert (counts.rows_out, counts.rejected) == (1, 1)
    assert frame["memo"].to_list() == ["büro"]
    assert rejects[REASON].item() == "neither UTF-8 nor windows-1252 in column 'memo'"


def test_unknown_class_is_rejected_when_classes_are_listed(tmp_path, write_csv):
    path = write_csv([ledger_row(1, account="4930"), ledger_row(2, account="9999")])
    spec = ledger_spec(path, classes=["4930", "4400"])
    counts, _, rejects = run_clean(tmp_path, path, spec=spec)
    assert counts.rejected == 1
    assert rejects.get_column(REASON).item() == (
        "unknown class '9999' in column 'account' (not in data.classes)"
    )


def test_training_data_with_every_row_rejected_stops_naming_the_commonest_reasons(
    tmp_path, write_csv
):
    rows = [ledger_row(i, amount="x") for i in (1, 2, 3)] + [ledger_row(4, date="never")]
    path = write_csv(rows)
    expected = (
        f"{path}: all 4 rows were rejected, nothing is left to train on; the commonest reasons: "
        "unparseable number (format 1234.5) in column 'amount': 'x' (3 rows); "
        "unparseable date (format %Y-%m-%d) in column 'date': 'never' (1 rows)"
    )
    with pytest.raises(DataError) as raised:
        run_clean(tmp_path, path)
    assert str(raised.value) == expected
    # New records to predict are another matter: every row comes back, rejected, with its reason.
    counts, _, rejects = run_clean(tmp_path, path, require_label=False)
    assert (counts.rows_out, counts.rejected) == (0, 4)
    assert rejects.get_column("source_row").to_list() == [1, 2, 3, 4]


def test_labels_not_required_for_new_records(tmp_path, write_csv):
    path = write_csv([ledger_row(1, account=""), ledger_row(2)])
    counts, frame, _ = run_clean(tmp_path, path, require_label=False)
    assert counts.rows_out == 2
    assert frame.get_column("account").to_list() == [None, "4930"]


def test_a_new_record_without_any_value_is_a_reject_not_a_suggestion(tmp_path, write_csv):
    """A blank line a spreadsheet left at the end: nothing to suggest an account from."""
    blank = dict.fromkeys(ledger_row(2), "")
    path = write_csv([ledger_row(1, account=""), blank])
    counts, frame, rejects = run_clean(tmp_path, path, require_label=False)
    assert (counts.rows_out, counts.rejected) == (1, 1)
    assert frame.get_column("source_row").to_list() == [1]
    assert rejects.get_column(REASON).to_list() == [
        "missing id in column 'entry_id'; no value in any of the columns 'memo', 'vendor',"
        " 'amount', 'date'"
    ]


def test_missing_column_in_clean_input_names_file_and_column(tmp_path, write_csv):
    path = write_csv([ledger_row(1)])
    records = tmp_path / "records.parquet"
    ingest(ledger_spec(path), records)
    pl.read_parquet(records).drop("vendor").write_parquet(records)
    with pytest.raises(DataError, match=r"records\.parquet: missing required column\(s\) 'vendor'"):
        clean(
            records,
            ledger_spec(path),
            tmp_path / "c.parquet",
            tmp_path / "r.parquet",
            CleanSettings.of(),
        )


def test_counts_add_up_on_a_mixed_file(tmp_path, write_csv):
    rows = [ledger_row(i) for i in range(1, 21)]
    rows += [ledger_row(1), ledger_row(2), ledger_row(30, amount="?"), ledger_row(31, account="")]
    counts, frame, rejects = run_clean(tmp_path, write_csv(rows))
    assert counts.rows_in == 24
    assert counts.rows_in == frame.height + rejects.height + counts.duplicates
    assert (frame.height, rejects.height, counts.duplicates) == (20, 2, 2)


@pytest.mark.parametrize(
    ("number_format", "read", "refused"),
    [
        ("1234.5", {"-12.5": -12.5, "1234.50": 1234.5}, ["1,234.5", "12,5"]),
        (
            "1,234.5",
            {"1,234.56": 1234.56, "-1,234,567.5": -1234567.5, "1234.5": 1234.5, "999": 999.0},
            ["1,5", "12,34.5", "1.234,5"],
        ),
        ("1234,5", {"12,5": 12.5, "-0,75": -0.75, "1234": 1234.0}, ["1.5", "1.234,5"]),
        (
            "1.234,5",
            {"1.234,56": 1234.56, "1.234.567": 1234567.0, "1234,5": 1234.5, "-12,5": -12.5},
            ["1.5", "1.23,4", "1,234.5", "12.34"],
        ),
        (
            "1 234,5",
            {"1 234,5": 1234.5, "1\u00a0234,5": 1234.5, "-1\u202f234\u202f567": -1234567.0},
            ["1 23,4", "1.5"],
        ),
        ("1'234.5", {"1'234.5": 1234.5, "1\u2019234.50": 1234.5}, ["1'23.4", "1,5"]),
    ],
)
def test_numbers_read_in_the_configured_format(tmp_path, write_csv, number_format, read, refused):
    """A number reads in `data.number_format`: its thousands separator only where it groups
    digits in threes, its decimal separator only the format's. What could mean another number
    there (1.5 where a comma is the decimal separator) is a reject naming the format, not a
    guess."""
    amounts = [*read, *refused]
    rows = [ledger_row(n, amount=amount) for n, amount in enumerate(amounts, start=1)]
    path = write_csv(rows)
    spec = ledger_spec(path, number_format=number_format)

    counts, frame, rejects = run_clean(tmp_path, path, spec=spec)

    assert (counts.rows_out, counts.rejected) == (len(read), len(refused))
    assert frame["amount"].to_list() == list(read.values())
    assert rejects[REASON].to_list() == [
        f"unparseable number (format {number_format}) in column 'amount': '{amount}'"
        for amount in refused
    ]
