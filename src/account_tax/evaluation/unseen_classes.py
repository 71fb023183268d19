"""Accounts never seen in training: how a candidate ranks them on test, beside the seen ones.

The comparator needs no training at all: the nearest class by TF-IDF cosine between the record's
text and each class's text (`name: description`), the account a clerk would find by searching the
chart of accounts for the record's words.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import f1_score
from sklearn.metrics.pairwise import cosine_similarity
from sklearn.pipeline import make_union

from account_tax.evaluation.metrics import top_k

COMPARATOR = "tfidf_nearest_class"


def nearest_class_scores(class_texts: list[str], texts: list[str]) -> np.ndarray:
    """[len(texts), len(class_texts)] TF-IDF cosines of word and character n-grams (the
    character ones match word parts: "receivable" in "receivables")."""
    vectorizer = make_union(
        TfidfVectorizer(sublinear_tf=True),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True),
    )
    classes = vectorizer.fit_transform(class_texts)
    return cosine_similarity(vectorizer.transform(texts), classes)


def unseen_class_metrics(
    scores: np.ndarray, y_true: np.ndarray, unseen_classes: np.ndarray
) -> dict[str, Any]:
    """Top-1 and top-3 accuracy over the rows of classes without training rows (ranked among all
    classes), and their recall averaged over those classes; None where there are no such rows."""
    rows = np.isin(y_true, unseen_classes)
    if not rows.any():
        return {"rows": 0, "classes": 0, "top1": None, "top3": None, "macro_recall": None}
    ranked, _ = top_k(scores[rows], 3)
    truth = y_true[rows]
    hit1 = ranked[:, 0] == truth
    present = np.unique(truth)
    return {
        "rows": int(rows.sum()),
        "classes": len(present),
        "top1": float(hit1.mean()),
        "top3": float((ranked == truth[:, None]).any(axis=1).mean()),
        "macro_recall": float(np.mean([hit1[truth == c].mean() for c in present])),
    }


def seen_class_macro_f1(
    scores: np.ndarray, y_true: np.ndarray, unseen_classes: np.ndarray
) -> float | None:
    """Macro-F1 over the rows and classes seen in training; predicting an unseen class for such
    a row counts as an error."""
    rows = ~np.isin(y_true, unseen_classes)
    if not rows.any():
        return None
    truth = y_true[rows]
    return float(
        f1_score(truth, scores[rows].argmax(axis=1), labels=np.unique(truth), average="macro")
    )
