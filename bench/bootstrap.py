"""Bootstrap benchmark: the vectorised paired bootstrap against a per-resample loop with sklearn.

    python bench/bootstrap.py --rows 10000 100000 --resamples 1000 --repeats 3

Both sides score two models on the same synthetic test set (300 classes, 80 % accuracy) and give
the same four metrics per resample (accuracy, macro-F1 over the classes present in the resample,
top-3 accuracy, coverage at a threshold):

* ours: `account_tax.evaluation.bootstrap.paired_bootstrap` (chunks of resamples, per-class
  counts by one `bincount` over the chunk);
* loop: what one writes without it: for each resample, `rng.integers` indices, then
  `sklearn.metrics.f1_score(average="macro", labels=<present>)`, `accuracy_score` and the two
  means, model by model.

The loop side runs `--loop-resamples` resamples (default 50) and its time is scaled to
`--resamples` (it grows linearly), so the benchmark ends in minutes. Prints the median wall time
of each side and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from account_tax.evaluation.bootstrap import ScoredRows, paired_bootstrap

CLASSES = 300


def synthetic(rows: int, seed: int) -> tuple[np.ndarray, dict[str, ScoredRows]]:
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, CLASSES, rows)
    models = {}
    for name, accuracy in (("model", 0.8), ("baseline", 0.75)):
        right = rng.random(rows) < accuracy
        predicted = np.where(right, y_true, rng.integers(0, CLASSES, rows))
        models[name] = ScoredRows(
            predicted=predicted,
            top_k_hit=right | (rng.random(rows) < 0.5),
            confidence=rng.random(rows),
            threshold=0.7,
        )
    return y_true, models


def loop(y_true: np.ndarray, models: dict[str, ScoredRows], resamples: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = len(y_true)
    for _ in range(resamples):
        draws = rng.integers(0, n, n)
        truth = y_true[draws]
        present = np.unique(truth)
        for rows in models.values():
            predicted = rows.predicted[draws]
            accuracy_score(truth, predicted)
            f1_score(truth, predicted, average="macro", labels=present, zero_division=0)
            rows.top_k_hit[draws].mean()
            (rows.confidence[draws] >= rows.threshold).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--loop-resamples", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("rows\tours_s\tloop_s (scaled)\tratio")
    for rows in args.rows:
        y_true, models = synthetic(rows, seed=rows)
        ours, looped = [], []
        for repeat in range(args.repeats):
            started = time.perf_counter()
            paired_bootstrap(y_true, models, CLASSES, resamples=args.resamples, seed=repeat)
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            loop(y_true, models, args.loop_resamples, seed=repeat)
            scale = args.resamples / args.loop_resamples
            looped.append((time.perf_counter() - started) * scale)
        ours_s, loop_s = statistics.median(ours), statistics.median(looped)
        print(f"{rows}\t{ours_s:.2f}\t{loop_s:.1f}\t{loop_s / ours_s:.1f}x")


if __name__ == "__main__":
    main()
