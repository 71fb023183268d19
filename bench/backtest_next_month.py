"""Two variants of a finished backtest, their fine-tuned models compared on next month's records.

Each period's model (the one its run trained, whether or not it shipped) scores the period's own
records, which no model of that period trained on, so both variants are scored on the same
records: accuracy and macro-F1, with the paired bootstrap that evaluate uses, and the interval of
the difference. This is how a warm start is compared with a full retrain without the test
splits, which differ between the variants.

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


def interval(scores: dict[str, float]) -> str:
    return f"{scores['value']:.3f} [{scores['low']:.3f}, {scores['high']:.3f}]"


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
    print(f"period | records | {first}: accuracy, macro-F1 | {second}: the same | difference")
    for period in sorted(set(runs[first]) & set(runs[second])):
        config = yaml.safe_load((runs[first][period] / "config.yaml").read_text("utf-8"))
        label = config["data"]["columns"]["label"]
        records = pl.read_parquet(runs[first][period] / f"results/predict/{NEW_RECORDS}.parquet")
        texts, truth = records[TEXT].to_list(), records[label].cast(pl.String).to_list()
        models = {variant: trained_model(runs[variant][period]) for variant in args.variants}
        labels = sorted(set(truth).union(*(read_labels(m / LABEL_MAP) for m in models.values())))
        truth_index = np.array([labels.index(account) for account in truth])
        rows = {variant: scored(m, texts, truth_index, labels) for variant, m in models.items()}
        result = paired_bootstrap(truth_index, rows, len(labels), resamples=args.resamples)

        scores = result["models"]
        cells = [
            f"{scores[v]['accuracy']['value']:.1%}, {interval(scores[v]['macro_f1'])}"
            for v in args.variants
        ]
        difference = interval(result["difference"][first][second]["macro_f1"])
        print(f"{period} | {len(texts)} | {cells[0]} | {cells[1]} | {difference}")


if __name__ == "__main__":
    main()
