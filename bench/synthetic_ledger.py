"""SYNTHETIC ledger generator: made-up bookkeeping records shaped like the real use case.

Nothing here is real data, and the workflow never reads it by default: it exists to test and
benchmark the pipeline at any size (`bench/make_ledger.py`). The shape follows a German/EU
chart of accounts: about 280 four-digit account codes, 21 of them without a single booking,
and a Zipf-like imbalance over the rest (at 1 M rows the largest class is thousands of times
the smallest). The memo carries account-specific vocabulary, the vendor and noise (invoice
numbers, periods, prefixes), so a classifier can learn the account but not trivially.

With `drift`, the business changes over the four years, as a ledger does from period to
period: some accounts are opened mid-way (no booking before their opening day), some vendors are
renamed on a day of their own (a new name from then on: new words the model never saw), and
amounts inflate by INFLATION_PER_YEAR. The drift is a deterministic function of the chart and of
each row's date, so it draws nothing from the rows' random streams: the same rows as without
drift, moved, renamed and scaled.

The output is a pure function of (rows, seed, dirty fraction, drift, format): generation runs
in chunks, each from its own seeded random stream, so 10 M rows need a few hundred MB of memory.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import polars as pl

COLUMNS = (
    "entry_id",
    "date",
    "vendor",
    "memo",
    "amount",
    "currency",
    "department",
    "vat_type",
    "document_type",
    "account",
)
CHUNK_ROWS = 500_000
# The made-up chart of accounts and its families of accounts, as data.
CHART_DIR = Path(__file__).resolve().parent / "synthetic_chart"
# The chart's vendors, amounts and vocabulary come from this fixed seed, not the run's seed:
# ledgers with different seeds are different samples of the same business.
CHART_SEED = 20_240_101
FIRST_DAY = np.datetime64("2021-01-01")
LAST_DAY = np.datetime64("2024-12-31")
# Zipf-Mandelbrot p(rank) ~ (rank + offset)^-exponent: about 24% of rows in the largest class
# and a largest/smallest ratio of about 3000 over 259 classes.
ZIPF_OFFSET = 2.0
ZIPF_EXPONENT = 1.8
MAX_DIRTY_FRACTION = 0.5
# Drift: accounts opened mid-way and vendors renamed, each on a day at least DRIFT_MARGIN from
# the ends, and inflation. From its own seed, so the chart without drift is unchanged.
DRIFT_SEED = CHART_SEED + 1
OPENED_ACCOUNT_SHARE = 0.15
RENAMED_VENDOR_SHARE = 0.2
DRIFT_MARGIN = np.timedelta64(180, "D")
INFLATION_PER_YEAR = 0.06

DIRTY_KINDS = (
    "bad_amount",
    "bad_date",
    "missing_label",
    "unknown_label",
    "duplicate",
    "invalid_utf8",
)
CSV_ONLY_KINDS = frozenset({"invalid_utf8"})

CURRENCIES = ("EUR", "USD", "GBP", "CHF")
FOREIGN_CURRENCY_WEIGHTS = (0.5, 0.3, 0.2)
DEPARTMENTS = (
    "finance",
    "sales",
    "marketing",
    "operations",
    "it",
    "hr",
    "management",
    "logistics",
    "production",
    "facilities",
)
VAT_TYPES = (
    "input19",
    "input7",
    "output19",
    "output7",
    "eu_supply",
    "eu_acquisition",
    "reverse_charge",
    "import",
    "export",
    "exempt",
    "none",
)
# Memo prefixes written by the system or person that books each document type.
DOCUMENT_PREFIXES = {
    "invoice": ("invoice", "inv", "RE", "Rechnung"),
    "credit_note": ("credit note", "CN", "Gutschrift"),
    "receipt": ("receipt", "Beleg", "Quittung"),
    "bank_statement": ("SEPA transfer", "Überweisung", "transfer"),
    "direct_debit": ("direct debit", "SEPA-Lastschrift", "DD"),
    "card_payment": ("card payment", "Kartenzahlung", "VISA"),
    "payroll": ("payroll", "Lohnabrechnung", "pay run"),
    "journal": ("journal", "Umbuchung", "adjustment"),
    "contract": ("contract", "Vertrag", "agreement"),
    "tax_notice": ("tax notice", "Bescheid", "assessment"),
}
DOCUMENT_TYPES = tuple(DOCUMENT_PREFIXES)
# Invoice, order and document numbers: digits that carry no information about the account.
REFERENCE_PREFIXES = ("inv ", "no. ", "#", "ref ", "order ", "KD-")
FILLERS = (
    "thank you",
    "as agreed",
    "see attachment",
    "partial payment",
    "final invoice",
    "reminder",
    "paid",
    "per email",
    "urgent",
    "corrected",
)
SURNAMES = (
    "Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker", "Schulz",
    "Hoffmann", "Schäfer", "Koch", "Bauer", "Richter", "Klein", "Wolf", "Schröder", "Neumann",
    "Schwarz", "Zimmermann", "Braun", "Krüger", "Hartmann", "Lange", "Werner", "Krause", "Lehmann",
    "Köhler", "Jäger", "Böhm", "Günther", "Dubois", "Rossi", "van Dijk", "Novak", "Svensson",
)  # fmt: skip
LEGAL_FORMS = ("GmbH", "GmbH", "GmbH", "AG", "KG", "GmbH & Co. KG", "e.K.", "OHG", "Ltd", "B.V.")
VENDORS_PER_FAMILY = 12
# Words as a Latin-1 system writes them: each letter in U+E0C0..U+E0FF stands in for the single
# byte 0xC0..0xFF (invalid alone in UTF-8) until the CSV text is encoded, since Polars strings
# must be valid UTF-8. In UTF-8 those stand-ins are EE 83 80..BF.
LATIN1_WORDS = ("Geb\ue0fchr", "M\ue0fcller", "Stra\ue0dfe", "\ue0c4nderung", "Pr\ue0e4mie")
LATIN1_STAND_IN = b"\xee\x83"

# Shares of rows that get each kind of noise: enough that no single token decides the account.
SIBLING_KEYWORD_SHARE = 0.06
FOREIGN_VENDOR_SHARE = 0.05
SECOND_KEYWORD_SHARE = 0.35
FAMILY_WORD_SHARE = 0.25
PREFIX_SHARE = 0.5
VENDOR_IN_MEMO_SHARE = 0.35
VENDOR_FIRST_SHARE = 0.3
REFERENCE_SHARE = 0.6
PERIOD_SHARE = 0.25
FILLER_SHARE = 0.12
UPPERCASE_MEMO_SHARE = 0.08
UPPERCASE_VENDOR_SHARE = 0.05
OTHER_DEPARTMENT_SHARE = 0.05
OTHER_VAT_SHARE = 0.06
CREDIT_NOTE_SHARE = 0.04
WEEKEND_MOVED_SHARE = 0.9
YEAR_END_ON_DEC_31_SHARE = 0.8


@dataclass(frozen=True)
class Family:
    """A group of related accounts that share vendors, amount scale and booking habits (a row of
    synthetic_chart/families.csv; lists there are `;`-separated)."""

    name: str
    weight: float
    median_amount: float
    amount_sigma: float
    vat_type: str
    document_types: tuple[str, ...]
    departments: tuple[str, ...]
    vendor_trades: tuple[str, ...]
    words: tuple[str, ...]
    timing: str
    foreign_share: float


def read_chart_file(name: str) -> list[dict[str, str]]:
    with (CHART_DIR / name).open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def split_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(";"))


FAMILIES = tuple(
    Family(
        name=row["family"],
        weight=float(row["weight"]),
        median_amount=float(row["median_amount"]),
        amount_sigma=float(row["amount_sigma"]),
        vat_type=row["vat_type"],
        document_types=split_list(row["document_types"]),
        departments=split_list(row["departments"]),
        vendor_trades=split_list(row["vendor_trades"]),
        words=split_list(row["words"]),
        timing=row["timing"],
        foreign_share=float(row["foreign_share"]),
    )
    for row in read_chart_file("families.csv")
)

TIMINGS = ("any", "month_start", "month_end", "year_end")


@dataclass(frozen=True)
class Account:
    code: str
    name: str
    family: int
    place: int  # position in its family's listing: earlier accounts are booked more often
    keywords: tuple[str, ...]
    vat_type: str
    timing: str
    has_bookings: bool


def parse_accounts() -> tuple[Account, ...]:
    """Every account of synthetic_chart/accounts.csv, in code order (the order of the classes
    file). Within a family the file lists accounts most booked first; an empty VAT type or timing
    is the family's; `booked` no marks an account of the chart that has no bookings at all."""
    family_index = {family.name: index for index, family in enumerate(FAMILIES)}
    places: dict[str, int] = {}
    accounts = []
    for row in read_chart_file("accounts.csv"):
        family = FAMILIES[family_index[row["family"]]]
        place = places[family.name] = places.get(family.name, -1) + 1
        account = Account(
            code=row["code"],
            name=row["name"],
            family=family_index[family.name],
            place=place,
            keywords=split_list(row["keywords"]),
            vat_type=row["vat_type"] or family.vat_type,
            timing=row["timing"] or family.timing,
            has_bookings=row["booked"] == "yes",
        )
        assert account.vat_type in VAT_TYPES and account.timing in TIMINGS, row
        accounts.append(account)
    codes = [a.code for a in accounts]
    assert len(set(codes)) == len(codes), "duplicate account code in the chart"
    return tuple(sorted(accounts, key=lambda a: a.code))


def class_codes() -> list[str]:
    """All account codes, including those without bookings, in label-id order."""
    return chart().codes.to_list()


def _offsets(lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each group in a flattened list of groups."""
    counts = np.asarray(lengths, dtype=np.int64)
    return np.concatenate(([0], np.cumsum(counts)[:-1])), counts


@dataclass(frozen=True)
class Chart:
    """The chart as flat lookup tables, so each row's choices are numpy index arithmetic."""

    accounts: tuple[Account, ...]
    codes: pl.Series
    probabilities: np.ndarray  # per account, by popularity rank; 0 for accounts without bookings
    family: np.ndarray
    family_members: np.ndarray  # account indices grouped by family
    family_start: np.ndarray  # where each family's group starts in family_members
    family_size: np.ndarray
    keywords: pl.Series
    keyword_start: np.ndarray
    keyword_count: np.ndarray
    family_words: pl.Series
    family_word_start: np.ndarray
    family_word_count: np.ndarray
    vendors: pl.Series
    vendor_short: pl.Series
    account_vendors: np.ndarray  # flattened vendor indices per account, most used first
    vendor_start: np.ndarray
    vendor_count: np.ndarray
    departments: np.ndarray  # flattened department indices per family, most used first
    department_start: np.ndarray
    department_count: np.ndarray
    prefixes: pl.Series  # memo prefixes, grouped by document type
    prefix_start: np.ndarray
    prefix_count: np.ndarray
    documents: np.ndarray  # flattened document type indices per family, most used first
    document_start: np.ndarray
    document_count: np.ndarray
    log_median_cents: np.ndarray
    amount_sigma: np.ndarray
    foreign_share: np.ndarray
    vat_type: np.ndarray
    timing: np.ndarray
    unknown_code: pl.Series  # per account: the nearest code above it that is not in the chart


@cache
def chart() -> Chart:
    accounts = parse_accounts()
    rng = np.random.default_rng(CHART_SEED)
    family = np.array([a.family for a in accounts])

    # Popularity: the family's weight over the account's place in the family's listing.
    score = np.array(
        [FAMILIES[a.family].weight / (a.place + 1) if a.has_bookings else 0.0 for a in accounts]
    )
    order = np.argsort(-score, kind="stable")
    booked = int(np.count_nonzero(score))
    probabilities = np.zeros(len(accounts))
    ranks = np.arange(1, booked + 1)
    probabilities[order[:booked]] = (ranks + ZIPF_OFFSET) ** -ZIPF_EXPONENT
    probabilities /= probabilities.sum()

    family_members = np.argsort(family, kind="stable")
    family_start, family_size = _offsets(np.bincount(family, minlength=len(FAMILIES)).tolist())

    keyword_start, keyword_count = _offsets([len(a.keywords) for a in accounts])
    family_word_start, family_word_count = _offsets([len(f.words) for f in FAMILIES])

    vendor_names, vendor_short, account_vendors, vendors_per_account = [], [], [], []
    for fam in FAMILIES:
        surnames = rng.choice(len(SURNAMES), VENDORS_PER_FAMILY, replace=False)
        legal_forms = rng.integers(0, len(LEGAL_FORMS), VENDORS_PER_FAMILY)
        for i in range(VENDORS_PER_FAMILY):
            trade = fam.vendor_trades[i % len(fam.vendor_trades)]
            surname = SURNAMES[surnames[i]]
            vendor_names.append(f"{trade} {surname} {LEGAL_FORMS[legal_forms[i]]}")
            vendor_short.append(surname)
    for account in accounts:
        count = int(rng.integers(3, 7))
        picks = rng.choice(VENDORS_PER_FAMILY, count, replace=False)
        account_vendors.extend(account.family * VENDORS_PER_FAMILY + picks)
        vendors_per_account.append(count)
    vendor_start, vendor_count = _offsets(vendors_per_account)

    departments = [DEPARTMENTS.index(d) for f in FAMILIES for d in f.departments]
    department_start, department_count = _offsets([len(f.departments) for f in FAMILIES])
    prefix_start, prefix_count = _offsets([len(DOCUMENT_PREFIXES[d]) for d in DOCUMENT_TYPES])
    documents = [DOCUMENT_TYPES.index(d) for f in FAMILIES for d in f.document_types]
    document_start, document_count = _offsets([len(f.document_types) for f in FAMILIES])

    median = np.array([FAMILIES[a.family].median_amount for a in accounts])
    account_scale = rng.lognormal(0.0, 0.5, len(accounts))
    codes = {a.code for a in accounts}

    def unknown_neighbour(code: str) -> str:
        value = int(code) + 1
        while f"{value % 10_000:04d}" in codes:
            value += 1
        return f"{value % 10_000:04d}"

    return Chart(
        accounts=accounts,
        codes=pl.Series([a.code for a in accounts], dtype=pl.String),
        probabilities=probabilities,
        family=family,
        family_members=family_members,
        family_start=family_start,
        family_size=family_size,
        keywords=pl.Series([k for a in accounts for k in a.keywords], dtype=pl.String),
        keyword_start=keyword_start,
        keyword_count=keyword_count,
        family_words=pl.Series([w for f in FAMILIES for w in f.words], dtype=pl.String),
        family_word_start=family_word_start,
        family_word_count=family_word_count,
        vendors=pl.Series(vendor_names, dtype=pl.String),
        vendor_short=pl.Series(vendor_short, dtype=pl.String),
        account_vendors=np.asarray(account_vendors),
        vendor_start=vendor_start,
        vendor_count=vendor_count,
        departments=np.asarray(departments),
        department_start=department_start,
        department_count=department_count,
        prefixes=pl.Series([p for d in DOCUMENT_TYPES for p in DOCUMENT_PREFIXES[d]]),
        prefix_start=prefix_start,
        prefix_count=prefix_count,
        documents=np.asarray(documents),
        document_start=document_start,
        document_count=document_count,
        log_median_cents=np.log(median * account_scale * 100),
        amount_sigma=np.array([FAMILIES[a.family].amount_sigma for a in accounts]),
        foreign_share=np.array([FAMILIES[a.family].foreign_share for a in accounts]),
        vat_type=np.array([VAT_TYPES.index(a.vat_type) for a in accounts]),
        timing=np.array([TIMINGS.index(a.timing) for a in accounts]),
        unknown_code=pl.Series([unknown_neighbour(a.code) for a in accounts], dtype=pl.String),
    )


@dataclass(frozen=True)
class Drift:
    """When each account opens and each vendor takes its new name (FIRST_DAY: from the start,
    beyond LAST_DAY: never), and the names it takes."""

    opening_day: np.ndarray  # datetime64[D] per account
    rename_day: np.ndarray  # datetime64[D] per vendor
    renamed: pl.Series  # per vendor: the full name from its rename day on
    renamed_short: pl.Series  # the short name the memo uses from then on


@cache
def drift() -> Drift:
    c = chart()
    rng = np.random.default_rng(DRIFT_SEED)
    first, last = FIRST_DAY + DRIFT_MARGIN, LAST_DAY - DRIFT_MARGIN
    span = (last - first).astype(np.int64)

    def some_days(count: int, share: float, eligible: np.ndarray) -> np.ndarray:
        days = np.full(count, FIRST_DAY)
        chosen = rng.choice(np.flatnonzero(eligible), int(share * eligible.sum()), replace=False)
        days[chosen] = first + rng.integers(0, span, len(chosen)).astype("timedelta64[D]")
        return days

    # The most booked tenth of the accounts were there from the start.
    popular = np.argsort(-c.probabilities, kind="stable")[: len(c.probabilities) // 10]
    eligible = c.probabilities > 0
    eligible[popular] = False
    opening_day = some_days(len(c.probabilities), OPENED_ACCOUNT_SHARE, eligible)
    vendors = len(c.vendors)
    rename_day = some_days(vendors, RENAMED_VENDOR_SHARE, np.ones(vendors, dtype=bool))
    rename_day = np.where(rename_day == FIRST_DAY, LAST_DAY + 1, rename_day)
    # A merger's double name: a new surname before the old one, the trade and legal form kept.
    new_short = [
        f"{SURNAMES[s]}-{short}"
        for s, short in zip(rng.integers(0, len(SURNAMES), vendors), c.vendor_short, strict=True)
    ]
    renamed = [
        name.replace(short, new, 1)
        for name, short, new in zip(c.vendors, c.vendor_short, new_short, strict=True)
    ]
    return Drift(
        opening_day=opening_day,
        rename_day=rename_day,
        renamed=pl.Series(renamed, dtype=pl.String),
        renamed_short=pl.Series(new_short, dtype=pl.String),
    )


def drifted_dates(dates: np.ndarray, accounts: np.ndarray) -> np.ndarray:
    """Dates moved into [opening day, LAST_DAY] of their account, keeping their order."""
    opening = drift().opening_day[accounts]
    span = (LAST_DAY - FIRST_DAY).astype(np.int64) + 1
    open_span = (LAST_DAY - opening).astype(np.int64) + 1
    offset = (dates - FIRST_DAY).astype(np.int64) * open_span // span
    return opening + offset.astype("timedelta64[D]")


def inflation(dates: np.ndarray) -> np.ndarray:
    """Price level on each date, 1 on FIRST_DAY."""
    years = (dates - FIRST_DAY).astype(np.int64) / 365.25
    return (1 + INFLATION_PER_YEAR) ** years


def class_counts(rows: int) -> np.ndarray:
    """Rows per account: exact Zipf shares of `rows`, at least one per booked account if possible.

    Largest-remainder rounding, so the counts add up to `rows` exactly and the imbalance does not
    depend on sampling luck.
    """
    probabilities = chart().probabilities
    booked = probabilities > 0
    minimum = booked.astype(np.int64) if rows >= booked.sum() else np.zeros(len(booked), np.int64)
    share = probabilities * (rows - minimum.sum())
    counts = minimum + np.floor(share).astype(np.int64)
    remainder = rows - counts.sum()
    counts[np.argsort(-(share - np.floor(share)), kind="stable")[:remainder]] += 1
    return counts


def _pick(rng: np.random.Generator, start: np.ndarray, count: np.ndarray, skew: bool) -> np.ndarray:
    """One index per row from its group [start, start + count); `skew` favours the group's first."""
    u = rng.random(len(start))
    return start + (count * (u * u if skew else u)).astype(np.int64)


def _dates(rng: np.random.Generator, timing: np.ndarray) -> np.ndarray:
    """Booking dates: weekdays mostly, recurring accounts at month start/end or on 31 December."""
    n = len(timing)
    span = (LAST_DAY - FIRST_DAY).astype(np.int64) + 1
    days = FIRST_DAY + rng.integers(0, span, n).astype("timedelta64[D]")
    weekday = (days.astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday; Monday is 0
    to_friday_or_monday = np.where(rng.random(n) < 0.5, -1, 2) - (weekday == 6) * 1
    move = (weekday >= 5) & (rng.random(n) < WEEKEND_MOVED_SHARE)
    days = days + np.where(move, to_friday_or_monday, 0).astype("timedelta64[D]")

    month = days.astype("datetime64[M]")
    shift = rng.integers(0, 3, n).astype("timedelta64[D]")
    month_start = month.astype("datetime64[D]") + shift
    month_end = (month + 1).astype("datetime64[D]") - 1 - shift
    year_end = (days.astype("datetime64[Y]") + 1).astype("datetime64[D]") - 1
    year_end = np.where(rng.random(n) < YEAR_END_ON_DEC_31_SHARE, year_end, days)
    recurring = [timing == TIMINGS.index(t) for t in ("month_start", "month_end", "year_end")]
    return np.select(recurring, [month_start, month_end, year_end], days)


def _texts(values: tuple[str, ...] | pl.Series, index: np.ndarray) -> pl.Series:
    return (values if isinstance(values, pl.Series) else pl.Series(values)).gather(index)


def _where(mask: np.ndarray, value: pl.Series | pl.Expr) -> pl.Expr:
    """`value` in the rows where `mask` holds, null (left out of the memo) elsewhere."""
    return pl.when(pl.lit(pl.Series(mask))).then(value)


def clean_chunk(
    rng: np.random.Generator, accounts: np.ndarray, first_row: int, drifting: bool = False
) -> pl.DataFrame:
    """Well-formed rows for the given account indices; entry ids continue after `first_row`."""
    c = chart()
    n = len(accounts)
    family = c.family[accounts]

    sibling = c.family_members[_pick(rng, c.family_start[family], c.family_size[family], False)]
    keyword_account = np.where(rng.random(n) < SIBLING_KEYWORD_SHARE, sibling, accounts)
    keyword = _pick(rng, c.keyword_start[keyword_account], c.keyword_count[keyword_account], False)
    second_keyword = _pick(rng, c.keyword_start[accounts], c.keyword_count[accounts], False)
    has_second_keyword = (rng.random(n) < SECOND_KEYWORD_SHARE) & (second_keyword != keyword)
    family_word = _pick(rng, c.family_word_start[family], c.family_word_count[family], False)

    booked = np.flatnonzero(c.probabilities > 0)
    vendor_account = np.where(rng.random(n) < FOREIGN_VENDOR_SHARE, rng.choice(booked, n), accounts)
    vendor = c.account_vendors[
        _pick(rng, c.vendor_start[vendor_account], c.vendor_count[vendor_account], True)
    ]
    department = np.where(
        rng.random(n) < OTHER_DEPARTMENT_SHARE,
        rng.integers(0, len(DEPARTMENTS), n),
        c.departments[_pick(rng, c.department_start[family], c.department_count[family], True)],
    )
    document = c.documents[_pick(rng, c.document_start[family], c.document_count[family], True)]
    credit_note = (document == DOCUMENT_TYPES.index("invoice")) & (
        rng.random(n) < CREDIT_NOTE_SHARE
    )
    document = np.where(credit_note, DOCUMENT_TYPES.index("credit_note"), document)
    vat_type = np.where(
        rng.random(n) < OTHER_VAT_SHARE, rng.integers(0, len(VAT_TYPES), n), c.vat_type[accounts]
    )
    currency = np.where(
        rng.random(n) < c.foreign_share[accounts],
        1 + rng.choice(3, n, p=FOREIGN_CURRENCY_WEIGHTS),
        0,
    )
    cents = np.maximum(
        1, np.rint(np.exp(rng.normal(c.log_median_cents[accounts], c.amount_sigma[accounts])))
    ).astype(np.int64)
    cents = np.where(credit_note, -cents, cents)
    dates = _dates(rng, c.timing[accounts])
    vendor_name, vendor_short = c.vendors.gather(vendor), c.vendor_short.gather(vendor)
    if drifting:
        dates = drifted_dates(dates, accounts)
        cents = np.rint(cents * inflation(dates)).astype(np.int64)
        new_name = pl.Series(dates >= drift().rename_day[vendor])
        vendor_name = pl.select(
            pl.when(new_name).then(drift().renamed.gather(vendor)).otherwise(vendor_name)
        ).to_series()
        vendor_short = pl.select(
            pl.when(new_name).then(drift().renamed_short.gather(vendor)).otherwise(vendor_short)
        ).to_series()
    prefix = _pick(rng, c.prefix_start[document], c.prefix_count[document], False)
    reference = pl.Series(rng.integers(1, 1_000_000, n)).cast(pl.String)
    vendor_in_memo = rng.random(n) < VENDOR_IN_MEMO_SHARE
    vendor_first = rng.random(n) < VENDOR_FIRST_SHARE

    frame = pl.DataFrame({"row": np.arange(first_row + 1, first_row + n + 1), "date": dates})
    period = pl.concat_str(
        pl.col("date").dt.month().cast(pl.String).str.zfill(2),
        pl.lit("/"),
        pl.col("date").dt.year().cast(pl.String),
    )
    # The memo's parts in order; a null part is left out.
    memo_parts = [
        _where(vendor_in_memo & vendor_first, vendor_short),
        _where(rng.random(n) < PREFIX_SHARE, c.prefixes.gather(prefix)),
        pl.lit(c.keywords.gather(keyword)),
        _where(has_second_keyword, c.keywords.gather(second_keyword)),
        _where(rng.random(n) < FAMILY_WORD_SHARE, c.family_words.gather(family_word)),
        _where(vendor_in_memo & ~vendor_first, vendor_short),
        _where(
            rng.random(n) < REFERENCE_SHARE,
            pl.concat_str(
                pl.lit(_texts(REFERENCE_PREFIXES, rng.integers(0, len(REFERENCE_PREFIXES), n))),
                pl.lit(reference),
            ),
        ),
        _where(rng.random(n) < PERIOD_SHARE, period),
        _where(rng.random(n) < FILLER_SHARE, _texts(FILLERS, rng.integers(0, len(FILLERS), n))),
    ]
    memo = frame.select(pl.concat_str(memo_parts, separator=" ", ignore_nulls=True)).to_series()
    magnitude = np.abs(cents)
    amount = pl.concat_str(
        pl.lit(_texts(("", "-"), (cents < 0).astype(np.int64))),
        pl.lit(pl.Series(magnitude // 100).cast(pl.String)),
        pl.lit("."),
        pl.lit(pl.Series(magnitude % 100).cast(pl.String)).str.zfill(2),
    )
    return frame.select(
        pl.concat_str(pl.lit("JE"), pl.col("row").cast(pl.String).str.zfill(10)).alias("entry_id"),
        pl.col("date").cast(pl.String),
        # Some systems export names and texts in capitals; clean's case policy undoes it.
        pl.lit(_upper_case_some(rng, vendor_name, UPPERCASE_VENDOR_SHARE)).alias("vendor"),
        pl.lit(_upper_case_some(rng, memo, UPPERCASE_MEMO_SHARE)).alias("memo"),
        amount.alias("amount"),
        pl.lit(_texts(CURRENCIES, currency)).alias("currency"),
        pl.lit(_texts(DEPARTMENTS, department)).alias("department"),
        pl.lit(_texts(VAT_TYPES, vat_type)).alias("vat_type"),
        pl.lit(_texts(DOCUMENT_TYPES, document)).alias("document_type"),
        pl.lit(c.codes.gather(accounts)).alias("account"),
    )


def _upper_case_some(rng: np.random.Generator, values: pl.Series, share: float) -> pl.Series:
    rows = np.flatnonzero(rng.random(len(values)) < share)
    return values.scatter(rows, values.gather(rows).str.to_uppercase())


def make_dirty(
    rng: np.random.Generator, frame: pl.DataFrame, accounts: np.ndarray, kinds: np.ndarray
) -> pl.DataFrame:
    """`frame` with rows spoiled: `kinds[i]` indexes DIRTY_KINDS, or is -1 for a row left clean.

    A duplicate copies a clean row of the same chunk, entry id included, so `clean` sees an exact
    duplicate and not a reject.
    """
    n = frame.height
    kind = pl.lit(pl.Series(kinds))
    variant = pl.lit(pl.Series(rng.integers(0, 3, n)))
    amount, date = pl.col("amount"), pl.col("date")
    comma_amount = amount.str.replace(".", ",", literal=True)
    bad_amount = (
        pl.when(variant == 0)
        .then(comma_amount)
        .when(variant == 1)
        .then(pl.concat_str(amount, pl.lit(" "), pl.col("currency")))
        .otherwise(pl.concat_str(comma_amount, pl.lit("x")))
    )
    year, month, day = date.str.slice(0, 4), date.str.slice(5, 2), date.str.slice(8, 2)
    bad_date = (
        pl.when(variant == 0)
        .then(pl.concat_str(year, pl.lit("-13-"), day))
        .when(variant == 1)
        .then(pl.concat_str(year, pl.lit("-"), month, pl.lit("-45")))
        .otherwise(pl.concat_str(day, pl.lit("."), month, pl.lit("."), year))  # German format
    )
    latin1_word = pl.lit(pl.Series(LATIN1_WORDS)).gather(
        pl.lit(pl.Series(rng.integers(0, len(LATIN1_WORDS), n)))
    )
    unknown = pl.lit(chart().unknown_code.gather(accounts))

    def spoil(column: str, kind_name: str, value: pl.Expr) -> pl.Expr:
        return (
            pl.when(kind == DIRTY_KINDS.index(kind_name))
            .then(value)
            .otherwise(pl.col(column))
            .alias(column)
        )

    frame = frame.with_columns(
        spoil("amount", "bad_amount", bad_amount),
        spoil("date", "bad_date", bad_date),
        spoil("memo", "invalid_utf8", pl.concat_str(pl.col("memo"), pl.lit(" "), latin1_word)),
        pl.when(kind == DIRTY_KINDS.index("missing_label"))
        .then(pl.lit(""))
        .when(kind == DIRTY_KINDS.index("unknown_label"))
        .then(unknown)
        .otherwise(pl.col("account"))
        .alias("account"),
    )
    duplicates = np.flatnonzero(kinds == DIRTY_KINDS.index("duplicate"))
    if len(duplicates) == 0:
        return frame
    take = np.arange(n)
    take[duplicates] = rng.choice(np.flatnonzero(kinds < 0), len(duplicates))
    return frame[take]


@dataclass(frozen=True)
class LedgerSummary:
    output: str
    classes_output: str
    rows: int
    classes: int
    classes_without_rows: int
    seed: int
    dirty: dict[str, int]
    # With drift: accounts opened after the first day, vendors renamed, inflation per year.
    drift: dict[str, float] | None


def ledger_chunks(
    rows: int,
    seed: int,
    dirty_fraction: float,
    dirty_kinds: tuple[str, ...],
    drifting: bool = False,
) -> Iterator[tuple[pl.DataFrame, dict[str, int]]]:
    """The ledger in chunks of about CHUNK_ROWS rows, each with its count of dirty rows by kind.

    Chunks are nearly equal in size so none is tiny, and each has fewer dirty rows than rows
    (at most half plus one), so a duplicate always has a clean row to copy.
    """
    remaining = class_counts(rows)
    chunks = max(1, -(-rows // CHUNK_ROWS))
    dirty_total = int(dirty_fraction * rows)
    kind_codes = np.array([DIRTY_KINDS.index(k) for k in dirty_kinds])
    for index in range(chunks):
        start, end = rows * index // chunks, rows * (index + 1) // chunks
        rng = np.random.default_rng([seed, index])
        # Which accounts land in this chunk: drawn without replacement from the exact totals.
        taken = rng.multivariate_hypergeometric(remaining, end - start)
        remaining = remaining - taken
        accounts = rng.permutation(np.repeat(np.arange(len(taken)), taken))
        frame = clean_chunk(rng, accounts, start, drifting)

        dirty_before = dirty_total * start // rows
        dirty_here = dirty_total * end // rows - dirty_before
        kinds = np.full(end - start, -1, dtype=np.int64)
        order = (dirty_before + np.arange(dirty_here)) % len(kind_codes)
        kinds[rng.choice(end - start, dirty_here, replace=False)] = kind_codes[order]
        counts = {k: int(np.count_nonzero(kinds == DIRTY_KINDS.index(k))) for k in DIRTY_KINDS}
        yield (make_dirty(rng, frame, accounts, kinds) if dirty_here else frame), counts


def _latin1_pieces(data: bytes) -> Iterator[bytes | memoryview]:
    """`data` with each Latin-1 stand-in replaced by its byte, as pieces to write in order."""
    view = memoryview(data)
    start = 0
    while (found := data.find(LATIN1_STAND_IN, start)) >= 0:
        yield view[start:found]
        yield bytes([data[found + 2] + 0x40])
        start = found + 3
    yield view[start:]


def _write_csv(chunks: Iterator[tuple[pl.DataFrame, dict[str, int]]], path: Path) -> dict[str, int]:
    totals = dict.fromkeys(DIRTY_KINDS, 0)
    with path.open("wb") as handle:
        for index, (frame, counts) in enumerate(chunks):
            buffer = io.BytesIO()
            frame.write_csv(buffer, include_header=index == 0)
            data = buffer.getvalue()
            handle.writelines(_latin1_pieces(data) if counts["invalid_utf8"] else [data])
            totals = {k: totals[k] + counts[k] for k in DIRTY_KINDS}
    return totals


def _write_parquet(
    chunks: Iterator[tuple[pl.DataFrame, dict[str, int]]], path: Path
) -> dict[str, int]:
    totals = dict.fromkeys(DIRTY_KINDS, 0)
    parts_dir = path.with_name(f".{path.name}.parts")
    parts_dir.mkdir(exist_ok=True)
    parts = []
    try:
        for index, (frame, counts) in enumerate(chunks):
            parts.append(parts_dir / f"{index:06d}.parquet")
            frame.write_parquet(parts[-1])
            totals = {k: totals[k] + counts[k] for k in DIRTY_KINDS}
        # Streams the parts into one file without holding the whole ledger in memory.
        pl.scan_parquet(parts).sink_parquet(path)
    finally:
        for part in parts:
            part.unlink(missing_ok=True)
        parts_dir.rmdir()
    return totals


def generate_ledger(
    output: Path,
    rows: int,
    *,
    seed: int = 0,
    dirty_fraction: float = 0.0,
    classes_output: Path | None = None,
    drifting: bool = False,
) -> LedgerSummary:
    """Write a synthetic ledger (CSV or Parquet, by the extension of `output`) and its classes.

    `dirty_fraction` of the rows (rounded down) are spoiled, spread evenly over DIRTY_KINDS;
    invalid UTF-8 only in a CSV, since Parquet strings cannot hold it.
    """
    if rows < 1:
        raise ValueError(f"rows must be at least 1, not {rows}")
    if not 0 <= dirty_fraction <= MAX_DIRTY_FRACTION:
        raise ValueError(
            f"dirty fraction must be in [0, {MAX_DIRTY_FRACTION}], not {dirty_fraction}"
        )
    suffix = output.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ValueError(f"{output}: the output must end in .csv or .parquet")
    kinds = tuple(k for k in DIRTY_KINDS if suffix == ".csv" or k not in CSV_ONLY_KINDS)
    classes_output = classes_output or output.with_name("classes.txt")

    output.parent.mkdir(parents=True, exist_ok=True)
    classes_output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    chunks = ledger_chunks(rows, seed, dirty_fraction, kinds, drifting)
    try:
        dirty = (_write_csv if suffix == ".csv" else _write_parquet)(chunks, tmp)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    codes = class_codes()
    if classes_output.suffix.lower() == ".csv":
        names = {account.code: account.name for account in parse_accounts()}
        chart_rows = pl.DataFrame({"code": codes, "name": [names[code] for code in codes]})
        chart_rows.write_csv(classes_output)
    else:
        classes_output.write_text("".join(f"{code}\n" for code in codes), encoding="utf-8")
    return LedgerSummary(
        output=str(output),
        classes_output=str(classes_output),
        rows=rows,
        classes=len(codes),
        classes_without_rows=int(np.count_nonzero(class_counts(rows) == 0)),
        seed=seed,
        dirty=dirty,
        drift={
            "opened_accounts": int(np.count_nonzero(drift().opening_day > FIRST_DAY)),
            "renamed_vendors": int(np.count_nonzero(drift().rename_day <= LAST_DAY)),
            "inflation_per_year": INFLATION_PER_YEAR,
        }
        if drifting
        else None,
    )
