"""Two variants of a finished backtest, their fine-tuned models compared on next month's records.

Each period's model (the one its run trained, whether or not it shipped) scores the period's own
records, which no model of that period trained on, so both variants are scored on the same
records: accuracy and macro-F1, with the paired bootstrap that evaluate uses, and the interval of
the difference. This is how a warm start is compared with a full retrain without the test
splits, which differ between the variants. A last row pools every period after the first (where
a warm start and a full retrain still train the same model): a month of a small ledger holds
some 50 records, too few for an interval narrower than the differences that matter.

Several backtest folders, each a chain of the same stream (the same records replayed with
another seed, precision or machine), add a last line: the mean over the chains of the pooled
difference, with an interval that resamples the chains and the classes both. One chain's paired
interval resamples records only, while the next chain can land further away than that: a chain
of warm starts compounds small numeric differences.

Example: python bench/backtest_next_month.py results/backtest --variants warm loop
"""

import argparse
from pathlib import Path

import numpy as np
import polars as pl
import torch
import yaml

from account_tax.backtest.replay import NEW_RECORDS, trained_model
from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.serialize import TEXT
from account_tax.evaluation.bootstrap import ClassTotals, ScoredRows, paired_bootstrap
from account_tax.evaluation.metrics import TOP_K
from account_tax.training.inference import load_classifier, score_texts
from account_tax.training.temperature import softmax
from account_tax.training.training_info import read_training_info


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


def chain_difference(
    truth: np.ndarray,
    chains: list[dict[str, ScoredRows]],
    num_labels: int,
    *,
    resamples: int,
    seed: int = 13,
    level: float = 0.95,
) -> dict[str, float]:
    """The mean over chains of the first variant's macro-F1 minus the second's, all chains scored
    on the same records (`truth`). Each resample draws the chains with replacement and the
    classes present with replacement, one draw of the classes for all chains (they share the
    records); the interval is the percentile interval."""
    totals = [
        [ClassTotals.of(truth, scored, num_labels) for scored in rows.values()] for rows in chains
    ]

    def differences(draws: np.ndarray) -> np.ndarray:
        """[chains, resamples]: each chain's first minus second macro-F1 on each draw of classes."""
        return np.stack(
            [f.scores(draws)["macro_f1"] - s.scores(draws)["macro_f1"] for f, s in totals]
        )

    classes = len(totals[0][0].support)
    rng = np.random.default_rng(seed)
    point = differences(np.arange(classes)[None, :]).mean()
    per_chain = differences(rng.integers(0, classes, size=(resamples, classes)))
    chain_draws = rng.integers(0, len(chains), size=(resamples, len(chains)))
    means = per_chain[chain_draws, np.arange(resamples)[:, None]].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return {"value": float(point), "low": float(low), "high": float(high)}


def read_periods(backtest: Path, variants: list[str]) -> dict[str, tuple]:
    """Each period both variants ran: its records' texts and accounts, and each variant's model."""
    runs = {
        variant: {run.name: run for run in (backtest / variant / "runs").iterdir() if run.is_dir()}
        for variant in variants
    }
    first, second = variants
    periods = {}
    for period in sorted(set(runs[first]) & set(runs[second])):
        config = yaml.safe_load((runs[first][period] / "config.yaml").read_text("utf-8"))
        label = config["data"]["columns"]["label"]
        records = pl.read_parquet(runs[first][period] / f"results/predict/{NEW_RECORDS}.parquet")
        models = {variant: trained_model(runs[variant][period]) for variant in variants}
        periods[period] = (records[TEXT].to_list(), records[label].cast(pl.String), models)
    return periods


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "backtest",
        type=Path,
        nargs="+",
        help="the backtest's folder (results/backtest); several: chains of the same stream",
    )
    parser.add_argument("--variants", nargs=2, required=True, help="the two variants compared")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    first, second = args.variants
    chains = {backtest: read_periods(backtest, args.variants) for backtest in args.backtest}
    periods = next(iter(chains.values()))
    for backtest, other in chains.items():
        same = list(other) == list(periods) and all(
            other[p][0] == periods[p][0] and other[p][1].equals(periods[p][1]) for p in periods
        )
        if not same:
            raise SystemExit(f"{backtest}: not the same periods and records as {args.backtest[0]}")
    # One label list for every period and chain, so that the pooled rows share it.
    labels = sorted(
        set().union(
            *(truth for _, truth, _ in periods.values()),
            *(
                LabelMap.read(model / LABEL_MAP).labels
                for chain in chains.values()
                for *_, models in chain.values()
                for model in models.values()
            ),
        )
    )
    truths = {p: np.array([labels.index(account) for account in periods[p][1]]) for p in periods}
    later = list(periods)[1:]
    if not later:
        raise SystemExit(f"{args.backtest[0]}: one period; the first is trained alike in both")
    pooled_truth = np.concatenate([truths[period] for period in later])
    pooled_rows = []
    for backtest, chain in chains.items():
        print(backtest)
        print(f"period | records | {first}: accuracy, macro-F1 | {second}: the same | difference")
        rows = {}
        for period, (texts, _, models) in chain.items():
            rows[period] = {v: scored(m, texts, truths[period], labels) for v, m in models.items()}
            print(comparison(period, truths[period], rows[period], len(labels), args.resamples))
        pooled_rows.append({v: pooled([rows[p][v] for p in later]) for v in args.variants})
        if len(later) > 1:
            name = f"{later[0]} to {later[-1]}"
            print(comparison(name, pooled_truth, pooled_rows[-1], len(labels), args.resamples))
    if len(pooled_rows) > 1:
        difference = chain_difference(
            pooled_truth, pooled_rows, len(labels), resamples=args.resamples
        )
        print(
            f"mean over {len(pooled_rows)} chains, {later[0]} to {later[-1]} |"
            f" {len(pooled_truth)} | {first} - {second}: {interval(difference)}"
        )


if __name__ == "__main__":
    main()
