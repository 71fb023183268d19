"""The evaluation's decisions on synthetic scores: the mix of model and baseline, the candidate
that ships, and the verdict."""

import logging

import numpy as np
import polars as pl
import pytest

from account_tax.evaluation.assessment import (
    BASELINE,
    ENSEMBLE,
    MODEL,
    ReviewSettings,
    Scores,
    assess,
    compare,
    ensemble_scores,
    fit_mix_weight,
    verdict_text,
)
from account_tax.evaluation.evaluate import warn_nothing_posted
from account_tax.evaluation.review import TrackRecord
from account_tax.evaluation.shipped import ShippedCandidate
from account_tax.evaluation.tables import top_k_columns
from account_tax.training.temperature import fit_temperature, negative_log_likelihood

LABELS = [f"class {i}" for i in range(6)]
REVIEW = ReviewSettings.of(target_precision=0.9, confidence_level=0.95)


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


def candidates(model_accuracy: float, baseline_accuracy: float, seed: int, rows: int = 600):
    model, baseline = two_models(model_accuracy, baseline_accuracy, seed=seed, rows=rows)
    mixed, _ = ensemble_scores(model, baseline)
    scores = {MODEL: model, BASELINE: baseline, ENSEMBLE: mixed}
    reports = {name: assess(view, LABELS, REVIEW) for name, view in scores.items()}
    return scores, reports


def test_a_weaker_model_never_ships_and_the_text_says_what_does():
    scores, reports = candidates(0.6, 0.9, seed=2)
    comparison = compare(reports, scores, len(LABELS), resamples=300, seed=1)
    assert comparison["verdict"] == "worse"
    shipped = comparison["shipped"]
    assert shipped["candidate"] != MODEL
    if shipped["candidate"] == ENSEMBLE:
        # The mix ships only when validation shows it ahead of the baseline.
        assert shipped["validation_difference_from_baseline"][ENSEMBLE]["low"] > 0
    assert f"Predictions use the {shipped['candidate']} candidate" in verdict_text(comparison)


def test_a_clearly_better_candidate_ships_and_a_lead_within_the_noise_does_not():
    scores, reports = candidates(0.95, 0.6, seed=4)
    shipped = compare(reports, scores, len(LABELS), resamples=300, seed=1)["shipped"]
    best = max((MODEL, ENSEMBLE), key=lambda name: reports[name]["validation"]["macro_f1"])
    assert shipped["candidate"] == best
    assert "ahead of the baseline by" in shipped["why"]
    # Two models of the same quality: whichever leads on validation, the lead is noise.
    scores, reports = candidates(0.8, 0.8, seed=5, rows=200)
    comparison = compare(reports, scores, len(LABELS), resamples=300, seed=1)
    shipped = comparison["shipped"]
    assert shipped["candidate"] == BASELINE
    assert "no candidate is significantly better" in shipped["why"]
    # As evaluate writes it: the typed candidate, its verdict None (the baseline is not judged
    # against itself); the text names it and no verdict.
    typed = ShippedCandidate.from_dict(
        shipped
        | {
            "threshold": 0.5,
            "baseline_temperature": 1.0,
            "ensemble_weight": 0.5,
            "ensemble_temperature": 1.0,
        }
    )
    assert typed.verdict is None and typed.difference_from_baseline is None
    text = verdict_text(comparison | {"shipped": typed.to_dict()})
    assert "Predictions use the baseline candidate: no candidate is significantly" in text
    assert "Against the baseline on test" not in text


def test_an_empty_validation_split_ships_the_baseline():
    scores, reports = candidates(0.9, 0.6, seed=6)
    empty = {
        name: {
            "validation": Scores(np.empty((0, len(LABELS))), 1.0, np.empty(0, dtype=int)),
            "test": view["test"],
        }
        for name, view in scores.items()
    }
    for report in reports.values():
        report["validation"]["macro_f1"] = None
    shipped = compare(reports, empty, len(LABELS), resamples=100, seed=1)["shipped"]
    assert shipped["candidate"] == BASELINE


def perfect(rows: int) -> dict[str, Scores]:
    """Validation and test rows all right, each at the same confidence (0.97)."""
    y_true = np.arange(rows) % len(LABELS)
    logits = np.eye(len(LABELS))[y_true] * 5
    return {split: Scores(logits, 1.0, y_true) for split in ("validation", "test")}


def test_a_validation_split_too_small_for_the_target_posts_nothing_and_says_why(caplog):
    # At 0.9 and 0.95 a threshold needs 29 rows all right: 20 perfect rows are not enough.
    report = assess(perfect(20), LABELS, REVIEW)
    assert report["review"]["threshold"] is None
    assert report["review"]["rows_needed"] == 29
    with caplog.at_level(logging.WARNING):
        warn_nothing_posted(MODEL, report)
    assert "nothing will be posted automatically" in caplog.text
    assert "accuracy 1.000 on 20 validation rows, 0 reviewed suggestions" in caplog.text
    assert "at least 29 rows above it" in caplog.text
    # What the rows would support instead: all 20 right show 0.861 (0.05 ** (1/20)).
    assert report["review"]["highest_supported_target"]["coverage"] == 1.0
    assert "support a review.target_precision of 0.861 at most (posting 100.0% of them)" in (
        caplog.text
    )
    assert assess(perfect(29), LABELS, REVIEW)["review"]["threshold"] is not None
    # A target of 1 no count of rows can show: the warning says so, not a count.
    caplog.clear()
    certain = ReviewSettings.of(target_precision=1.0, confidence_level=0.95)
    report = assess(perfect(500), LABELS, certain)
    assert report["review"]["threshold"] is None and report["review"]["rows_needed"] is None
    with caplog.at_level(logging.WARNING):
        warn_nothing_posted(MODEL, report)
    assert "no count of rows can show a precision of 1" in caplog.text
    assert "support a review.target_precision of 0.994 at most" in caplog.text
    assert "None" not in caplog.text


def test_the_track_record_lets_a_small_validation_split_post(tmp_path):
    """20 validation rows cannot show 0.9 at 0.95 (29 needed); with reviewed suggestions that
    were right at that confidence they can, and the report says what the threshold would have
    posted of them. Novel suggestions are left out, and wrong ones above the threshold count
    against it."""
    confidence = float(perfect(1)["validation"].confidence_and_correct()[0][0])

    def track_record(right: list[bool], novel: list[bool], scored=None) -> TrackRecord:
        path = tmp_path / "track_record.parquet"
        pl.DataFrame(
            {
                "id": [f"r{i}" for i in range(len(right))],
                "confidence": [confidence] * len(right),
                "right": right,
                "novel": novel,
            }
        ).write_parquet(path)
        return TrackRecord.read(path, scored)

    reviewed = track_record([True] * 10 + [False] * 3, [False] * 10 + [True] * 3)
    report = assess(perfect(20), LABELS, REVIEW, track_record=reviewed)
    assert report["review"]["threshold"] == pytest.approx(confidence)
    assert report["review"]["track_record"] | {"threshold": None} == {
        "threshold": None,
        "rows": 10,
        "auto_rows": 10,
        "coverage": 1.0,
        "precision": 1.0,
    }
    # The same suggestions, three of them wrong and not novel: 27 of 33 right shows no 0.9.
    mixed = track_record([True] * 10 + [False] * 3, [False] * 13)
    assert assess(perfect(20), LABELS, REVIEW, track_record=mixed)["review"]["threshold"] is None
    # Reviewed records drawn into this run's validation or test split are not weighed again:
    # here the three wrong ones (r10 to r12) and one right one.
    scored = pl.Series(["r9", "r10", "r11", "r12", "elsewhere"])
    held_out = track_record([True] * 10 + [False] * 3, [False] * 13, scored)
    assert held_out.right.tolist() == [True] * 9
    report = assess(perfect(20), LABELS, REVIEW, track_record=held_out)
    assert report["review"]["track_record"]["rows"] == 9


def test_the_threshold_answers_for_the_rows_it_posts_and_novel_rows_are_never_posted():
    """29 validation rows all right show 0.9 at 0.95; with 3 of them novel, the 26 that may be
    posted do not, and no threshold may rest on the 3 that never will be."""
    validation = perfect(29)["validation"]
    novel = np.zeros(29, dtype=bool)
    novel[[0, 10, 20]] = True
    flagged = Scores(validation.logits, 1.0, validation.y_true, novel=novel)
    report = assess({"validation": flagged, "test": flagged}, LABELS, REVIEW)
    assert report["review"]["threshold"] is None
    assert report["review"]["highest_supported_target"]["target_precision"] == pytest.approx(
        0.05 ** (1 / 26), abs=1e-3
    )
    assert assess(perfect(29), LABELS, REVIEW)["review"]["threshold"] is not None


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


def test_an_account_that_takes_no_postings_is_never_in_the_top_k():
    """Even where predict.top_k exceeds the accounts that take postings: two of three here."""
    probabilities = Scores(
        noisy_logits(np.array([0, 2, 2]), 0.9, seed=1)[:, :3],
        1.0,
        np.array([0, 2, 2]),
        postable=np.array([True, False, True]),
    ).calibrated
    postable = np.array([True, False, True])
    columns = {s.name: s for s in top_k_columns(probabilities, 3, ["a", "g", "c"], postable)}
    assert [sorted(row) for row in columns["top_k_labels"].to_list()] == [["a", "c"]] * 3


def test_a_rows_top_k_is_as_long_whatever_rows_it_is_scored_with():
    """A confident row whose other accounts' probabilities underflow to 0 in float32 lists its
    k accounts alone as in a chunk of others: predict's shards and the served model agree."""
    confident = np.array([[1.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    other = np.array([[0.4, 0.3, 0.2, 0.1]], dtype=np.float32)
    postable = np.array([True, True, True, False])
    alone = top_k_columns(confident, 3, ["a", "b", "c", "g"], postable)
    together = top_k_columns(np.vstack([confident, other]), 3, ["a", "b", "c", "g"], postable)
    for one, both in zip(alone, together, strict=True):
        assert one.to_list()[0] == both.to_list()[0], one.name
    assert alone[4].to_list() == [["a", "b", "c"]]


def test_accounts_that_take_no_postings_get_no_probability_but_keep_their_rows():
    """A group's probability is shared out over the postable accounts: it is never the
    prediction and never in the top k, while its rows still count, as wrong, in the metrics."""
    y_true = np.array([0, 1, 2, 3] * 50)
    logits = noisy_logits(y_true, 0.9, seed=3)
    postable = np.array([True, False, True, True, True, True])
    view = Scores(logits, 1.5, y_true, postable=postable)
    assert (view.calibrated[:, 1] == 0).all() and (view.raw[:, 1] == 0).all()
    assert np.allclose(view.calibrated.sum(axis=1), 1.0)
    kept = Scores(logits, 1.5, y_true).calibrated
    ratio = view.calibrated[:, postable] / kept[:, postable]
    assert np.allclose(ratio, ratio[:, :1])  # the others keep their proportions
    report = assess({"validation": view, "test": view}, LABELS, REVIEW)
    assert report["test"]["per_class"][LABELS[1]]["support"] == 50
    assert report["test"]["per_class"][LABELS[1]]["recall"] == 0.0
    _, correct = view.confidence_and_correct()
    assert not correct[y_true == 1].any()
    ensemble, _ = ensemble_scores(
        {split: view for split in ("validation", "test")},
        {
            split: Scores(logits[::-1], 1.0, y_true, postable=postable)
            for split in ("validation", "test")
        },
    )
    assert (ensemble["test"].calibrated[:, 1] == 0).all()
