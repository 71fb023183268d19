"""The evaluation's decisions on synthetic scores: the mix of model and baseline, the candidate
that ships, and the verdict."""

import numpy as np
import pytest

from account_tax.calibration import fit_temperature, negative_log_likelihood
from account_tax.evaluation import (
    BASELINE,
    ENSEMBLE,
    MODEL,
    ReviewSettings,
    Scores,
    assess,
    choose_candidate,
    compare,
    ensemble_scores,
    fit_mix_weight,
    verdict_text,
)

LABELS = [f"class {i}" for i in range(6)]
REVIEW = ReviewSettings(target_precision=0.9, min_rows=20)


def noisy_logits(y_true: np.ndarray, accuracy: float, seed: int) -> np.ndarray:
    """Logits whose argmax is right about `accuracy` of the time."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1, (len(y_true), len(LABELS)))
    right = rng.random(len(y_true)) < accuracy
    wrong = (y_true + rng.integers(1, len(LABELS), len(y_true))) % len(LABELS)
    logits[np.arange(len(y_true)), np.where(right, y_true, wrong)] += 4
    return logits


def two_models(accuracy_a: float, accuracy_b: float, seed: int, rows: int = 600):
    """Two models' scores on the same validation and test rows."""
    rng = np.random.default_rng(seed)
    truth = {split: rng.integers(0, len(LABELS), rows) for split in ("validation", "test")}
    return [
        {
            split: Scores(noisy_logits(y, accuracy, seed + 10 * m + i), 1.0, y)
            for i, (split, y) in enumerate(truth.items())
        }
        for m, accuracy in enumerate((accuracy_a, accuracy_b))
    ]


def test_mix_weight_leans_on_the_better_model_and_never_hurts_validation_nll():
    model, weak = two_models(0.9, 0.5, seed=1)
    assert fit_mix_weight(model["validation"], weak["validation"]) > 0.7
    assert fit_mix_weight(weak["validation"], model["validation"]) < 0.3
    mixed, _ = ensemble_scores(model, weak)
    validation = mixed["validation"]
    nll = negative_log_likelihood(validation.calibrated, validation.y_true)
    for single in (model, weak):
        view = single["validation"]
        assert nll <= negative_log_likelihood(view.calibrated, view.y_true) + 1e-9


def test_the_candidate_that_ships_is_the_best_on_validation():
    model, baseline = two_models(0.6, 0.9, seed=2)
    mixed, _ = ensemble_scores(model, baseline)
    reports = {
        MODEL: assess(model, LABELS, REVIEW),
        BASELINE: assess(baseline, LABELS, REVIEW),
        ENSEMBLE: assess(mixed, LABELS, REVIEW),
    }
    chosen = choose_candidate(reports)
    best = max(reports, key=lambda name: reports[name]["validation"]["macro_f1"])
    assert chosen["candidate"] == best != MODEL
    assert "best validation macro_f1" in chosen["why"]
    comparison = compare(
        reports,
        {MODEL: model["test"], BASELINE: baseline["test"], ENSEMBLE: mixed["test"]},
        len(LABELS),
        resamples=300,
        seed=1,
    )
    # The weak fine-tuned model loses to the baseline, and the text says what ships instead.
    assert comparison["verdict"] == "worse"
    assert comparison["shipped"]["candidate"] == best
    assert f"Predictions use the {best} candidate" in verdict_text(comparison)


def test_an_empty_validation_split_ships_the_fine_tuned_model():
    reports = {name: {"validation": {"macro_f1": None}} for name in (MODEL, BASELINE, ENSEMBLE)}
    assert choose_candidate(reports)["candidate"] == MODEL


def test_assess_reports_calibration_before_and_after_the_temperature():
    model, _ = two_models(0.7, 0.7, seed=3)
    overconfident = {
        split: Scores(view.logits * 5, 1.0, view.y_true) for split, view in model.items()
    }
    temperature = fit_temperature(overconfident["validation"].logits, model["validation"].y_true)
    calibrated = {
        split: Scores(view.logits, temperature, view.y_true)
        for split, view in overconfident.items()
    }
    report = assess(calibrated, LABELS, REVIEW)
    test = report["test"]["calibration"]
    assert test["after"]["ece"] < test["before"]["ece"]
    assert test["after"]["nll"] < test["before"]["nll"]
    assert report["temperature"] == temperature > 1
    # The accuracy is the same before and after: the temperature never changes the top class.
    assert report["test"]["accuracy"] == pytest.approx(
        (overconfident["test"].logits.argmax(axis=1) == model["test"].y_true).mean()
    )
