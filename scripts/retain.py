"""Delete old local checkpoints whose upload to S3 is proven; keep the last k and the best.

A checkpoint is deleted only when an upload receipt names it, no upload of it is running, S3 still
holds every object the receipt lists (asked at deletion time; an S3 that cannot be asked keeps
everything), and its files, hashed again at deletion time, are exactly the ones the receipt
lists. Folders without a complete manifest (being written) and checkpoints without a receipt are
never touched. Every deletion is logged; the report lists what was kept, and why, and what was
deleted.
"""

from pathlib import Path

from account_tax import cli
from account_tax.stage_log import log_stage
from account_tax.storage.retention import RetainSettings, retain
from account_tax.storage.s3 import UploadSettings, client


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--checkpoint-dir", type=Path, required=True, help="folder holding the step-* checkpoints"
    )
    parser.add_argument(
        "--receipts", type=Path, nargs="+", required=True, help="receipt files or folders of them"
    )
    parser.add_argument("--report", type=Path, required=True, help="JSON report to write")
    args = parser.parse_args()
    report = retain(
        args.checkpoint_dir,
        args.receipts,
        RetainSettings.of(args.settings["retain"]),
        args.report,
        client(UploadSettings.of(args.settings["upload"])),
    )
    metrics = {"kept": len(report["kept"]), "deleted": len(report["deleted"])}
    log_stage(args.tracking, "retain", metrics, [args.report])


if __name__ == "__main__":
    cli.run(main)
