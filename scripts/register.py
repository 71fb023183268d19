"""Register: log the whole prediction path (raw records to `predict`'s output) as one MLflow
pyfunc model into the workflow's run, register it as a new version of `register.name` in the
Model Registry of the same tracking store, give it the `candidate` alias, and move the
`champion` alias to it only when the shipped candidate is better than the baseline on test (and
than the current champion, when one was tested on the same rows). Writes what happened, where
the model is stored and its size, as JSON and as a page for the report
(account_tax.tracking.registry).

Serve the champion with `mlflow models serve -m models:/account-tax@champion --env-manager local`.
"""

from pathlib import Path

from account_tax import cli
from account_tax.tracking.registry import RegisterPaths, register


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--model", type=Path, required=True, help="trained model folder")
    parser.add_argument("--baseline-model", type=Path, required=True, help="baseline pipeline")
    parser.add_argument(
        "--baseline-evidence", type=Path, required=True, help="baseline evidence index folder"
    )
    parser.add_argument("--evaluation", type=Path, required=True, help="evaluate's metrics")
    parser.add_argument(
        "--test-predictions", type=Path, required=True, help="evaluate's test predictions"
    )
    parser.add_argument(
        "--split-records",
        type=Path,
        nargs="+",
        required=True,
        help="the test, validation and train records: the first with rows gives the input example",
    )
    parser.add_argument("--model-receipt", type=Path, help="the model's upload receipt")
    parser.add_argument(
        "--onnx", type=Path, help="the exported ONNX model and its check (predict.runtime)"
    )
    parser.add_argument("--rules", type=Path, help="the learned ledger rules (review.rules)")
    parser.add_argument("--rules-report", type=Path, help="the ledger rules' replay")
    parser.add_argument("--pyproject", type=Path, required=True, help="the pinned requirements")
    parser.add_argument("--output", type=Path, required=True, help="what was registered (JSON)")
    parser.add_argument("--summary", type=Path, required=True, help="the same, as HTML")
    args = parser.parse_args()
    if args.tracking is None or not args.tracking.is_file():
        parser.error("--tracking: the workflow's MLflow run file is needed to register")
    paths = RegisterPaths(
        args.model,
        args.baseline_model,
        args.baseline_evidence,
        args.evaluation,
        args.test_predictions,
        tuple(args.split_records),
        args.model_receipt,
        args.onnx,
        args.rules,
        args.rules_report,
        args.pyproject,
        args.output,
        args.summary,
    )
    register(paths, args.settings, args.tracking)


if __name__ == "__main__":
    cli.run(main)
