"""Scores per level of the chart of accounts, on a hand-made three-level chart."""

import numpy as np
import pytest

from account_tax.evaluation.hierarchy import ancestor_table, hierarchy_metrics
from account_tax.evaluation.metrics import classification_metrics

# Assets A > A1 > {A11, A12}; expenses E > {E1 > {E11, E12}, E2 > E21, E3}; X alone at the top.
CHART = {
    "A": None,
    "A1": "A",
    "A11": "A1",
    "A12": "A1",
    "E": None,
    "E1": "E",
    "E11": "E1",
    "E12": "E1",
    "E2": "E",
    "E21": "E2",
    "E3": "E",
    "X": None,
}
LABELS, PARENTS = list(CHART), list(CHART.values())
# (true, predicted): right, same parent, same parent, same top, all wrong, right at depth 2,
# depth 2 for a depth 3, right at the top, a top account for an expense, depth 3 for depth 2.
ROWS = [
    ("A11", "A11"),
    ("A11", "A12"),
    ("E11", "E12"),
    ("E11", "E21"),
    ("E21", "A11"),
    ("E3", "E3"),
    ("E3", "E11"),
    ("X", "X"),
    ("X", "E3"),
    ("E12", "E3"),
]


def scored(rows):
    y_true = np.array([LABELS.index(t) for t, _ in rows], dtype=np.int64)
    predicted = np.array([LABELS.index(p) for _, p in rows], dtype=np.int64)
    probabilities = np.full((len(rows), len(LABELS)), 0.5 / len(LABELS))
    probabilities[np.arange(len(rows)), predicted] += 0.5
    return y_true, probabilities


def test_ancestors_at_each_level_with_shallow_accounts_staying_themselves():
    table = ancestor_table(LABELS, PARENTS)
    named = [[LABELS[i] for i in row] for row in table]
    assert named == [
        ["A", "A", "A", "A", "E", "E", "E", "E", "E", "E", "E", "X"],
        ["A", "A1", "A1", "A1", "E", "E1", "E1", "E1", "E2", "E2", "E3", "X"],
        LABELS,
    ]


def test_accuracy_macro_f1_per_level_and_right_parent_share_by_hand():
    y_true, probabilities = scored(ROWS)
    result = hierarchy_metrics(y_true, probabilities, LABELS, PARENTS)

    assert result["depth"] == 3
    top, middle, accounts = result["levels"]
    # Top: only E21 -> A11 and X -> E3 are wrong. F1: A 2·2/(2+3), E 2·5/(6+6), X 2·1/(2+1).
    assert top == {
        "level": 1,
        "accounts": 3,
        "accuracy": 0.8,
        "macro_f1": pytest.approx((4 / 5 + 10 / 12 + 2 / 3) / 3),
        "macro_f1_classes": 3,
    }
    # Level 2 right: A1, A1, E1, E3, X. F1: A1 4/5, E1 2/5, E2 0, E3 2/5, X 2/3.
    assert middle == {
        "level": 2,
        "accounts": 7,
        "accuracy": 0.5,
        "macro_f1": pytest.approx((4 / 5 + 2 / 5 + 0 + 2 / 5 + 2 / 3) / 5),
        "macro_f1_classes": 5,
    }
    flat = classification_metrics(y_true, probabilities, LABELS)
    assert accounts == {
        "level": 3,
        "accounts": 12,
        "accuracy": 0.3,
        "macro_f1": pytest.approx(flat["macro_f1"]),
        "macro_f1_classes": flat["macro_f1_classes"],
    }
    # Seven errors; A11 -> A12 and E11 -> E12 stay in their group. X -> E3 has no group.
    assert result["errors"] == 7
    assert result["right_parent_errors"] == 2
    assert result["right_parent_share"] == pytest.approx(2 / 7)


def test_no_rows_and_no_errors_leave_the_scores_and_share_undefined():
    y_true, probabilities = scored([])
    empty = hierarchy_metrics(y_true, probabilities, LABELS, PARENTS)
    assert [level["accuracy"] for level in empty["levels"]] == [None, None, None]
    assert empty["right_parent_share"] is None
    perfect = hierarchy_metrics(*scored(ROWS[:1]), LABELS, PARENTS)
    assert perfect["errors"] == 0
    assert perfect["right_parent_share"] is None


def test_a_cycle_in_a_hand_edited_label_map_is_refused():
    with pytest.raises(ValueError, match="the parents of 'a' form a cycle"):
        ancestor_table(["a", "b"], ["b", "a"])
