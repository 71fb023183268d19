"""Re-decide a finished backtest's periods with the auto-post rule at other confidence levels.

In each period's run the shipped candidate scores the period's validation split again, the rule
(`auto_threshold`, target `review.target_precision`) picks the threshold at each level, and the
period's saved predictions say what that threshold posts (novel records stay in review) and how
often the posted account is right. The models and their predictions are the backtest's own: only
the decision changes, not what the ledger held afterwards. The first column is what the backtest
itself posted.

Example: python bench/backtest_thresholds.py results/backtest --levels 0.95 0.9 0.8 0.5
"""

import argparse
import json
from pathlib import Path

import numpy as np
import polars as pl
import yaml

from account_tax.backtest.replay import (
    BASELINE_EVIDENCE,
    BASELINE_MODEL,
    EVALUATION,
    NEW_RECORDS,
    trained_model,
)
from account_tax.data.serialize import TEXT
from account_tax.evaluation.evidence import NOVEL
from account_tax.evaluation.predict import Candidate
from account_tax.evaluation.review import AUTO, DECISION, auto_threshold, decisions
from account_tax.evaluation.shipped import read_shipped
from account_tax.evaluation.tables import CONFIDENCE, PREDICTED_LABEL


def validation_scores(workdir: Path) -> tuple[np.ndarray, np.ndarray]:
    """The shipped candidate's confidence on each validation row, and whether it was right."""
    candidate = Candidate(
        trained_model(workdir),
        workdir / BASELINE_MODEL,
        read_shipped(workdir / EVALUATION),
        baseline_evidence=workdir / BASELINE_EVIDENCE,
    )
    validation = pl.read_parquet(workdir / "results/serialize/validation.parquet")
    probabilities = candidate.probabilities(validation[TEXT].to_list())
    right = probabilities.argmax(axis=1) == validation["label_id"].to_numpy()
    return probabilities.max(axis=1), right


def period_rows(workdir: Path, levels: list[float]) -> dict[str, object]:
    config = yaml.safe_load((workdir / "config.yaml").read_text("utf-8"))
    label = config["data"]["columns"]["label"]
    predictions = pl.read_parquet(workdir / f"results/predict/{NEW_RECORDS}.parquet")
    right = (predictions[PREDICTED_LABEL] == predictions[label]).to_numpy()
    confidence = predictions[CONFIDENCE].to_numpy()
    novel = predictions[NOVEL].to_numpy()
    posted = {"shipped": (predictions[DECISION] == AUTO).to_numpy()}
    scores = validation_scores(workdir)
    for level in levels:
        threshold = auto_threshold(*scores, config["review"]["target_precision"], level)
        posted[str(level)] = decisions(confidence, threshold, novel) == AUTO
    row: dict[str, object] = {"period": workdir.name, "rows": len(confidence)}
    for name, mask in posted.items():
        row[f"{name}_posted"] = int(mask.sum())
        row[f"{name}_right"] = int((mask & right).sum())
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("backtest", type=Path, help="the backtest's folder (results/backtest)")
    parser.add_argument("--levels", type=float, nargs="+", default=[0.95, 0.9, 0.8, 0.5])
    args = parser.parse_args()
    pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200)
    summary = {}
    for variant in sorted(path for path in args.backtest.iterdir() if (path / "runs").is_dir()):
        runs = sorted(path for path in (variant / "runs").iterdir() if path.is_dir())
        table = pl.DataFrame([period_rows(run, args.levels) for run in runs])
        print(f"{variant.name}\n{table}")
        totals = table.drop("period").sum().row(0, named=True)
        summary[variant.name] = {
            name: {
                "posted": totals[f"{name}_posted"],
                "share": totals[f"{name}_posted"] / totals["rows"],
                "precision": totals[f"{name}_right"] / totals[f"{name}_posted"]
                if totals[f"{name}_posted"]
                else None,
            }
            for name in ["shipped", *map(str, args.levels)]
        }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
