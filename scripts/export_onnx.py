"""Export the trained model to ONNX for `predict.runtime` (`onnx`: float32, `onnx-int8`: int8
weights) and check it on the validation split against PyTorch: top-1 agreement and calibration
error (see `account_tax.evaluation.runtime_check`). Predict uses it only if the check passed;
otherwise it says so and keeps PyTorch."""

from pathlib import Path

import torch

from account_tax import cli
from account_tax.evaluation.predict import BATCH_SIZE
from account_tax.evaluation.prediction_parts import PredictSettings
from account_tax.evaluation.runtime_check import CHECK, check_runtime
from account_tax.io import write_json
from account_tax.stage_log import log_stage
from account_tax.training.onnx_model import ONNX_MODEL, export_onnx


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--model", type=Path, required=True, help="trained model folder")
    parser.add_argument("--validation", type=Path, required=True, help="serialized validation")
    parser.add_argument("--output", type=Path, required=True, help="folder for the ONNX model")
    parser.add_argument(
        "--batch-size", type=int, default=BATCH_SIZE, help="texts per inference batch"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch and ONNX Runtime threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = PredictSettings.of(args.settings["predict"])
    args.output.mkdir(parents=True, exist_ok=True)
    export_onnx(args.model, args.output / ONNX_MODEL, settings.runtime)
    record = check_runtime(
        args.model,
        args.output / ONNX_MODEL,
        args.validation,
        settings,
        args.batch_size,
        args.threads,
    )
    write_json(args.output / CHECK, record)
    metrics = {key: float(value) for key, value in record.items() if key != "runtime"}
    log_stage(args.tracking, "export_onnx", metrics, tags={"runtime": settings.runtime})


if __name__ == "__main__":
    cli.run(main)
