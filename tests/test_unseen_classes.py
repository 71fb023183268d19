import numpy as np
import pytest

from account_tax.evaluation.unseen_classes import (
    nearest_class_scores,
    seen_class_macro_f1,
    unseen_class_metrics,
)


def test_unseen_class_metrics_on_a_hand_made_example():
    # Classes 2 and 3 have no training rows. Rows: truth 0, 2, 2, 3, 1.
    scores = np.array(
        [
            [0.7, 0.1, 0.1, 0.1],  # seen, right
            [0.1, 0.2, 0.6, 0.1],  # class 2: top-1
            [0.5, 0.3, 0.15, 0.05],  # class 2: third
            [0.4, 0.3, 0.2, 0.1],  # class 3: fourth
            [0.6, 0.3, 0.05, 0.05],  # seen, wrong
        ]
    )
    y_true = np.array([0, 2, 2, 3, 1])
    metrics = unseen_class_metrics(scores, y_true, np.array([2, 3]))
    assert metrics == {
        "rows": 3,
        "classes": 2,
        "top1": pytest.approx(1 / 3),
        "top3": pytest.approx(2 / 3),
        # Recall per class: 2 -> 1/2, 3 -> 0.
        "macro_recall": pytest.approx(0.25),
    }
    # Seen rows 0 and 4 (classes 0, 1), both predicted 0: F1 of class 0 is 2/3, of class 1 0.
    assert seen_class_macro_f1(scores, y_true, np.array([2, 3])) == pytest.approx(1 / 3)


def test_no_rows_of_unseen_classes_gives_none():
    metrics = unseen_class_metrics(np.eye(3), np.array([0, 1, 2]), np.array([], dtype=int))
    assert metrics["rows"] == 0 and metrics["top1"] is None and metrics["top3"] is None


def test_a_seen_row_predicted_as_an_unseen_class_is_an_error():
    scores = np.array([[0.2, 0.8], [0.9, 0.1]])
    assert seen_class_macro_f1(scores, np.array([0, 0]), np.array([1])) == pytest.approx(2 / 3)


def test_the_nearest_class_by_text_matches_words_and_word_parts():
    classes = ["Accounts Receivable", "Cash and Cash Equivalents", "Inventory", "Rent Expense"]
    texts = ["receivables from customers", "office rent for march", "cash at bank"]
    scores = nearest_class_scores(classes, texts)
    assert scores.shape == (3, 4)
    assert scores.argmax(axis=1).tolist() == [0, 3, 1]
