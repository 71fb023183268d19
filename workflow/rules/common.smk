import json
import sys
from pathlib import Path

from snakemake.logging import logger
from snakemake.utils import validate

from account_tax.io import resolve_input
from account_tax.tracking import finish_run, redact_command, start_run

# The one place the config is checked: a wrong key or type stops the run before any job.
validate(config, schema="../schemas/config.schema.yaml")

SPLITS = ["train", "validation", "test"]
# Written when the workflow starts, read by every job: see workflow/rules/tracking.smk.
RUN_FILE = "results/tracking/run.json"


wildcard_constraints:
    split="|".join(SPLITS),


def settings(*sections):
    """The named config sections as the JSON a script takes with --settings.

    Returned as a function so Snakemake does not read the braces of templates as wildcards.
    """
    text = json.dumps({name: config[name] for name in sections if name in config})
    return lambda wildcards: text


def script(name):
    """A stage script by absolute path, so the workflow also runs with `--directory` elsewhere."""
    return str(Path(workflow.basedir) / "scripts" / f"{name}.py")


def raw_input():
    """The raw table, with `pkg:` paths resolved to the file inside the installed package."""
    return str(resolve_input(config["data"]["path"]))


def classes_file():
    """The class list file when the config names one, so that editing it re-runs the data stages."""
    classes = config["data"].get("classes")
    return [classes] if isinstance(classes, str) else []


def data_outputs():
    return expand("results/serialize/{split}.parquet", split=SPLITS)


def raw_inputs():
    """Every raw input file: its sha256 goes into the MLflow run."""
    return [raw_input(), *classes_file()]


def final_outputs():
    return data_outputs()
