"""Two variants of a finished backtest, their fine-tuned models compared on next month's records.

Each period's model (the one its run trained, whether or not it shipped) scores the period's own
records, which no model of that period trained on, so both variants are scored on the same
records: accuracy and macro-F1, with the paired bootstrap that evaluate uses, and the interval of
the difference. This is how a warm start is compared with a full retrain without the test
splits, which differ between the variants. A last row pools every period after the first (where
a warm start and a full retrain still train the same model): a month of a small ledger holds
some 50 records, too few for an interval narrower than the differences that matter.

Example: python bench/backtest_next_month.py results/backtest --variants warm loop
"""

import argparse
from pathlib import Path

import numpy as np
import polars as pl
import torch
import yaml

from account_tax.backtest.replay import NEW_RECORDS, trained_model
from account_tax.data.features import LABEL_MAP
from account_tax.data.serialize import TEXT, read_labels
from account_tax.evaluation.bootstrap import ScoredRows, paired_bootstrap
from account_tax.evaluation.metrics import TOP_K
from account_tax.training.inference import load_classifier, score_texts
from account_tax.training.model import read_training_info
from account_tax.training.temperature import softmax


def scored(model_dir: Path, texts: list[str], truth: np.ndarray, labels: list[str]) -> ScoredRows:
    """The model's predictions of `texts` as indices into `labels` (every account either model
    or the records know), as `truth` is."""
    model, tokenizer, own_labels = load_classifier(model_dir, "cpu", torch.float32)
    max_length = read_training_info(model_dir)["settings"]["max_length"]
    logits, _ = score_texts(model, tokenizer, texts, 64, max_length)
    index = np.array([labels.index(label) for label in own_labels])
    top_k = index[np.argsort(-logits, axis=1)[:, :TOP_K]]
    return ScoredRows(
        predicted=top_k[:, 0],
        top_k_hit=(top_k == truth[:, None]).any(axis=1),
        confidence=softmax(logits).max(axis=1),
        threshold=None,
    )


def pooled(parts: list[ScoredRows]) -> ScoredRows:
    """Several periods' predictions as one set of rows."""
    return ScoredRows(
        predicted=np.concatenate([part.predicted for part in parts]),
        top_k_hit=np.concatenate([part.top_k_hit for part in parts]),
        confidence=np.concatenate([part.confidence for part in parts]),
        threshold=None,
    )


def interval(scores: dict[str, float]) -> str:
    return f"{scores['value']:.3f} [{scores['low']:.3f}, {scores['high']:.3f}]"


def comparison(
    name: str,
    truth: np.ndarray,
    rows: dict[str, ScoredRows],
    num_labels: int,
    resamples: int,
) -> str:
    """One line of the table: each variant's accuracy and macro-F1, and the interval of the
    first's macro-F1 minus the second's."""
    first, second = rows
    result = paired_bootstrap(truth, rows, num_labels, resamples=resamples)
    scores = result["models"]
    cells = [
        f"{scores[v]['accuracy']['value']:.1%}, {interval(scores[v]['macro_f1'])}" for v in rows
    ]
    difference = interval(result["difference"][first][second]["macro_f1"])
    return f"{name} | {len(truth)} | {cells[0]} | {cells[1]} | {difference}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backtest", type=Path, help="the backtest's folder (results/backtest)")
    parser.add_argument("--variants", nargs=2, required=True, help="the two variants compared")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    first, second = args.variants
    runs = {
        variant: {
            run.name: run for run in (args.backtest / variant / "runs").iterdir() if run.is_dir()
        }
        for variant in args.variants
    }
    periods = {}
    for period in sorted(set(runs[first]) & set(runs[second])):
        config = yaml.safe_load((runs[first][period] / "config.yaml").read_text("utf-8"))
        label = config["data"]["columns"]["label"]
        records = pl.read_parquet(runs[first][period] / f"results/predict/{NEW_RECORDS}.parquet")
        models = {variant: trained_model(runs[variant][period]) for variant in args.variants}
        periods[period] = (records[TEXT].to_list(), records[label].cast(pl.String), models)
    # One label list for every period, so that the pooled rows share it.
    labels = sorted(
        set().union(
            *(truth for _, truth, _ in periods.values()),
            *(read_labels(m / LABEL_MAP) for *_, ms in periods.values() for m in ms.values()),
        )
    )
    print(f"period | records | {first}: accuracy, macro-F1 | {second}: the same | difference")
    truths, rows = {}, {}
    for period, (texts, truth, models) in periods.items():
        truths[period] = np.array([labels.index(account) for account in truth])
        rows[period] = {v: scored(m, texts, truths[period], labels) for v, m in models.items()}
        print(comparison(period, truths[period], rows[period], len(labels), args.resamples))
    later = list(periods)[1:]
    if len(later) > 1:
        truth = np.concatenate([truths[period] for period in later])
        parts = {v: pooled([rows[period][v] for period in later]) for v in args.variants}
        print(comparison(f"{later[0]} to {later[-1]}", truth, parts, len(labels), args.resamples))


if __name__ == "__main__":
    main()
