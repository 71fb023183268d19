"""The evidence index and its search, the evidence columns, and the novelty rule."""

import numpy as np
import polars as pl
import pytest
import scipy.sparse

from account_tax.evaluation.evidence import (
    EVIDENCE_ACCOUNTS,
    EVIDENCE_AGREEMENT,
    EVIDENCE_COLUMNS,
    EVIDENCE_IDS,
    EVIDENCE_SIMILARITIES,
    EVIDENCE_TEXTS,
    NEAREST_SIMILARITY,
    NOVEL,
    evidence_columns,
    is_novel,
    novelty_threshold,
)
from account_tax.evaluation.review import AUTO, REVIEW, coverage, decisions
from account_tax.training.evidence import (
    DENSE_VECTORS,
    EvidenceIndex,
    unit_rows,
)


def clustered_index(rows: int = 300, dim: int = 16, seed: int = 0) -> EvidenceIndex:
    """Records around 10 centres, one account per centre; a fifth of them validation."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(10, dim))
    cluster = rng.integers(10, size=rows)
    vectors = centres[cluster] + rng.normal(scale=0.3, size=(rows, dim))
    records = pl.DataFrame(
        {
            "id": [f"r{i}" for i in range(rows)],
            "text": [f"record {i} of cluster {c}" for i, c in enumerate(cluster)],
            "account": [f"A{c}" for c in cluster],
            "label_source": ["ledger"] * rows,
            "split": ["validation" if i % 5 == 0 else "train" for i in range(rows)],
        }
    )
    return EvidenceIndex(unit_rows(vectors), records)


def test_each_record_is_its_own_nearest_neighbour_after_a_round_trip(tmp_path):
    """Stored as float16 and read back, every record finds itself first at similarity 1, the
    others in falling similarity."""
    index = clustered_index()
    index.write(tmp_path / "index")
    assert np.load(tmp_path / "index" / DENSE_VECTORS).dtype == np.float16
    read = EvidenceIndex.read(tmp_path / "index")
    assert read.records.equals(index.records)
    found = read.nearest(index.vectors * 7.0, 4)  # queries need not be unit length
    assert (found.rows[:, 0] == np.arange(index.records.height)).all()
    assert np.allclose(found.similarities[:, 0], 1.0, atol=2e-3)
    assert (np.diff(found.similarities, axis=1) <= 0).all()
    exact = np.sort(unit_rows(index.vectors) @ unit_rows(index.vectors).T, axis=1)[:, ::-1][:, :4]
    assert np.allclose(found.similarities, exact, atol=2e-3)


def test_search_agrees_with_brute_force_in_chunks_dense_and_sparse(monkeypatch):
    monkeypatch.setattr("account_tax.training.evidence.QUERY_CHUNK", 7)
    index = clustered_index(rows=120)
    queries = np.random.default_rng(1).normal(size=(30, 16))
    found = index.nearest(queries, 3)
    similarity = unit_rows(queries) @ index.vectors.T
    assert (found.rows == np.argsort(-similarity, axis=1)[:, :3]).all()
    sparse = EvidenceIndex(scipy.sparse.csr_matrix(index.vectors), index.records)
    sparse_found = sparse.nearest(scipy.sparse.csr_matrix(queries), 3)
    assert (sparse_found.rows == found.rows).all()
    assert np.allclose(sparse_found.similarities, found.similarities, atol=1e-5)


def test_validation_records_are_searched_among_train_records_only():
    index = clustered_index()
    train = index.part("train")
    assert set(train.records["split"]) == {"train"}
    validation = index.records.filter(pl.col("split") == "validation")
    rows = index.records.with_row_index().filter(pl.col("split") == "validation")["index"]
    found = train.nearest(index.vectors[rows.to_numpy()], 1)
    assert not set(train.records[found.rows[:, 0]]["id"]) & set(validation["id"])
    assert (found.similarities[:, 0] < 0.999).all()


def test_an_index_smaller_than_k_gives_what_it_has_and_an_empty_query_set_works():
    index = clustered_index(rows=2)
    assert index.nearest(np.ones((3, 16)), 5).rows.shape == (3, 2)
    assert clustered_index().nearest(np.ones((0, 16)), 3).rows.shape == (0, 3)


def test_a_damaged_index_is_refused(tmp_path):
    index = clustered_index()
    index.write(tmp_path)
    np.save(tmp_path / DENSE_VECTORS, np.zeros((3, 16), dtype=np.float16))
    with pytest.raises(ValueError, match="3 vectors for 300 records"):
        EvidenceIndex.read(tmp_path)


def test_evidence_columns_list_the_neighbours_and_the_share_that_agrees():
    index = clustered_index()
    queries = index.vectors[:5] + 0.01
    found = index.nearest(queries, 3)
    accounts = index.records["account"].to_list()
    suggested = [accounts[0], "A-none", accounts[2], accounts[3], accounts[4]]
    frame = pl.DataFrame(evidence_columns(index, found, suggested, threshold=0.5))
    assert frame.columns == list(EVIDENCE_COLUMNS)
    for row, (rows, similarities, label) in enumerate(
        zip(found.rows, found.similarities, suggested, strict=True)
    ):
        got = frame.row(row, named=True)
        assert got[EVIDENCE_IDS] == [f"r{i}" for i in rows]
        assert got[EVIDENCE_TEXTS] == index.records[rows]["text"].to_list()
        assert got[EVIDENCE_ACCOUNTS] == [accounts[i] for i in rows]
        assert np.allclose(got[EVIDENCE_SIMILARITIES], similarities)
        agree = np.mean([accounts[i] == label for i in rows])
        assert got[EVIDENCE_AGREEMENT] == pytest.approx(agree)
        assert got[NEAREST_SIMILARITY] == pytest.approx(similarities[0])
        assert got[NOVEL] is bool(similarities[0] < 0.5)
    assert frame[EVIDENCE_AGREEMENT][1] == 0.0


def test_the_novelty_threshold_is_a_quantile_of_correct_validation_rows():
    similarity = np.array([0.9, 0.8, 0.7, 0.2, 0.95, 0.1])
    correct = np.array([True, True, True, True, True, False])
    assert novelty_threshold(similarity, correct, 0.0) == pytest.approx(0.2)
    assert novelty_threshold(similarity, correct, 0.5) == pytest.approx(0.8)
    assert novelty_threshold(similarity, np.zeros(6, dtype=bool), 0.01) is None
    assert is_novel(np.array([0.19, 0.2, 0.5]), 0.2).tolist() == [True, False, False]
    assert not is_novel(np.array([0.0]), None).any()


def test_a_novel_record_is_never_posted_whatever_its_confidence():
    confidence = np.array([1.0, 0.99, 0.5, 1.0])
    novel = np.array([True, False, False, False])
    assert decisions(confidence, 0.9, novel).tolist() == [REVIEW, AUTO, REVIEW, AUTO]
    assert decisions(confidence, 0.9).tolist() == [AUTO, AUTO, REVIEW, AUTO]
    correct = np.array([False, True, True, True])
    with_rule = coverage(confidence, correct, 0.9, novel=novel)
    without = coverage(confidence, correct, 0.9)
    assert (with_rule["auto_rows"], with_rule["precision"]) == (2, 1.0)
    assert (without["auto_rows"], without["precision"]) == (3, pytest.approx(2 / 3))
