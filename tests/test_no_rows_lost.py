"""Property: whatever the rows, each ends in the clean output, the rejects, or the duplicates."""

import tempfile
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sample_ledger import ledger_spec

from account_tax.clean import clean
from account_tax.ingest import ingest

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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows, classes=st.sampled_from([None, ["4930", "4210"]]))
def test_every_row_is_accounted_for(rows, classes):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = tmp / "ledger.parquet"
        pl.DataFrame(rows, schema={k: pl.String for k in rows[0]}).write_parquet(source)
        spec = ledger_spec(source, classes=classes)
        ingest(spec, tmp / "records.parquet")
        counts = clean(
            tmp / "records.parquet", spec, tmp / "clean.parquet", tmp / "rejects.parquet"
        )

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
