"""Init model: fetch the registered champion's fine-tuned model into a folder, where a warm start
(`train.init_from: champion`) begins."""

from pathlib import Path

from account_tax import cli
from account_tax.stage_log import log_stage
from account_tax.tracking.champion import RegisterSettings, fetch_champion_model


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--output", type=Path, required=True, help="the model folder to write")
    args = parser.parse_args()
    fetched = fetch_champion_model(
        args.tracking, RegisterSettings.of(args.settings["register"]), args.output
    )
    log_stage(
        args.tracking,
        "init_model",
        {"champion_version": int(fetched["version"])},
        tags={"champion_run_id": fetched["run_id"]},
    )


if __name__ == "__main__":
    cli.run(main)
