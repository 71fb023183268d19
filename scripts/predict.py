"""Predict: the top-k account classes and their probabilities for new records (the same column
roles as training, labels optional), through the same clean, features and serialize code and the
trained model. Unusable rows go to the rejects file with the reason; the counts add up."""

from pathlib import Path

import torch

from account_tax import cli
from account_tax.predict import predict_records
from account_tax.settings import DataSpec
from account_tax.tracking import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--input", type=Path, required=True, help="new records (CSV or Parquet)")
    parser.add_argument("--model", type=Path, required=True, help="trained model folder")
    parser.add_argument("--output", type=Path, required=True, help="predictions Parquet")
    parser.add_argument("--rejects", type=Path, required=True, help="rejected rows Parquet")
    parser.add_argument("--top-k", type=int, default=3, help="classes per record")
    parser.add_argument("--batch-size", type=int, default=64, help="texts per inference batch")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    counts = predict_records(
        args.input,
        DataSpec.from_config(args.settings),
        args.settings,
        args.model,
        args.output,
        args.rejects,
        k=args.top_k,
        batch_size=args.batch_size,
    )
    log_stage(args.tracking, f"predict/{args.output.stem}", counts)


if __name__ == "__main__":
    cli.run(main)
