"""Property: whatever the rows, each ends in the clean output, the rejects, or the duplicates."""

import tempfile
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sample_ledger import ledger_row, ledger_spec

from account_tax.data.clean import CleanCounts, CleanSettings, clean
from account_tax.data.ingest import ingest
from account_tax.errors import DataError

# Small alphabets make duplicates and collisions after normalisation likely.
texts = st.one_of(
    st.none(), st.sampled_from(["", " ", "Rent", "rent ", "RENT", "\uff32ent", "x\ufffd"])
)
amounts = st.one_of(st.none(), st.sampled_from(["1", "1.0", " 1 ", "-3.5", "abc", "1e3", "inf"]))
dates = st.one_of(st.none(), st.sampled_from(["2024-01-01", "2024-02-30", "01/02/2024", ""]))
labels = st.one_of(st.none(), st.sampled_from(["4930", "4210", " 4930", "NaN", "9999"]))
rows = st.lists(
    st.fixed_dictionaries(
        {
            "entry_id": st.sampled_from(["a", "b", "c", ""]),
            "date": dates,
            "vendor": texts,
            "memo": texts,
            "amount": amounts,
            "account": labels,
        }
    ),
    min_size=1,
    max_size=40,
)


def clean_or_nothing_left(tmp: Path, spec, rows_in: int) -> CleanCounts:
    """clean() on tmp/records.parquet. Training data without a usable row stops with a
    DataError, its output and rejects written all the same: then every row is a reject."""
    try:
        return clean(
            tmp / "records.parquet",
            spec,
            tmp / "clean.parquet",
            tmp / "rejects.parquet",
            CleanSettings.of(),
        )
    except DataError as nothing_left:
        assert f"all {rows_in} rows were rejected" in str(nothing_left)
        return CleanCounts(rows_in=rows_in, rows_out=0, rejected=rows_in, duplicates=0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows, classes=st.sampled_from([None, ["4930", "4210"]]))
def test_every_row_is_accounted_for(rows, classes):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = tmp / "ledger.parquet"
        pl.DataFrame(rows, schema={k: pl.String for k in rows[0]}).write_parquet(source)
        spec = ledger_spec(source, classes=classes)
        ingest(spec, tmp / "records.parquet")
        counts = clean_or_nothing_left(tmp, spec, len(rows))

        kept = pl.read_parquet(tmp / "clean.parquet")
        rejected = pl.read_parquet(tmp / "rejects.parquet")
        kept_rows = set(kept.get_column("source_row").to_list())
        rejected_rows = set(rejected.get_column("source_row").to_list())
        assert counts.rows_in == len(rows)
        assert counts.rows_in == counts.rows_out + counts.rejected + counts.duplicates
        assert kept_rows.isdisjoint(rejected_rows)
        assert len(kept_rows) == kept.height and len(rejected_rows) == rejected.height
        # A row in neither file must be a duplicate of a kept record.
        dropped = set(range(1, len(rows) + 1)) - kept_rows - rejected_rows
        assert len(dropped) == counts.duplicates
        assert kept.drop("source_row").unique().height == kept.height
        assert rejected.get_column("reason").null_count() == 0


HEADER = list(ledger_row(1))
ROW = ",".join(ledger_row(1).values()).encode()
FIELD_TEXT = st.sampled_from(["Rent", "rent ", "Office chairs", "\uff32ent", ""])
# How a line of a CSV can go wrong; the malformed kinds must be rejected, naming their line.
MALFORMED = {"extra field", "missing fields", "unclosed quote", "text after quote"}
LINE_KINDS = ["good", "quoted separator", "stray quote", "bad UTF-8", "empty", *sorted(MALFORMED)]


@st.composite
def csv_lines(draw) -> tuple[str, bytes]:
    """A body line of the ledger CSV and what was done to it. Every quote it holds is followed by
    a letter unless it closes a quoted field, so that an unclosed quote never runs on into a
    later, well-formed record (a legitimate multi-line field would)."""
    kind = draw(st.sampled_from(LINE_KINDS))
    row = ledger_row(
        draw(st.integers(1, 4)),
        memo=draw(FIELD_TEXT),
        vendor=draw(FIELD_TEXT),
        amount=draw(st.sampled_from(["1", "-3.5", "x1"])),
        account=draw(st.sampled_from(["4930", " 0042", "BE-58  BARON", ""])),
    )
    fields = [value.encode() for value in row.values()]
    memo = HEADER.index("memo")
    if kind == "empty":
        return kind, b""
    if kind == "quoted separator":
        fields[memo] = b'"Chairs, desks"'
    elif kind == "stray quote":
        fields[memo] = b'Off"ice'
    elif kind == "bad UTF-8":
        fields[memo] = b"Off\xffice"
    elif kind == "unclosed quote":
        fields[memo] = b'"Office'
    elif kind == "text after quote":
        fields[memo] = b'"Office"x'
    elif kind == "extra field":
        fields.append(b"surplus")
    elif kind == "missing fields":
        fields = fields[: draw(st.integers(1, len(fields) - 1))]
    return kind, b",".join(fields)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(csv_lines(), min_size=1, max_size=12))
def test_every_line_of_a_malformed_csv_is_accounted_for(lines):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = tmp / "ledger.csv"
        source.write_bytes(b"\n".join([",".join(HEADER).encode(), *(b for _, b in lines)]) + b"\n")
        spec = ledger_spec(source)
        ingest(spec, tmp / "records.parquet")
        counts = clean_or_nothing_left(tmp, spec, len(lines))
        kept = pl.read_parquet(tmp / "clean.parquet").get_column("source_row").to_list()
        rejected = pl.read_parquet(tmp / "rejects.parquet")
        reasons = dict(zip(*rejected.select("source_row", "reason"), strict=True))
        assert counts.rows_in == len(lines)
        assert counts.rows_in == counts.rows_out + counts.rejected + counts.duplicates
        assert set(kept).isdisjoint(reasons)
        assert len(set(range(1, len(lines) + 1)) - set(kept) - set(reasons)) == counts.duplicates
        for record, (kind, _) in enumerate(lines, start=1):
            # The header is line 1, and no record here spans lines.
            names_its_line = reasons.get(record, "").startswith(f"line {record + 1}: ")
            assert names_its_line == (kind in MALFORMED), (record, kind, reasons.get(record))


# Bytes that make and break CSV structure, and whole records, so that some rows are usable.
CSV_BYTES = st.lists(
    st.sampled_from(
        [b",", b'"', b"\n", b"\r", b"\xff", b"\x00", b" ", b"a", b"1", ROW + b"\n", ROW + b",1\n"]
    )
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    header=st.one_of(
        st.just(HEADER), st.sampled_from([[*HEADER, "amount"], [*HEADER[:-1], '"account'], []])
    ),
    body=CSV_BYTES.map(b"".join),
)
def test_random_bytes_end_in_output_rejects_or_a_clear_error(header, body):
    """Whatever follows the header: a DataError for the file (a header that cannot be read, no
    rows), or every record in the output, the rejects or the duplicates."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = tmp / "ledger.csv"
        source.write_bytes(",".join(header).encode() + b"\n" + body)
        spec = ledger_spec(source)
        try:
            rows = ingest(spec, tmp / "records.parquet")
        except DataError as error:
            assert str(error).startswith(f"{source}: ")
            return
        assert header == HEADER
        counts = clean_or_nothing_left(tmp, spec, rows)
        kept = pl.read_parquet(tmp / "clean.parquet").get_column("source_row")
        rejected = pl.read_parquet(tmp / "rejects.parquet")
        assert counts.rows_in == rows == counts.rows_out + counts.rejected + counts.duplicates
        accounted = set(kept) | set(rejected.get_column("source_row"))
        assert len(accounted) == counts.rows_out + counts.rejected
        assert accounted <= set(range(1, rows + 1))
        assert rejected.get_column("reason").null_count() == 0
