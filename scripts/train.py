"""Fine-tune a transformer classifier of account codes on the serialized splits.

One process per device, on GPUs or CPUs alike:

    torchrun --nproc_per_node 2 scripts/train.py --train ... --settings config/config.yaml
    python scripts/train.py ...          (one process, no launcher needed)

Training resumes from the newest complete checkpoint in --checkpoint-dir, which is meant to live
outside the rule's declared outputs (Snakemake deletes those before a re-run). With
`train.segments` > 1, `--segment s` trains up to the end of segment s and stops after a
checkpoint; every segment then exports the best model so far with its metrics and history, and
the last one's are the trained model's.

SIGTERM or SIGINT stops every process after the current step (with the checkpoint, if one was
due) and writes no output; so does the death of the launcher (see
account_tax.training.stop_signals). A checkpoint or output that cannot be written (a full disk)
ends the process with one line saying what, where and why.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from account_tax import cli
from account_tax.settings import load_settings
from account_tax.stage_log import log_history, log_stage, log_trial, read_run
from account_tax.training.distributed import exit_worker
from account_tax.training.history import read_history
from account_tax.training.loop import TrainPaths, train
from account_tax.training.settings import TrainSettings
from account_tax.training.stop_signals import TrainingStopped, die_on_stop_signals, stop_with_parent

HISTORY_SERIES = (
    "loss",
    "lr",
    "samples_per_s",
    "validation_loss",
    "validation_accuracy",
    "validation_macro_f1",
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, required=True, help="train split (Parquet)")
    parser.add_argument("--validation", type=Path, required=True, help="validation split")
    parser.add_argument("--label-map", type=Path, required=True, help="label_map.json")
    parser.add_argument(
        "--checkpoint-dir", type=Path, required=True, help="resumable checkpoints (not an output)"
    )
    parser.add_argument(
        "--output-dir", type=Path, required=True, help="trained adapter or model, with tokenizer"
    )
    parser.add_argument("--metrics", type=Path, required=True, help="metrics (JSON)")
    parser.add_argument("--history", type=Path, required=True, help="per-step metrics (JSON lines)")
    parser.add_argument(
        "--segment", type=int, help="train up to the end of this segment of train.segments only"
    )
    parser.add_argument(
        "--segment-marker", type=Path, help="JSON naming the run folder and step reached"
    )
    parser.add_argument("--tracking", type=Path, help="the workflow's MLflow run file")
    parser.add_argument(
        "--init-model", type=Path, help="the exported model a warm start begins from (init_from)"
    )
    parser.add_argument(
        "--trial", help="a sweep trial's name: logged as a nested run of the workflow's MLflow run"
    )
    parser.add_argument(
        "--settings",
        required=True,
        help="the workflow config as JSON, or a config file path; its `train` section is used",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    die_on_stop_signals()
    stop_with_parent()
    rank = os.environ.get("RANK", "0")
    settings = TrainSettings.of(load_settings(args.settings)["train"])
    paths = TrainPaths(
        train=args.train,
        validation=args.validation,
        label_map=args.label_map,
        checkpoint_dir=args.checkpoint_dir,
        output_dir=args.output_dir,
        metrics=args.metrics,
        history=args.history,
        segment_marker=args.segment_marker,
        init_model=args.init_model,
    )
    tracked = args.tracking is not None and args.tracking.exists()
    mlflow_run_id = read_run(args.tracking)["run_id"] if tracked else None
    try:
        metrics = train(settings, paths, args.segment, mlflow_run_id)
    except TrainingStopped as stopped:
        logging.getLogger("train").warning(
            "%s; the next run resumes from the newest checkpoint in %s",
            stopped,
            args.checkpoint_dir,
        )
        raise SystemExit(stopped.exit_code) from None
    if rank != "0":
        exit_worker()
    history = read_history(args.history)
    numeric = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
    if args.trial:
        log_trial(args.tracking, args.trial, settings.to_dict(), numeric, history, HISTORY_SERIES)
    # The workflow run's metrics are the trained model's: the last segment's.
    elif args.segment in (None, settings.segments):
        log_stage(
            args.tracking,
            "train",
            numeric,
            [args.metrics, args.history],
            tags={k: metrics[k] for k in ("stopped", "final_head") if k in metrics},
        )
        log_history(args.tracking, "train", history, HISTORY_SERIES)


if __name__ == "__main__":
    # Bad input (a split with no rows) or a failed write ends every rank in one line.
    cli.run(main, who=f"rank {os.environ.get('RANK', '0')} ")
