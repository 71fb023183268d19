"""Write a SYNTHETIC accounting ledger: made-up records shaped like the real use case, for
testing and benchmarking the workflow at any size. Never real data, never the default input.

About 280 German/EU-style account codes (21 without any booking) with a Zipf-like imbalance;
the memo carries account-specific words, the vendor and noise. The same --rows and --seed give
a byte-identical file. Prints a JSON summary, with the number of dirty rows of each kind.

Example: python bench/make_ledger.py --rows 1000000 --output results/synthetic/ledger.csv
"""

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from synthetic_ledger import DIRTY_KINDS, MAX_DIRTY_FRACTION, generate_ledger


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def dirty_fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_DIRTY_FRACTION:
        raise argparse.ArgumentTypeError(f"must be in [0, {MAX_DIRTY_FRACTION}], not {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=positive_int, required=True, help="number of rows")
    parser.add_argument(
        "--output", type=Path, required=True, help="ledger to write: .csv or .parquet"
    )
    parser.add_argument(
        "--classes-output",
        type=Path,
        help="classes to write: a .txt list, one account code per line, or a .csv chart with "
        "each account's code and name (default: classes.txt beside --output)",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--dirty-fraction",
        type=dirty_fraction,
        default=0.0,
        help=f"share of rows spoiled on purpose, spread evenly over {', '.join(DIRTY_KINDS)} "
        "(invalid_utf8 in CSV only); default 0",
    )
    parser.add_argument(
        "--drift",
        action="store_true",
        help="a business that changes over the years: accounts opened mid-way, vendors renamed, "
        "inflation",
    )
    args = parser.parse_args()
    summary = generate_ledger(
        args.output,
        args.rows,
        seed=args.seed,
        dirty_fraction=args.dirty_fraction,
        classes_output=args.classes_output,
        drifting=args.drift,
    )
    print(json.dumps(asdict(summary), indent=2))


if __name__ == "__main__":
    main()
