"""Nearest-neighbour search for the evidence index: ours (`EvidenceIndex.nearest`: exact, matmul
and torch's top-k) against numpy's argpartition and faiss, in one run.

The evidence index holds the k=3 nearest training records of each predicted record by cosine
similarity. This measures, on synthetic clustered data (500 random centres plus gaussian noise,
L2-normalised, stored as float16), dimension 384, 8,192 queries, k=3:

* ours: `account_tax.training.evidence.EvidenceIndex.nearest`, what predict and evaluate run:
  queries normalised, @ index.T in chunks of 1,024 queries, `torch.topk`;
* numpy: float32 queries @ index.T (the index converted to float32 once, its "build"), in chunks
  of 1,024 queries, top-k by `np.argpartition` then a sort of the k;
* faiss-flat: `faiss.IndexFlatIP` (exact) on the same float32 data;
* faiss-hnsw: `faiss.IndexHNSWFlat` (M=32, efSearch=64, inner product), recall@3 against numpy;
* sparse (the baseline's TF-IDF space): scipy CSR TF-IDF-like rows (50,000 features, ~60
  non-zeros, L2-normalised, float32), sparse queries @ index.T (transposed once, its build),
  top-k per row by argpartition, chunks of 1,024 queries; and ours on the same rows.

Build runs once; each search runs `--repeats` times and the median is reported. numpy/BLAS and
faiss are limited to `--threads` threads. faiss is optional (not a project dependency):

    python -m pip install --target /tmp/faiss-site faiss-cpu
    PYTHONPATH=/tmp/faiss-site python bench/evidence_search.py
    python bench/evidence_search.py --sizes 10000 --repeats 3 --threads 2
"""

from __future__ import annotations

import os
import sys

_THREADS = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "2"
os.environ.setdefault("OMP_NUM_THREADS", _THREADS)  # the fallback when threadpoolctl is missing

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

from account_tax.training.evidence import EvidenceIndex  # noqa: E402

try:
    import faiss
except ImportError:
    faiss = None
try:
    from threadpoolctl import threadpool_limits
except ImportError:
    threadpool_limits = None

CHUNK = 1024
INT_OPTIONS = dict(queries=8192, dim=384, k=3, repeats=5, threads=2)
INT_OPTIONS |= dict(sparse_rows=10_000, features=50_000, nnz=60)


def normalise(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def clustered(rng: np.random.Generator, centres: np.ndarray, n: int, noise: float) -> np.ndarray:
    labels = rng.integers(len(centres), size=n)
    x = centres[labels] + rng.normal(scale=noise, size=(n, centres.shape[1])).astype(np.float32)
    return normalise(x).astype(np.float16)


def topk(scores: np.ndarray, k: int) -> np.ndarray:
    idx = np.argpartition(scores, -k, axis=1)[:, -k:]
    order = np.argsort(-np.take_along_axis(scores, idx, axis=1), axis=1)
    return np.take_along_axis(idx, order, axis=1)


def numpy_search(index: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    out = [topk(queries[i : i + CHUNK] @ index.T, k) for i in range(0, len(queries), CHUNK)]
    return np.vstack(out)


def sparse_search(index_t: sp.csr_matrix, queries: sp.csr_matrix, k: int) -> np.ndarray:
    chunks = (queries[i : i + CHUNK] for i in range(0, queries.shape[0], CHUNK))
    return np.vstack([topk((q @ index_t).toarray(), k) for q in chunks])


def tfidf(rng: np.random.Generator, n: int, features: int, nnz: int) -> sp.csr_matrix:
    p = 1.0 / np.arange(1, features + 1) ** 0.8  # Zipf-like term frequencies
    p /= p.sum()
    cols = rng.choice(features, size=n * nnz, p=p)
    vals = (1.0 + rng.random(n * nnz)) * np.log(1.0 / p[cols])  # tf * idf
    m = sp.csr_matrix((vals, (np.repeat(np.arange(n), nnz), cols)), shape=(n, features))
    m.sum_duplicates()
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / norms) @ m, dtype=np.float32)


def ours(vectors, k: int) -> tuple[float, EvidenceIndex]:
    """The product's index over `vectors` (records: just ids), and its build time."""
    records = pl.DataFrame({"id": [str(i) for i in range(vectors.shape[0])]})
    index = EvidenceIndex(vectors, records)
    build, _ = clock(lambda: index.searched)
    return build, index


def clock(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def timed(fn, repeats: int):
    runs = [clock(fn) for _ in range(repeats)]
    return statistics.median(t for t, _ in runs), runs[-1][1]


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    hits = sum(len(set(a) & set(b)) for a, b in zip(found, exact, strict=True))
    return hits / exact.size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    for name, default in INT_OPTIONS.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    args = ap.parse_args()
    if threadpool_limits is not None:
        threadpool_limits(args.threads)
    if faiss is not None:
        faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    centres = normalise(rng.normal(size=(500, args.dim)).astype(np.float32))
    queries = clustered(rng, centres, args.queries, 0.05).astype(np.float32)
    rows = []

    def row(case, n, build, mb, search, rec):
        rec = "-" if rec is None else f"{rec:.4f}"
        qps = args.queries / search
        rows.append(
            f"| {case} | {n:,} | {build:.3f} | {mb:.1f} | {search:.3f} | {qps:,.0f} | {rec} |"
        )

    for n in args.sizes:
        stored = clustered(rng, centres, n, 0.05)  # float16, as stored
        build, index = clock(lambda x=stored: x.astype(np.float32))
        search, exact = timed(lambda x=index: numpy_search(x, queries, args.k), args.repeats)
        row("numpy", n, build, index.nbytes / 1e6, search, 1.0)
        build, product = ours(index, args.k)
        search, (found, _) = timed(lambda p=product: p.nearest(queries, args.k), args.repeats)
        row("ours", n, build, index.nbytes / 1e6, search, recall(found, exact))
        if faiss is None:
            continue
        for case, make in (
            ("faiss-flat", lambda: faiss.IndexFlatIP(args.dim)),
            ("faiss-hnsw", lambda: faiss.IndexHNSWFlat(args.dim, 32, faiss.METRIC_INNER_PRODUCT)),
        ):
            fi = make()  # empty; the build is the add
            build, _ = clock(lambda fi=fi, x=index: fi.add(x))
            if case == "faiss-hnsw":
                fi.hnsw.efSearch = 64
            mb = faiss.serialize_index(fi).nbytes / 1e6
            search, (_, found) = timed(lambda fi=fi: fi.search(queries, args.k), args.repeats)
            row(case, n, build, mb, search, recall(found, exact))

    sidx = tfidf(rng, args.sparse_rows, args.features, args.nnz)
    sq = tfidf(rng, args.queries, args.features, args.nnz)
    mb = (sidx.data.nbytes + sidx.indices.nbytes + sidx.indptr.nbytes) / 1e6
    build, sidx_t = clock(sidx.T.tocsr)  # transposed once, at load
    search, exact = timed(lambda: sparse_search(sidx_t, sq, args.k), args.repeats)
    row("sparse numpy", args.sparse_rows, build, mb, search, 1.0)
    build, product = ours(sidx, args.k)
    search, (found, _) = timed(lambda: product.nearest(sq, args.k), args.repeats)
    row("sparse ours", args.sparse_rows, build, mb, search, recall(found, exact))

    print(
        f"{args.queries:,} queries, dim {args.dim}, k={args.k}, {args.threads} threads, "
        f"median of {args.repeats}; recall@{args.k} against numpy exact"
    )
    if faiss is None:
        print("faiss was not installed: faiss cases skipped")
    print(f"\n| case | index rows | build s | index MB | search s | queries/s | recall@{args.k} |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
