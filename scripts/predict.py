"""Predict one shard of new records (all of them by default): the top-k account classes, with
calibrated probabilities, through the same clean, features and serialize code as training and
the candidate evaluate chose (the fine-tuned model, the baseline or their calibrated mix,
whichever is best on validation), with the evidence for each suggestion: its nearest training
records, whether it is novel (unlike any of them) and the ledger rule its record matches
(review.rules). Each row gets a decision, `auto` (post it) at or above that candidate's
auto-post threshold or where a trusted ledger rule names the suggested account, unless novel,
else `review`, and its provenance (candidate, model hashes, training run, S3 location of the
model). Reads ingest's rows a chunk at a time (memory does not grow with the file); unusable rows
go to the rejects file with the reason. `predict_gather.py` joins the shards."""

from pathlib import Path

import torch

from account_tax import cli
from account_tax.evaluation.ledger_rules import LedgerRules
from account_tax.evaluation.predict import (
    BATCH_SIZE,
    Candidate,
    Predictor,
    load_shipped,
    predict_part,
)
from account_tax.evaluation.prediction_parts import PredictPaths
from account_tax.evaluation.runtime_check import checked_onnx_model


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--records", type=Path, required=True, help="new records as ingest wrote them"
    )
    parser.add_argument("--model", type=Path, required=True, help="trained model folder")
    parser.add_argument("--baseline-model", type=Path, required=True, help="baseline pipeline")
    parser.add_argument(
        "--baseline-evidence", type=Path, required=True, help="baseline evidence index folder"
    )
    parser.add_argument(
        "--evaluation",
        type=Path,
        required=True,
        help="evaluate's metrics: the candidate to use and its auto-post threshold",
    )
    parser.add_argument("--model-receipt", type=Path, help="the model's upload receipt")
    parser.add_argument(
        "--onnx", type=Path, help="the exported ONNX model and its check (predict.runtime)"
    )
    parser.add_argument("--rules", type=Path, help="the learned ledger rules (review.rules)")
    parser.add_argument("--rules-report", type=Path, help="the ledger rules' replay")
    parser.add_argument("--predictions", type=Path, required=True, help="predictions Parquet")
    parser.add_argument("--rejects", type=Path, required=True, help="rejected rows Parquet")
    parser.add_argument("--review", type=Path, required=True, help="rows to review Parquet")
    parser.add_argument("--shard", type=int, default=0, help="which shard (from 0)")
    parser.add_argument("--shards", type=int, default=1, help="how many shards")
    parser.add_argument(
        "--batch-size", type=int, default=BATCH_SIZE, help="texts per inference batch"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shipped, provenance = load_shipped(
        args.evaluation, args.model, args.baseline_model, args.model_receipt
    )
    candidate = Candidate(
        args.model,
        args.baseline_model,
        shipped,
        args.batch_size,
        args.baseline_evidence,
        checked_onnx_model(args.onnx) if args.onnx else None,
    )
    predictor = Predictor.configured(
        args.settings,
        candidate,
        provenance,
        LedgerRules.read(args.rules, args.rules_report) if args.rules else None,
    )
    paths = PredictPaths(args.predictions, args.rejects, args.review)
    predict_part(args.records, predictor, paths, args.shard, args.shards)


if __name__ == "__main__":
    cli.run(main)
