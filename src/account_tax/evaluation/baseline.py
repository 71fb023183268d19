"""Baseline: TF-IDF of word and character n-grams with a linear classifier.

The number the fine-tuned transformer has to beat. Trained on the train split, scored on
validation and test with the same metrics as the transformer (`account_tax.evaluation.metrics`).

The classifier is `SGDClassifier(loss="log_loss")`: one-vs-rest logistic regression fitted by
SGD. It gives probabilities (for top-k), and its cost grows linearly with rows and classes: on
the 2,300-row, 235-class default data it fits in about 30 s on one thread of a busy 2-core
machine (16 s on two), 20,000 rows in about 95 s on two. Multinomial `LogisticRegression` took
as long with lbfgs and scored lower; with saga it took several times longer.
The `baseline` section of `config.schema.yaml` documents the settings and holds their defaults.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import SGDClassifier
from sklearn.pipeline import FeatureUnion, Pipeline

from account_tax.data.label_map import LabelMap
from account_tax.data.serialize import LABEL_ID, TEXT, read_split
from account_tax.errors import DataError
from account_tax.evaluation.evidence import build_baseline_index
from account_tax.evaluation.metrics import TOP_K_ACCURACY, classification_metrics
from account_tax.evaluation.tables import predictions_frame
from account_tax.io import write_json, write_parquet
from account_tax.settings import SectionView
from account_tax.training.temperature import fit_temperature, log_probabilities, softmax

log = logging.getLogger(__name__)

HEADLINE_METRICS = ("accuracy", "macro_f1", "weighted_f1", TOP_K_ACCURACY)


@dataclass(frozen=True)
class BaselineSettings(SectionView):
    SECTION = "baseline"
    word_ngram_range: tuple[int, int]
    char_ngram_range: tuple[int, int]
    min_df: int
    # Per vectorizer. Bounds the classes-by-features coefficient matrix (model size and memory)
    # on large data; small data has fewer features anyway.
    max_features: int | None
    alpha: float
    max_iter: int
    class_weight: str | None
    top_k: int
    seed: int


@dataclass(frozen=True)
class BaselinePaths:
    train: Path
    validation: Path
    test: Path
    label_map: Path
    model: Path
    metrics: Path
    predictions: Path
    evidence: Path


def build_pipeline(settings: BaselineSettings, threads: int = 1) -> Pipeline:
    """Word 1-2-grams (whole terms) beside char_wb 2-5-grams (word pieces, misspellings,
    abbreviations), both TF-IDF with sublinear tf, into one linear classifier."""

    def tfidf(analyzer: str, ngram_range: tuple[int, int]) -> TfidfVectorizer:
        return TfidfVectorizer(
            analyzer=analyzer,
            ngram_range=ngram_range,
            sublinear_tf=True,
            min_df=settings.min_df,
            max_features=settings.max_features,
        )

    features = FeatureUnion(
        [
            ("word", tfidf("word", settings.word_ngram_range)),
            ("char", tfidf("char_wb", settings.char_ngram_range)),
        ]
    )
    # One binary problem per class, run on `threads` threads; each gets its own seed drawn from
    # `random_state`, so the model does not depend on the thread count.
    classifier = SGDClassifier(
        loss="log_loss",
        alpha=settings.alpha,
        max_iter=settings.max_iter,
        class_weight=settings.class_weight,
        random_state=settings.seed,
        n_jobs=threads,
    )
    return Pipeline([("features", features), ("classifier", classifier)])


def without_process_state(pipeline: Pipeline) -> Pipeline:
    """`pipeline` without what ties it to the job that fitted it, so that one fit is the same
    bytes in every run and on any thread count: the classifier's thread count (a job resource),
    and each vectorizer's id() of its stop-word list (a memory address, kept to skip checking
    the list again; the check runs anew on the next transform)."""
    pipeline.named_steps["classifier"].set_params(n_jobs=None)
    for _, vectorizer in pipeline.named_steps["features"].transformer_list:
        vars(vectorizer).pop("_stop_words_id", None)
    return pipeline


def predict_probabilities(pipeline: Pipeline, texts: list[str], num_labels: int) -> np.ndarray:
    """[len(texts), num_labels] probabilities over the whole label map.

    The classifier only knows the classes it saw in train; the others get probability 0.
    """
    if not texts:
        return np.zeros((0, num_labels))
    return classifier_probabilities(
        pipeline, pipeline.named_steps["features"].transform(texts), num_labels
    )


def classifier_probabilities(pipeline: Pipeline, features: Any, num_labels: int) -> np.ndarray:
    """`predict_probabilities` of texts already turned into the pipeline's TF-IDF rows."""
    probabilities = np.zeros((features.shape[0], num_labels))
    if features.shape[0]:
        probabilities[:, pipeline.classes_] = pipeline.named_steps["classifier"].predict_proba(
            features
        )
    return probabilities


def baseline_logits(pipeline: Pipeline, texts: list[str], num_labels: int) -> np.ndarray:
    """The baseline's scores as logits (log-probabilities), for temperature scaling."""
    return log_probabilities(predict_probabilities(pipeline, texts, num_labels))


def classifier_logits(pipeline: Pipeline, features: Any, num_labels: int) -> np.ndarray:
    """`baseline_logits` of texts already turned into the pipeline's TF-IDF rows."""
    return log_probabilities(classifier_probabilities(pipeline, features, num_labels))


def train_baseline(
    paths: BaselinePaths, settings: BaselineSettings, threads: int = 1
) -> dict[str, Any]:
    """Fit on train, score validation and test, write model, metrics and test predictions,
    and the evidence index of the train and validation records in TF-IDF space.

    Returns the metrics report: `validation` and `test` (see `classification_metrics`),
    `train_seconds` (vectorizers and classifier), and what was trained on.
    """
    label_map = LabelMap.read(paths.label_map)
    labels = label_map.labels
    train, validation, test = (
        read_split(path, len(labels)) for path in (paths.train, paths.validation, paths.test)
    )
    classes_in_train = train[LABEL_ID].n_unique()
    if classes_in_train < 2:
        raise DataError(f"{paths.train}: a classifier needs at least 2 classes in train")

    pipeline = build_pipeline(settings, threads)
    started = time.perf_counter()
    pipeline.fit(train[TEXT].to_list(), train[LABEL_ID].to_numpy())
    train_seconds = time.perf_counter() - started
    features = len(pipeline.named_steps["features"].get_feature_names_out())
    log.info(
        "baseline: fitted on %d rows, %d classes, %d features in %.1f s",
        train.height,
        classes_in_train,
        features,
        train_seconds,
    )

    evaluated = {"validation": validation, "test": test}
    logits = {
        name: baseline_logits(pipeline, split[TEXT].to_list(), len(labels))
        for name, split in evaluated.items()
    }
    # Calibrated on validation like the fine-tuned model, so the two compare like for like.
    temperature = fit_temperature(logits["validation"], validation[LABEL_ID].to_numpy())
    probabilities = {name: softmax(values, temperature) for name, values in logits.items()}
    report: dict[str, Any] = {
        name: classification_metrics(split[LABEL_ID].to_numpy(), probabilities[name], labels)
        for name, split in evaluated.items()
    }
    report |= {
        "calibration": {"temperature": temperature, "fitted_on": "validation"},
        "train_seconds": train_seconds,
        "train_rows": train.height,
        "classes_in_train": classes_in_train,
        "features": features,
        "settings": settings.to_dict(),
    }

    paths.model.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(without_process_state(pipeline), paths.model)
    indexed = {"train": paths.train, "validation": paths.validation}
    build_baseline_index(pipeline, indexed, labels).write(paths.evidence)
    write_parquet(
        predictions_frame(
            test, probabilities["test"], settings.top_k, labels, label_map.postable_mask()
        ),
        paths.predictions,
    )
    write_json(paths.metrics, report)
    log.info("baseline: %s", summary(report))
    return report


def summary(report: dict[str, Any]) -> dict[str, float]:
    """The headline scores as flat `<split>_<metric>` numbers (undefined ones left out)."""
    return {
        f"{split}_{metric}": report[split][metric]
        for split in ("validation", "test")
        for metric in HEADLINE_METRICS
        if report[split][metric] is not None
    } | {"train_seconds": report["train_seconds"]}
