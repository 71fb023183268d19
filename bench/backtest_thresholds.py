"""Re-decide a finished backtest's periods with other auto-post rules: other confidence levels,
other novelty quantiles.

In each period's run the shipped candidate scores the period's validation split again, the rule
(`auto_threshold`, target `review.target_precision`) picks the threshold at each level on it and
the period's track record (as evaluate does; `--without-track-record`: on validation alone), and the
period's saved predictions say what that threshold posts (novel records stay in review), how
often the posted account is right, and how many wrong posts were records of accounts the
period's ledger had never booked (none in what its model trained on). With `--novelty-
quantiles`, the threshold at the period's own level stays and the novelty threshold is fitted
again at each quantile, as evaluate fits it (on the correct validation rows' similarity to their
nearest train record), and applied to the saved predictions' nearest similarities. The models
and their predictions are the backtest's own: only the decision changes, not what the ledger
held afterwards. The first column is what the backtest itself posted; `hindsight_posted` is what
the best threshold in hindsight would have posted at the target precision (the backtest's
`hindsight_auto_share`, for backtests made before it had that column).

Example: python bench/backtest_thresholds.py results/backtest --levels 0.95 0.9 0.8 0.5
         python bench/backtest_thresholds.py results/backtest --levels --novelty-quantiles 0 0.05
"""

import argparse
import json
from pathlib import Path

import numpy as np
import polars as pl
import yaml
from scipy.stats import binomtest

from account_tax.backtest.replay import (
    BASELINE_EVIDENCE,
    BASELINE_MODEL,
    EVALUATION,
    NEW_RECORDS,
    hindsight_auto_share,
    trained_model,
    trained_on,
)
from account_tax.data.serialize import ID, TEXT
from account_tax.data.spec import NOVEL
from account_tax.evaluation.evidence import NEAREST_SIMILARITY, is_novel, novelty_threshold
from account_tax.evaluation.predict import Candidate
from account_tax.evaluation.review import AUTO, DECISION, TrackRecord, auto_threshold, decisions
from account_tax.evaluation.shipped import read_shipped
from account_tax.evaluation.tables import CONFIDENCE, PREDICTED_LABEL

TRACK_RECORD = "results/correct/track_record.parquet"


def validation_scores(workdir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shipped candidate's confidence on each validation row, whether it was right, and its
    similarity to the nearest train record in the candidate's evidence space."""
    candidate = Candidate(
        trained_model(workdir),
        workdir / BASELINE_MODEL,
        read_shipped(workdir / EVALUATION),
        baseline_evidence=workdir / BASELINE_EVIDENCE,
    )
    validation = pl.read_parquet(workdir / "results/serialize/validation.parquet")
    scored = candidate.score(validation[TEXT].to_list())
    right = scored.probabilities.argmax(axis=1) == validation["label_id"].to_numpy()
    nearest = candidate.index.part("train").nearest(scored.vectors, 1).similarities[:, 0]
    return scored.probabilities.max(axis=1), right, nearest


def period_track_record(workdir: Path, config: dict) -> TrackRecord:
    """The track record the period's evaluate weighed: the correct stage's, with corrections,
    less the records of the period's validation and test splits."""
    if not config["data"]["corrections"]:
        return TrackRecord.read(None)
    scored = pl.concat(
        pl.read_parquet(workdir / f"results/serialize/{name}.parquet", columns=[ID])
        for name in ("validation", "test")
    )
    return TrackRecord.read(workdir / TRACK_RECORD, scored[ID])


def period_rows(
    workdir: Path, levels: list[float], quantiles: list[float], track_record: bool = True
) -> dict[str, object]:
    config = yaml.safe_load((workdir / "config.yaml").read_text("utf-8"))
    record = period_track_record(workdir, config) if track_record else TrackRecord.read(None)
    label = config["data"]["columns"]["label"]
    predictions = pl.read_parquet(workdir / f"results/predict/{NEW_RECORDS}.parquet")
    right = (predictions[PREDICTED_LABEL] == predictions[label]).to_numpy()
    # Records of accounts with no record in what the period's model trained on (the ledger and
    # its corrections), as the backtest's own table counts them.
    never_booked = ~predictions[label].is_in(sorted(trained_on(workdir))).to_numpy()
    confidence = predictions[CONFIDENCE].to_numpy()
    novel = predictions[NOVEL].to_numpy()
    posted = {"shipped": (predictions[DECISION] == AUTO).to_numpy()}
    validation_confidence, validation_right, validation_nearest = validation_scores(workdir)

    def evidence(quantile: float) -> tuple[float | None, tuple[np.ndarray, ...]]:
        """The novelty threshold at `quantile`, and what evaluate weighs with it: the validation
        rows that are not novel, and the track record."""
        similar = novelty_threshold(validation_nearest, validation_right, quantile)
        kept = ~is_novel(validation_nearest, similar)
        return similar, record.with_validation(validation_confidence[kept], validation_right[kept])

    target = config["review"]["target_precision"]
    _, configured = evidence(config["review"]["novelty_quantile"])
    for level in levels:
        threshold = auto_threshold(*configured, target, level)
        posted[str(level)] = decisions(confidence, threshold, novel) == AUTO
    for quantile in quantiles:
        similar, weighed = evidence(quantile)
        novel = is_novel(predictions[NEAREST_SIMILARITY].to_numpy(), similar)
        threshold = auto_threshold(*weighed, target, config["review"]["confidence_level"])
        posted[f"q{quantile}"] = decisions(confidence, threshold, novel) == AUTO
    hindsight = hindsight_auto_share(predictions, label, target)
    row: dict[str, object] = {
        "period": workdir.name,
        "rows": len(confidence),
        "hindsight_posted": round(hindsight * len(confidence)),
    }
    for name, mask in posted.items():
        row[f"{name}_posted"] = int(mask.sum())
        row[f"{name}_right"] = int((mask & right).sum())
        row[f"{name}_wrong_never_booked"] = int((mask & ~right & never_booked).sum())
    return row


def posted_summary(totals: dict[str, int], name: str) -> dict[str, object]:
    """A rule's posts over all periods: how many, their share of the records, how often they
    were right (with the exact 95 % interval), and the wrong ones of accounts never booked."""
    posted, right = totals[f"{name}_posted"], totals[f"{name}_right"]
    summary: dict[str, object] = {"posted": posted, "share": posted / totals["rows"]}
    summary["wrong_never_booked"] = totals[f"{name}_wrong_never_booked"]
    summary["precision"] = right / posted if posted else None
    if posted:
        interval = binomtest(right, posted).proportion_ci(0.95, method="exact")
        summary["precision_interval"] = [interval.low, interval.high]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("backtest", type=Path, help="the backtest's folder (results/backtest)")
    parser.add_argument("--levels", type=float, nargs="*", default=[0.95, 0.9, 0.8, 0.5])
    parser.add_argument(
        "--novelty-quantiles",
        type=float,
        nargs="*",
        default=[],
        help="novelty quantiles to re-decide with, at each period's own confidence level",
    )
    parser.add_argument(
        "--without-track-record",
        action="store_true",
        help="thresholds on the validation split alone, as before the track record",
    )
    args = parser.parse_args()
    pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200)
    summary = {}
    for variant in sorted(path for path in args.backtest.iterdir() if (path / "runs").is_dir()):
        runs = sorted(path for path in (variant / "runs").iterdir() if path.is_dir())
        table = pl.DataFrame(
            [
                period_rows(run, args.levels, args.novelty_quantiles, not args.without_track_record)
                for run in runs
            ]
        )
        print(f"{variant.name}\n{table}")
        totals = table.drop("period").sum().row(0, named=True)
        summary[variant.name] = {
            "hindsight": {
                "posted": totals["hindsight_posted"],
                "share": totals["hindsight_posted"] / totals["rows"],
            }
        } | {
            name: posted_summary(totals, name)
            for name in [
                "shipped",
                *map(str, args.levels),
                *(f"q{quantile}" for quantile in args.novelty_quantiles),
            ]
        }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
