"""Upload checkpoints (or the trained model) to S3, verify every object, and only then write a
receipt for each folder: one folder (`--source`), or every checkpoint a training segment left
that has no receipt yet (`--segment-marker`).

The objects go to s3://<bucket>/<prefix>/<experiment>/<run id>/<name>/<file>. The endpoint,
region and credentials come from the standard AWS environment (AWS_ENDPOINT_URL or
AWS_ENDPOINT_URL_S3, AWS_PROFILE, AWS_ACCESS_KEY_ID, ...), never from the workflow config; the
bucket must exist already.
A folder without a complete manifest, or whose files do not match it, is refused (exit status 2);
a missing bucket, a failed or an unverifiable upload exits with status 1. Neither writes a receipt.

Every receipt lives in `--receipts-dir`, which is no rule's output, so that a failed re-run
(Snakemake deletes a job's outputs before it runs it) never loses the record of an earlier
verified upload: checkpoints' as `<training run>/<step>.json`, one folder's as
`<name>/<MLflow run id>.json`, one receipt per S3 folder. `--receipt` and `--index` are the
rule's outputs: a copy of the folder's receipt, or the list of the segment's receipts.
"""

import logging
import sys
from pathlib import Path

from account_tax import cli
from account_tax.io import write_json
from account_tax.stage_log import log_stage
from account_tax.storage.s3 import (
    MIB,
    RunInfo,
    UploadError,
    UploadSettings,
    read_receipt,
    upload_checkpoint,
    upload_segment,
)

log = logging.getLogger("account_tax")


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--run-file", type=Path, required=True, help="JSON with the MLflow run_id and experiment"
    )
    parser.add_argument(
        "--receipts-dir", type=Path, required=True, help="folder where every receipt is kept"
    )
    one = parser.add_argument_group("one folder")
    one.add_argument("--source", type=Path, help="checkpoint or model folder with a manifest")
    one.add_argument("--name", help="name of the folder in S3, e.g. model")
    one.add_argument("--receipt", type=Path, help="copy of the folder's receipt to write")
    segment = parser.add_argument_group("a training segment's checkpoints")
    segment.add_argument("--segment-marker", type=Path, help="the segment's marker JSON")
    segment.add_argument("--index", type=Path, help="JSON listing the segment's receipts")
    args = parser.parse_args()
    if (args.source is None) == (args.segment_marker is None):
        parser.error("give either --source, --name and --receipt, or --segment-marker and --index")
    settings = UploadSettings.of(args.settings["upload"])
    run = RunInfo.from_file(args.run_file)
    try:
        if args.source is not None:
            kept = args.receipts_dir / args.name / f"{run.run_id}.json"
            receipts = [upload_checkpoint(args.source, args.name, run, settings, kept)]
            write_json(args.receipt, receipts[0])
            stage, artifacts = f"upload/{args.name}", [args.receipt]
        else:
            index = upload_segment(args.segment_marker, args.receipts_dir, run, settings)
            write_json(args.index, index)
            receipts = [read_receipt(Path(p)) for p in index["receipts"]]
            stage, artifacts = f"upload/segment-{index['segment']}", [args.index]
    except UploadError as error:
        log.error("%s", error)
        sys.exit(1)
    objects = [o for receipt in receipts for o in receipt["objects"]]
    metrics = {"objects": len(objects), "mib": sum(o["size"] for o in objects) / MIB}
    log_stage(args.tracking, stage, metrics, artifacts)


if __name__ == "__main__":
    cli.run(main)
