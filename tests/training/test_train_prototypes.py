"""The head's final rows: the classes' prototypes (the mean direction of their training records and
text as the trained model embeds them), their blend with the learned rows, or rows refitted on the
stored vectors replace the learned rows when asked, or when they score higher on validation."""

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch
import torch.nn.functional as F

from account_tax.data.label_map import LabelMap
from account_tax.data.serialize import class_text_records
from account_tax.data.spec import CHART, LEDGER
from account_tax.training.evidence import ACCOUNT, INDEX_DIR, EvidenceIndex
from account_tax.training.head_init import embed_texts, text_classifier, trained_head
from account_tax.training.inference import load_classifier
from account_tax.training.prototypes import head_scores, prototypes, refit
from account_tax.training.settings import TrainSettings


def test_a_prototype_is_the_mean_direction_of_its_records_and_its_text():
    vectors = F.normalize(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]), dim=1)
    texts = torch.tensor([[0.0, 0.0, 3.0], [0.0, 0.0, 0.0], [0.0, 5.0, 0.0]])
    rows, has = prototypes(vectors, np.array([0, 0, 1]), 4, None)
    assert torch.allclose(rows[0], F.normalize(torch.tensor([1.0, 1.0, 0.0]), dim=0))
    assert torch.allclose(rows[1], torch.tensor([0.0, 0.0, 1.0]))
    assert has.tolist() == [True, True, False, False]
    with_texts, has = prototypes(vectors, np.array([0, 0, 1]), 3, texts)
    # The text is one more record, at unit length whatever its norm; a class with a text only
    # is its text.
    assert torch.allclose(with_texts[0], F.normalize(torch.tensor([1.0, 1.0, 1.0]), dim=0))
    assert torch.allclose(with_texts[2], torch.tensor([0.0, 1.0, 0.0]))
    assert has.tolist() == [True, True, True]


def test_a_class_that_takes_no_postings_is_never_predicted_when_scoring():
    rows = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    labels = np.array([1, 2])
    assert head_scores(rows, vectors, labels, np.array([True, True, True])) == (0.5, 0.5)
    # Without class 0, the first record goes to class 1: both right.
    assert head_scores(rows, vectors, labels, np.array([False, True, True])) == (1.0, 1.0)


def test_prototypes_need_the_cosine_head():
    for final_head in ("prototypes", "blend", "refit"):
        with pytest.raises(
            ValueError, match=rf"final_head: {final_head} needs train\.head: cosine"
        ):
            TrainSettings.of(final_head=final_head, head="linear")
    assert TrainSettings.of(final_head="best", head="linear").final_head == "best"


def clustered(seed: int, per_class: int) -> tuple[torch.Tensor, np.ndarray]:
    """Unit vectors around four class centres in 8 dimensions, `per_class` each."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.eye(8)[:4] * 3
    labels = np.repeat(np.arange(4), per_class)
    noise = torch.randn(len(labels), 8, generator=generator)
    return F.normalize(centres[labels] + noise, dim=1), labels


def test_the_refit_learns_the_rows_from_the_vectors_and_keeps_the_best_epoch():
    """From rows that confuse every class, the refit separates them; a class without training
    records (5) keeps its row; the same seed gives the same rows; without validation rows the
    start is returned."""
    train, validation = clustered(0, 30), clustered(1, 10)
    postable = np.ones(5, dtype=bool)
    start = F.normalize(torch.ones(5, 8) + 0.01 * torch.randn(5, 8), dim=1)
    scale = torch.tensor([20.0])
    before, _ = head_scores(start, *validation, postable)
    rows, new_scale, epoch = refit(start, scale, train, validation, postable, 0.4, seed=3)
    after, _ = head_scores(rows, *validation, postable)
    assert before < 0.5 < 0.9 < after
    assert 1 <= epoch <= 40
    # Weight decay shortens it; a cosine head reads its direction, which stays.
    assert torch.allclose(F.normalize(rows[4], dim=0), start[4])
    assert new_scale.shape == scale.shape
    again, _, same_epoch = refit(start, scale, train, validation, postable, 0.4, seed=3)
    assert torch.equal(again, rows) and same_epoch == epoch
    empty = (validation[0][:0], validation[1][:0])
    unchanged, kept_scale, none = refit(start, scale, train, empty, postable, 0.4, seed=3)
    assert unchanged is start and kept_scale is scale and none == 0


def test_the_refit_keeps_its_start_when_no_epoch_beats_it():
    train, validation = clustered(0, 30), clustered(1, 10)
    postable = np.ones(4, dtype=bool)
    # The classes' centres: validation cannot get better than this start.
    start = torch.eye(8)[:4]
    best, _ = head_scores(start, *validation, postable)
    assert best == 1.0
    rows, _, epoch = refit(start, torch.tensor([20.0]), train, validation, postable, 0.4, seed=3)
    assert epoch == 0 and rows is start


@pytest.mark.parametrize(
    ("final_head", "chart_records"),
    [("prototypes", False), ("best", False), ("prototypes", True), ("refit", False)],
)
def test_the_exported_head_holds_the_chosen_rows(
    tiny_bert, ledger, tiny_settings, run_training, tmp_path, final_head, chart_records
):
    """With `prototypes`, each row of a class with training records is the mean direction of
    its records' vectors in the model's evidence index and of its text, counted once also where
    the train split holds it as a record (serialize.class_texts); with `best`, the rows scoring
    the highest validation macro-F1 are kept and the metrics report all four; whichever is
    kept, the exported head scores on validation what the metrics say."""
    label_map = replace(
        LabelMap.read(ledger["label_map"]),
        names=["office supplies", "travel", "software", "rent", "bank fees"],
    )
    named = tmp_path / "label_map.json"
    label_map.write(named)
    splits = ledger | {"label_map": named}
    if chart_records:
        train = pl.read_parquet(ledger["train"]).with_columns(label_source=pl.lit(LEDGER))
        splits["train"] = tmp_path / "train.parquet"
        chart = class_text_records(label_map).select(train.columns).cast(train.schema)
        pl.concat([train, chart]).write_parquet(splits["train"])
    settings = tiny_settings(tiny_bert, epochs=1, final_head=final_head, learning_rate=1e-3)
    metrics = run_training(splits, tmp_path, settings)

    names = ("learned", "prototypes", "blend", "refit")
    scores = {name: metrics[f"validation_macro_f1_{name}"] for name in names}
    if final_head == "best":
        best = max(scores.values())
        assert metrics["final_head"] == next(name for name in names if scores[name] == best)
    else:
        assert metrics["final_head"] == final_head
    if final_head == "refit":
        assert metrics["final_head_refit_epochs"] >= 1
    if metrics["final_head"] != "learned":
        assert metrics["validation_macro_f1"] == scores[metrics["final_head"]]
    model, tokenizer, labels = load_classifier(tmp_path / "model", dtype=torch.float32)
    head = trained_head(model).weight.detach()
    validation = EvidenceIndex.read(tmp_path / "model" / INDEX_DIR).part("validation")
    validation_ids = [labels.index(account) for account in validation.records[ACCOUNT]]
    exported, _ = head_scores(
        head, torch.from_numpy(validation.vectors), np.array(validation_ids), np.ones(5, bool)
    )
    assert exported == pytest.approx(metrics["validation_macro_f1"], abs=1e-9)
    index = EvidenceIndex.read(tmp_path / "model" / INDEX_DIR).part("train")
    assert (index.records["label_source"] == CHART).sum() == (5 if chart_records else 0)
    texts = embed_texts(text_classifier(model), tokenizer, label_map.class_texts(), max_length=48)
    accounts = np.array(index.records[ACCOUNT].to_list())
    for label_id, label in enumerate(labels[:4]):
        records = (accounts == label) & (index.records["label_source"] != CHART).to_numpy()
        members = torch.from_numpy(index.vectors[records]).sum(dim=0)
        prototype = members + F.normalize(texts[label_id], dim=0)
        similarity = F.cosine_similarity(head[label_id], prototype, dim=0).item()
        if metrics["final_head"] == "prototypes":
            # The index's vectors are bf16 embeddings stored as float16.
            assert similarity == pytest.approx(1.0, abs=2e-3)
        else:
            assert similarity < 0.999


def test_without_validation_rows_best_keeps_the_learned_rows(
    tiny_bert, ledger, tiny_settings, run_training, tmp_path
):
    validation = tmp_path / "validation.parquet"
    pl.read_parquet(ledger["validation"]).head(0).write_parquet(validation)
    settings = tiny_settings(tiny_bert, epochs=1, final_head="best")
    metrics = run_training(ledger | {"validation": validation}, tmp_path, settings)
    assert metrics["final_head"] == "learned"
    assert not any(key.startswith("validation_macro_f1_") for key in metrics)
