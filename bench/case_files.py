"""The command line of a benchmark case's writer: `--output-dir` in, the counts printed as JSON."""

import argparse
import json
from collections.abc import Callable
from pathlib import Path


def main(description: str, files: str, write_case: Callable[[Path], dict]) -> None:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output-dir", type=Path, required=True, help=f"folder for {files}")
    print(json.dumps(write_case(parser.parse_args().output_dir), indent=2))
