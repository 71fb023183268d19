import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score

from account_tax.evaluation.metrics import TOP_K_ACCURACY, classification_metrics, top_k

LABELS = ["A", "B", "C", "D", "E"]


def one_hot_rows(rankings: list[list[int]], num_labels: int = len(LABELS)) -> np.ndarray:
    """Probabilities that rank the given label ids first, second, ... in each row."""
    probabilities = np.zeros((len(rankings), num_labels))
    for row, ranking in enumerate(rankings):
        for rank, label_id in enumerate(ranking):
            probabilities[row, label_id] = 0.5**rank
    return probabilities / probabilities.sum(axis=1, keepdims=True)


# Six samples: A A A B B C. D is predicted once but never true; E is neither.
Y_TRUE = np.array([0, 0, 0, 1, 1, 2])
PROBABILITIES = one_hot_rows(
    [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],  # A predicted as B, A second: a top-3 hit
        [1, 0, 2],
        [3, 0, 2, 1],  # B predicted as D, B fourth: a top-3 miss
        [2, 0, 1],
    ]
)


def plain_json_types(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain_json_types(v) for k, v in value.items())
    return value is None or type(value) in (int, float, bool, str)


def test_scores_match_hand_computed_values():
    metrics = classification_metrics(Y_TRUE, PROBABILITIES, LABELS)

    assert metrics["samples"] == 6
    assert metrics["accuracy"] == pytest.approx(4 / 6)
    # F1 per present class: A 2·2/(3+2) = 0.8, B 2·1/(2+2) = 0.5, C 2·1/(1+1) = 1.
    assert metrics["macro_f1"] == pytest.approx((0.8 + 0.5 + 1.0) / 3)
    assert metrics["weighted_f1"] == pytest.approx((3 * 0.8 + 2 * 0.5 + 1 * 1.0) / 6)
    assert metrics[TOP_K_ACCURACY] == pytest.approx(5 / 6)
    assert metrics["macro_f1_classes"] == 3
    assert metrics["classes_total"] == 5
    assert metrics["classes_predicted"] == 4


def test_every_class_is_listed_and_absent_ones_are_flagged():
    per_class = classification_metrics(Y_TRUE, PROBABILITIES, LABELS)["per_class"]

    assert list(per_class) == LABELS
    assert per_class["A"] == {
        "label_id": 0,
        "support": 3,
        "predicted": 2,
        "precision": 1.0,
        "recall": pytest.approx(2 / 3),
        "f1": pytest.approx(0.8),
        "zero_support": False,
    }
    # Predicted once, never true: precision 0, recall undefined, F1 0.
    assert per_class["D"] == {
        "label_id": 3,
        "support": 0,
        "predicted": 1,
        "precision": 0.0,
        "recall": None,
        "f1": 0.0,
        "zero_support": True,
    }
    # Neither true nor predicted: nothing is defined, but the class is still there.
    assert per_class["E"]["f1"] is None
    assert per_class["E"]["precision"] is None
    assert per_class["E"]["zero_support"] is True


def test_a_present_class_never_predicted_scores_f1_zero_and_counts_in_the_macro_mean():
    y_true = np.array([0, 0, 1])
    probabilities = one_hot_rows([[0], [0], [0]], num_labels=2)

    metrics = classification_metrics(y_true, probabilities, ["A", "B"])

    assert metrics["per_class"]["B"]["precision"] is None
    assert metrics["per_class"]["B"]["f1"] == 0.0
    # A: 2·2/(2+3) = 0.8; B: 0.
    assert metrics["macro_f1"] == pytest.approx(0.4)


def test_output_is_plain_json():
    metrics = classification_metrics(Y_TRUE, PROBABILITIES, LABELS)

    assert plain_json_types(metrics)
    assert json.loads(json.dumps(metrics)) == metrics


def test_an_empty_split_has_null_scores_and_every_class_without_support():
    metrics = classification_metrics(np.array([], dtype=np.int32), np.zeros((0, 5)), LABELS)

    assert metrics["samples"] == 0
    assert metrics["accuracy"] is None
    assert metrics["macro_f1"] is None
    assert metrics[TOP_K_ACCURACY] is None
    assert metrics["macro_f1_classes"] == 0
    assert all(entry["zero_support"] for entry in metrics["per_class"].values())
    assert json.loads(json.dumps(metrics)) == metrics


def test_ties_go_to_the_lowest_label_id():
    ids, probabilities = top_k(np.array([[0.25, 0.25, 0.25, 0.25]]), 3)

    assert ids.tolist() == [[0, 1, 2]]
    assert probabilities.tolist() == [[0.25, 0.25, 0.25]]
    metrics = classification_metrics(np.array([1]), np.full((1, 4), 0.25), ["A", "B", "C", "D"])
    assert metrics["per_class"]["A"]["predicted"] == 1


def test_inconsistent_inputs_are_rejected():
    with pytest.raises(ValueError, match=r"\[6, 4\]"):
        classification_metrics(Y_TRUE, PROBABILITIES, LABELS[:4])
    with pytest.raises(ValueError, match="label ids"):
        classification_metrics(np.array([0, 5]), np.full((2, 5), 0.2), LABELS)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=2, max_value=6).flatmap(
        lambda num_labels: st.tuples(
            st.just(num_labels),
            st.lists(
                st.tuples(
                    st.integers(0, num_labels - 1),
                    st.lists(
                        st.floats(0, 1, allow_nan=False), min_size=num_labels, max_size=num_labels
                    ),
                ),
                min_size=1,
                max_size=30,
            ),
        )
    )
)
def test_macro_and_weighted_f1_equal_sklearn_over_the_classes_present(case):
    num_labels, rows = case
    y_true = np.array([label for label, _ in rows])
    probabilities = np.array([scores for _, scores in rows])
    labels = [f"class {i}" for i in range(num_labels)]

    metrics = classification_metrics(y_true, probabilities, labels)

    predicted = probabilities.argmax(axis=1)
    present = np.unique(y_true)
    for average in ("macro", "weighted"):
        expected = f1_score(y_true, predicted, labels=present, average=average, zero_division=0)
        assert metrics[f"{average}_f1"] == pytest.approx(expected)
