"""Evaluate the fine-tuned model, the baseline and their mix on validation and test, choose the
candidate that ships, and draw the report's plots (account_tax.evaluation.evaluate)."""

from dataclasses import MISSING, fields
from pathlib import Path

import torch

from account_tax import cli
from account_tax.evaluation.evaluate import EvaluatePaths, evaluate
from account_tax.evaluation.predict import BATCH_SIZE
from account_tax.evaluation.prediction_parts import PredictSettings

HELP = {
    "model": "trained model folder",
    "validation": "serialized validation split",
    "test": "serialized test split",
    "train_records": "split train records",
    "test_records": "split test records",
    "history": "training history",
    "baseline_model": "baseline pipeline",
    "baseline_metrics": "baseline metrics",
    "baseline_evidence": "baseline evidence index folder",
    "metrics": "metrics JSON to write",
    "predictions": "test predictions Parquet to write",
    "summary": "verdict and table (HTML)",
    "curves": "loss and learning-rate curves PNG",
    "confusion": "confusion matrix PNG",
    "f1_support": "F1 against support PNG",
    "comparison": "baseline comparison PNG",
    "reliability": "reliability diagram PNG",
    "precision_coverage": "precision-coverage curve PNG",
    "track_record": "reviewed suggestions Parquet (the correct stage's), if any",
}


def main() -> None:
    parser = cli.parser(__doc__)
    for field in fields(EvaluatePaths):
        parser.add_argument(
            f"--{field.name.replace('_', '-')}",
            type=Path,
            required=field.default is MISSING,
            help=HELP[field.name],
        )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--batch-size", type=int, default=BATCH_SIZE, help="texts per inference batch"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    predict = PredictSettings.of(args.settings["predict"])
    evaluate(
        EvaluatePaths(**{field.name: getattr(args, field.name) for field in fields(EvaluatePaths)}),
        args.settings,
        top_k=predict.top_k,
        evidence_k=predict.evidence_k,
        batch_size=args.batch_size,
        tracking=args.tracking,
    )


if __name__ == "__main__":
    cli.run(main)
