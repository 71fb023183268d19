"""The evidence behind a suggestion, and the records unlike anything seen.

For every predicted record: its k nearest training records in the shipped candidate's index
(`account_tax.training.evidence`; the fine-tuned model's for it and the mix, the TF-IDF one for
the baseline) with their ids, texts, accounts and similarities, and the share of them booked to
the suggested account. Where the baseline takes part, also the n-grams of the record that weigh
most for the suggested account in its linear model.

A record whose nearest training record is less similar than the correct predictions of
validation allow (`novelty_threshold`) is `novel`: nothing like it was seen, so its confidence
says little, and it is never posted automatically.
"""

from __future__ import annotations

import html

import numpy as np
import polars as pl
import scipy.sparse
from sklearn.pipeline import Pipeline

from account_tax.data.serialize import ID, TEXT
from account_tax.data.spec import NOVEL
from account_tax.evaluation.assessment import BASELINE, ENSEMBLE, MODEL
from account_tax.evaluation.review import DECISION, REVIEW
from account_tax.evaluation.tables import CONFIDENCE, LABEL, PREDICTED_LABEL
from account_tax.training.evidence import ACCOUNT, EvidenceIndex, Neighbours, indexed_records

EVIDENCE_IDS = "evidence_ids"
EVIDENCE_TEXTS = "evidence_texts"
EVIDENCE_ACCOUNTS = "evidence_accounts"
EVIDENCE_SIMILARITIES = "evidence_similarities"
EVIDENCE_AGREEMENT = "evidence_agreement"
NEAREST_SIMILARITY = "nearest_similarity"
WEIGHING_NGRAMS = "weighing_ngrams"
EVIDENCE_COLUMNS = (
    EVIDENCE_IDS,
    EVIDENCE_TEXTS,
    EVIDENCE_ACCOUNTS,
    EVIDENCE_SIMILARITIES,
    EVIDENCE_AGREEMENT,
    NEAREST_SIMILARITY,
    NOVEL,
    WEIGHING_NGRAMS,
)
NGRAMS = 3
"""N-grams shown per suggestion of the baseline."""
EVIDENCE_SPACE = {MODEL: MODEL, ENSEMBLE: MODEL, BASELINE: BASELINE}
"""Whose index a candidate's evidence comes from: the mix's from the fine-tuned model's, which
places a record by what it means rather than by its letters."""
EXAMPLES = 5
"""Reviewed test rows the report shows with their evidence."""


def baseline_features(pipeline: Pipeline, texts: list[str]) -> scipy.sparse.csr_matrix:
    """The baseline's TF-IDF rows of the texts (what its classifier reads)."""
    features = pipeline.named_steps["features"]
    if not texts:  # which scikit-learn refuses to transform
        return scipy.sparse.csr_matrix((0, len(features.get_feature_names_out())))
    return features.transform(texts).tocsr()


def build_baseline_index(pipeline: Pipeline, splits: dict, labels: list[str]) -> EvidenceIndex:
    """The records of the splits in the baseline's TF-IDF space."""
    records = indexed_records(splits, labels)
    return EvidenceIndex(baseline_features(pipeline, records[TEXT].to_list()), records)


def weighing_ngrams(
    pipeline: Pipeline, features: scipy.sparse.csr_matrix, predicted: np.ndarray, n: int = NGRAMS
) -> list[list[str]]:
    """Per row, the n-grams whose TF-IDF weight times the suggested class's coefficient is
    largest (and positive), none overlapping another: what speaks for the suggestion in the
    baseline. Empty for a class the baseline never saw."""
    classifier = pipeline.named_steps["classifier"]
    names = pipeline.named_steps["features"].get_feature_names_out()
    coefficients = classifier.coef_
    if len(classifier.classes_) == 2:
        # A classifier of two classes keeps one row, for the second; the first's is its negative.
        coefficients = np.vstack([-coefficients[0], coefficients[0]])
    position = {int(label): row for row, label in enumerate(classifier.classes_)}
    result = []
    for row, label in enumerate(predicted):
        start, end = features.indptr[row], features.indptr[row + 1]
        if int(label) not in position or start == end:
            result.append([])
            continue
        columns = features.indices[start:end]
        weights = features.data[start:end] * coefficients[position[int(label)], columns]
        ngrams: list[str] = []
        for at in np.argsort(-weights, kind="stable"):
            if len(ngrams) == n or weights[at] <= 0:
                break
            # `word__office supplies`, `char__ pap`: the n-gram without its vectorizer's name.
            text = str(names[columns[at]]).split("__", 1)[1].strip()
            # Overlapping n-grams ("staples", "vendor staples", "aples") say the same thing once.
            if text and not any(text in shown or shown in text for shown in ngrams):
                ngrams.append(text)
        result.append(ngrams)
    return result


def novelty_threshold(
    nearest_similarity: np.ndarray, correct: np.ndarray, quantile: float
) -> float | None:
    """The similarity to the nearest training record below which a record is novel: the given
    quantile of that similarity over the correctly predicted validation rows. None (nothing is
    novel) without such rows."""
    right = np.asarray(nearest_similarity, dtype=np.float64)[np.asarray(correct, dtype=bool)]
    return float(np.quantile(right, quantile)) if len(right) else None


def is_novel(nearest_similarity: np.ndarray, threshold: float | None) -> np.ndarray:
    if threshold is None:
        return np.zeros(len(nearest_similarity), dtype=bool)
    # In float64, as `review.decisions` compares a confidence with its threshold.
    return np.asarray(nearest_similarity, dtype=np.float64) < threshold


def evidence_columns(
    index: EvidenceIndex,
    neighbours: Neighbours,
    predicted_labels: list[str],
    threshold: float | None,
    ngrams: list[list[str]] | None = None,
) -> list[pl.Series]:
    """The evidence columns (`EVIDENCE_COLUMNS`) of predicted rows, given their neighbours."""
    rows, similarities = neighbours
    picked = index.records[rows.ravel()]
    k = rows.shape[1]

    def per_row(column: str, dtype: pl.DataType) -> pl.Series:
        values = picked[column].to_list()
        return pl.Series([values[i * k : (i + 1) * k] for i in range(len(rows))], dtype=dtype)

    accounts = np.asarray(picked[ACCOUNT].to_list(), dtype=object).reshape(rows.shape)
    agreement = (
        (accounts == np.asarray(predicted_labels, dtype=object)[:, None]).mean(axis=1)
        if k
        else np.full(len(rows), np.nan)
    )
    nearest = similarities[:, 0] if k else np.full(len(rows), -1.0, dtype=np.float32)
    return [
        per_row(ID, pl.List(pl.String)).alias(EVIDENCE_IDS),
        per_row(TEXT, pl.List(pl.String)).alias(EVIDENCE_TEXTS),
        per_row(ACCOUNT, pl.List(pl.String)).alias(EVIDENCE_ACCOUNTS),
        pl.Series(EVIDENCE_SIMILARITIES, similarities).cast(pl.List(pl.Float32)),
        pl.Series(EVIDENCE_AGREEMENT, agreement, dtype=pl.Float32),
        pl.Series(NEAREST_SIMILARITY, nearest, dtype=pl.Float32),
        pl.Series(NOVEL, is_novel(nearest, threshold), dtype=pl.Boolean),
        pl.Series(WEIGHING_NGRAMS, ngrams if ngrams is not None else [[]] * len(rows)).cast(
            pl.List(pl.String)
        ),
    ]


def evidence_html(test: pl.DataFrame, rows: int = EXAMPLES) -> str:
    """A few of the test rows sent to review, spread over their confidence, each with the
    suggestion, the true account and the nearest training records: what a reviewer sees."""
    reviewed = test.filter(pl.col(DECISION) == REVIEW).sort(CONFIDENCE)
    if not reviewed.height:
        return ""
    picked = reviewed[np.unique(np.linspace(0, reviewed.height - 1, rows).round().astype(int))]
    parts = [
        "<h3>Reviewed test rows and their evidence</h3>",
        "<p>A spread of the test rows sent to review, least confident first: the suggestion, "
        "the account it really has, and the nearest training records behind the suggestion.</p>",
    ]
    for row in picked.iter_rows(named=True):
        flag = " <strong>novel: unlike any training record</strong>" if row[NOVEL] else ""
        ngrams = ", ".join(row[WEIGHING_NGRAMS])
        parts.append(
            f"<p><code>{html.escape(row[TEXT])}</code><br>suggested "
            f"<strong>{html.escape(row[PREDICTED_LABEL])}</strong> (confidence "
            f"{row[CONFIDENCE]:.2f}), true account {html.escape(str(row[LABEL]))}; "
            f"{row[EVIDENCE_AGREEMENT]:.0%} of its neighbours agree{flag}"
            + (f"; n-grams for it: {html.escape(ngrams)}" if ngrams else "")
            + "</p><table border='1' cellpadding='3'><tr><th>similarity</th><th>account</th>"
            "<th>training record</th></tr>"
        )
        for similarity, account, text in zip(
            row[EVIDENCE_SIMILARITIES], row[EVIDENCE_ACCOUNTS], row[EVIDENCE_TEXTS], strict=True
        ):
            parts.append(
                f"<tr><td>{similarity:.3f}</td><td>{html.escape(account)}</td>"
                f"<td><code>{html.escape(text)}</code></td></tr>"
            )
        parts.append("</table>")
    return "".join(parts)
