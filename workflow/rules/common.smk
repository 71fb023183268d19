import json
import os
import shlex
import sys
from pathlib import Path

import account_tax.backtest.periods
import account_tax.code_hash
import account_tax.data.serialize
import account_tax.data.split
import account_tax.evaluation.ledger_rules
import account_tax.training.sweep

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from account_tax.errors import DataError
from account_tax.io import resolve_input
from account_tax.data.spec import DataSpec
from account_tax.settings import complete
from account_tax.workflow_run import (
    check_configured_uri,
    close_abandoned_run,
    finish_run,
    redact_command,
    start_run,
)

# A user's `data` section describes the user's own file: column roles it leaves out are empty
# (the schema's defaults), never the bundled example's, which Snakemake's key-by-key merge of
# --configfile over config/config.yaml would otherwise keep.
if "data" in workflow.config_settings.overwrite_config:
    config["data"] = workflow.config_settings.overwrite_config["data"]

# The repository this workflow lives in: scripts, config files and pyproject.toml are found here,
# also when it is used as a module from another folder (where workflow.basedir is that folder's).
WORKFLOW_ROOT = Path(
    workflow.current_basedir.get_path_or_uri(secret_free=True)
).parents[1]


# The conda envs install this checkout from here (envs/*.yaml): conda runs their pip step in the
# copy of the env file that Snakemake makes under .snakemake/conda, where a path relative to
# envs/ would name another folder.
os.environ.update(ACCOUNT_TAX_ROOT=str(WORKFLOW_ROOT))


def workflow_file(path):
    """A path relative to the working directory, else to the workflow (its own config files)."""
    return path if Path(path).exists() else str(WORKFLOW_ROOT / path)


def check_keys_across_sections(data_spec):
    """Settings that are wrong together with others, which the schema cannot say: a DataError
    of one line naming them."""
    amount = config["evaluate"]["amount_column"]
    if amount and amount not in config["data"]["columns"]["numeric"]:
        raise DataError(
            f"config `evaluate.amount_column`: {amount!r} is not among the data's numeric"
            f" columns (data.columns.numeric: {config['data']['columns']['numeric']})"
        )
    init_from = config["train"]["init_from"]
    if init_from != "none" and not config["data"]["columns"]["id"]:
        raise DataError(
            "config `train.init_from` needs `data.columns.id`: a warm start keeps the records"
            " its model learned in train by their ids, and a row number names another record"
            " once the ledger is sorted or cut otherwise"
        )
    if init_from not in ("none", "champion") and Path(
        init_from
    ).resolve().is_relative_to(Path("results").resolve()):
        raise DataError(
            f"config `train.init_from`: {init_from!r} is under results/, which this run writes"
            " (its training replaces the model it would start from); copy the model folder"
            " elsewhere, e.g. models/, and name that"
        )
    if config["backtest"]["date_column"]:
        account_tax.backtest.periods.date_column(
            data_spec,
            account_tax.backtest.periods.BacktestSettings.of(config["backtest"]),
        )
    if config["register"]["candidate_alias"] == config["register"]["champion_alias"]:
        raise DataError(
            "config `register`: candidate_alias and champion_alias are the same alias,"
            " which every new version would take without the champion comparison"
        )


# The one place the config is checked: a wrong key, type or value stops the run before any job,
# with one line naming it (the schema stays in its file), and the schema's defaults fill the rest.
# The chart of accounts (data.classes) is read with it, so that its errors come before any job.
try:
    config.update(complete(config, whole=True))
    data_spec = DataSpec.from_config(config)
    account_tax.evaluation.ledger_rules.rule_columns(
        data_spec,
        account_tax.evaluation.ledger_rules.RuleSettings.of(config["review"]["rules"]),
    )
    account_tax.data.split.check_settings(
        data_spec, account_tax.data.split.SplitSettings.of(config["split"])
    )
    account_tax.data.serialize.check_fields(
        data_spec, account_tax.data.serialize.SerializeSettings.of(config["serialize"])
    )
    check_configured_uri(config["tracking"]["tracking_uri"])
    check_keys_across_sections(data_spec)
    config["train"]["deepspeed_config"] = workflow_file(
        config["train"]["deepspeed_config"]
    )
    # The sweep's trials by name (none without a sweep), each train section checked.
    TRIALS = {trial.name: trial for trial in account_tax.training.sweep.trials(config)}
except DataError as error:
    raise WorkflowError(str(error)) from None


SPLITS = ["train", "validation", "test"]
TRAIN_SEGMENTS = config["train"]["segments"]
# Resumable training state: deliberately not a rule output, since Snakemake deletes outputs
# before it re-runs a job, and a resumed job needs exactly these files.
CHECKPOINT_DIR = "checkpoints/train"
# The trained model: the last segment's outputs (see workflow/rules/train.smk).
TRAINED = f"results/train/segment-{TRAIN_SEGMENTS}"
# With a sweep, the chosen trial's settings: the train rule's config.
SWEEP_CHOICE = "results/sweep/selected.json"
RECEIPTS_DIR = "results/upload/receipts"
# Written when the workflow starts, read by every job: see workflow/rules/tracking.smk.
RUN_FILE = "results/tracking/run.json"
# Where the champion that a warm start begins from is fetched (train.init_from: champion).
INIT_MODEL = "results/init/model"


wildcard_constraints:
    split="|".join(SPLITS),
    segment=r"\d+",
    trial=r"[^/]+",
    # A name of predict.inputs: its shards' files lie in a folder of that name.
    name=r"[^/]+",
    shard=r"\d+",


def settings(*sections):
    """The named config sections as the JSON a script takes with --settings; `section.key`
    passes one key of a section, so that the rule's params change only with that key.

    Returned as a function so Snakemake does not read the braces of templates as wildcards.
    """
    chosen = {}
    for name in sections:
        section, _, key = name.partition(".")
        if key:
            chosen.setdefault(section, {})[key] = config[section][key]
        elif section in config:
            chosen[section] = config[section]
    text = json.dumps(chosen)
    return lambda wildcards: text


def script(name):
    """A stage script by absolute path, so the workflow also runs with `--directory` elsewhere."""
    return str(WORKFLOW_ROOT / "scripts" / f"{name}.py")


def code_sha256(name):
    """sha256 of a stage script and of every module of the account_tax package it imports. A
    rule takes it as a param, so that under Snakemake's default triggers editing the script or
    the package code it runs re-runs the rule (and what follows), and editing code it does not
    run does not."""
    return account_tax.code_hash.code_sha256(Path(script(name)))


UPLOAD_RULES = {"upload_checkpoints", "upload_model", "retain"}


def check_uploads_can_run():
    """Called before any job runs: when uploads are among the jobs, the experiment's name must
    fit in an S3 key and S3 must have credentials, an endpoint that answers and the bucket, else
    the run stops at once saying what to set.
    """
    if not any(job.rule.name in UPLOAD_RULES for job in workflow.dag.needrun_jobs()):
        return
    from account_tax.storage.s3 import UploadSettings, unusable_key_part, unusable_store

    experiment = config["tracking"]["experiment"]
    if unusable_key_part(experiment):
        raise WorkflowError(
            f"uploads are on (upload.enabled), and tracking.experiment {experiment!r} cannot"
            " name a folder of S3 keys (a `/`, `.` or `..`): name the experiment without them,"
            " or set `upload: {enabled: false}`"
        )
    problem = unusable_store(UploadSettings.of(config["upload"]))
    if problem:
        raise WorkflowError(
            f"uploads are on (upload.enabled) but S3 cannot take them: {problem}. Set"
            " AWS_ENDPOINT_URL (a server other than AWS), AWS_ACCESS_KEY_ID and"
            " AWS_SECRET_ACCESS_KEY (or AWS_PROFILE); or run `make run CONFIG=<your config>`"
            " without them, which starts a local S3 server; or set `upload: {enabled: false}`"
            " in your config"
        )


def check_backtest_can_run():
    """Called before any job runs: a backtest among the jobs needs dated records with ids."""
    if any(job.rule.name == "backtest_variant" for job in workflow.dag.needrun_jobs()):
        account_tax.backtest.periods.date_column(
            data_spec,
            account_tax.backtest.periods.BacktestSettings.of(config["backtest"]),
        )


def path_options(*not_options):
    """A params function that gives the script every named input and output of its rule as the
    option of that name (`train_records` -> `--train-records PATH`, a list as several values),
    so that each path is written once, in the rule. `not_options` names the inputs and outputs
    the script takes no option for (files that only trigger a re-run, or that it writes into a
    folder it is given). An input the config leaves out (an empty list) gives no option.
    """

    def options(wildcards, input, output):
        named = [*input.items(), *output.items()]
        return " ".join(
            f"--{name.replace('_', '-')} "
            + " ".join(
                shlex.quote(str(path))
                for path in ([paths] if isinstance(paths, str) else paths)
            )
            for name, paths in named
            if name not in not_options and paths
        )

    return options


def raw_input():
    """The raw table, with `pkg:` paths resolved to the file inside the installed package."""
    return str(resolve_input(config["data"]["path"]))


def classes_file():
    """The class list file when the config names one, so that editing it re-runs the data stages."""
    classes = config["data"]["classes"]
    return [classes] if isinstance(classes, str) else []


def labelled_records():
    """The records features reads: clean's, or with data.corrections the corrected ones."""
    if config["data"]["corrections"]:
        return "results/correct/records.parquet"
    return "results/clean/records.parquet"


def track_record():
    """The reviewed suggestions evaluate weighs with validation when it picks the auto-post
    threshold: the correct stage's, where corrections flow in."""
    if config["data"]["corrections"]:
        return "results/correct/track_record.parquet"
    return []


def data_outputs():
    return expand("results/serialize/{split}.parquet", split=SPLITS)


def init_model():
    """The model folder a warm start begins from (train.init_from): the champion, fetched by
    the init_model rule, or a folder the config names; none when training starts afresh.
    """
    init_from = config["train"]["init_from"]
    if init_from == "none":
        return {}
    return {"init_model": INIT_MODEL if init_from == "champion" else init_from}


def champion_version(wildcards):
    """The registered version that holds the champion alias now, a param of init_model: a
    champion moved since the last fetch is fetched again, and an unmoved one is not."""
    from account_tax.tracking.champion import RegisterSettings, current_version
    from account_tax.workflow_run import client, tracking_uri, without_userinfo

    register = RegisterSettings.of(config["register"])
    uri = tracking_uri(Path(RUN_FILE).parent, config["tracking"]["tracking_uri"])
    if uri.startswith("sqlite:") and not Path(uri.removeprefix("sqlite:///")).exists():
        return "none"
    try:
        version = current_version(client(uri), register.name, register.champion_alias)
    except Exception as error:
        # Not the URI itself: it may hold a token.
        reason = str(error).replace(uri, without_userinfo(uri))
        raise WorkflowError(
            f"train.init_from: champion: the Model Registry could not be read ({reason})"
        ) from None
    return "none" if version is None else f"{version.version} (run {version.run_id})"


def train_inputs():
    return {
        "train": "results/serialize/train.parquet",
        "validation": "results/serialize/validation.parquet",
        "label_map": "results/features/label_map.json",
        "deepspeed": config["train"]["deepspeed_config"],
        **init_model(),
    }


def train_settings():
    """The train rule's --settings: the config's train section, or with a sweep the chosen
    trial's settings file (the train rule then resumes that trial's finished run)."""
    return (lambda wildcards: SWEEP_CHOICE) if TRIALS else settings("train")


def sweep_choice():
    return {"sweep_choice": SWEEP_CHOICE} if TRIALS else {}


def trial_settings(wildcards):
    return json.dumps({"train": TRIALS[wildcards.trial].train})


def previous_segment(wildcards):
    segment = int(wildcards.segment)
    if not 1 <= segment <= TRAIN_SEGMENTS:
        raise ValueError(
            f"segment {segment} is not one of 1..{TRAIN_SEGMENTS} (train.segments)"
        )
    return [f"results/train/segment-{segment - 1}/marker.json"] if segment > 1 else []


def train_resources():
    """The train rules' resources in the SLURM executor plugin's terms; elsewhere only mem_mb
    and runtime matter. `gres` asks for GPUs per node, so a profile's set-resources may change
    the count (`gres: gpu:4`) on one node or several. With `nodes` > 1 the job runs one task per
    node: `mpi` makes the plugin run the job's shell command once, on the first node, where the
    launcher's own `srun` starts the tasks; `tasks_per_gpu: 0` stops the plugin from turning
    `tasks` into --ntasks-per-gpu. Memory is per node."""
    launch = config["train_resources"]
    resources = {"mem_mb": launch["mem_mb"], "runtime": launch["runtime_minutes"]}
    if launch["gpus"]:
        resources["gres"] = f"gpu:{launch['gpus']}"
    nodes = launch["nodes"]
    if nodes > 1:
        resources |= {"nodes": nodes, "tasks": nodes, "mpi": "srun", "tasks_per_gpu": 0}
    return resources


def train_threads():
    """CPUs per node: one set of threads per training process."""
    launch = config["train_resources"]
    processes = launch["gpus"] or launch["cpu_processes"]
    return processes * launch["threads_per_process"]


# torchrun that reports a failed worker in one line rather than a traceback.
TORCHRUN = "python -m account_tax.training.launch"


def train_launcher(wildcards, threads, resources):
    """How the train rules start their script, from what the job really got (the config's
    train_resources, or a profile's set-resources and set-threads over them): one process per
    GPU of a node (`gres: gpu[:type]:N`, or `gpu: N` on one node), else `cpu_processes`;
    OMP_NUM_THREADS shares the job's threads (CPUs per node) among them.

    One node: `torchrun --standalone` (through TORCHRUN). Several nodes (SLURM): `srun` starts
    one torchrun per node, and they meet by c10d rendezvous on the first node, where this command
    runs; the port depends on the job id so that two jobs sharing a first node do not collide. The plugin's
    jobstep strips SLURM_* variables except the job id, so the step's shape is given in full.
    """
    launch = config["train_resources"]
    nodes = int(resources.get("nodes") or 1)
    gres = str(resources.get("gres") or "")
    gpu_gres = [
        item.split(":") for item in gres.split(",") if item.split(":")[0] == "gpu"
    ]
    if gpu_gres:
        count = gpu_gres[0][-1]
        gpus = int(count) if count.isdigit() else 1
    elif nodes > 1 and resources.get("gpu"):
        raise WorkflowError(
            "train on several nodes: ask for GPUs per node with the resource gres=gpu:N;"
            " `gpu` counts GPUs for the whole job"
        )
    else:
        gpus = int(resources.get("gpu") or 0)
    processes = gpus or launch["cpu_processes"]
    omp = f"OMP_NUM_THREADS={max(1, threads // processes)}"
    if nodes == 1:
        return f"{omp} {TORCHRUN} --standalone --nproc_per_node {processes}"
    if not resources.get("mpi"):
        raise WorkflowError(
            "train on several nodes: set train_resources.nodes in the config (it adds the"
            " resources one task per node needs) rather than `nodes` in set-resources"
        )
    return (
        f"{omp} srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1"
        f" --cpus-per-task={threads} --mem=0 --kill-on-bad-exit=1"
        f" {TORCHRUN} --nnodes {nodes} --nproc_per_node {processes}"
        " --rdzv_backend c10d --rdzv_endpoint $(hostname):$((29500 + SLURM_JOB_ID % 1000))"
        " --rdzv_id $SLURM_JOB_ID"
    )


def raw_inputs():
    """Every raw input file: its sha256 goes into the MLflow run."""
    return [raw_input(), *classes_file(), *config["data"]["corrections"]]


def predict_shards(name):
    """The `name` files (predictions, rejects or review) of every shard of an input."""

    def files(wildcards):
        return expand(
            f"results/predict/{wildcards.name}/shard-{{shard}}/{name}.parquet",
            shard=range(config["predict"]["shards"]),
        )

    return files


def prediction_path_inputs():
    """What the prediction path is made of, for predict and for the registered model alike:
    both models, evaluate's choice of candidate and threshold, the model's upload receipt where
    uploads are on (every prediction names where the model is stored), the ONNX export where
    predict.runtime asks for one, and the ledger rules where review.rules names columns.
    """
    inputs = {
        "model": f"{TRAINED}/model",
        "baseline_model": "results/baseline/model.joblib",
        "baseline_evidence": "results/baseline/evidence",
        "evaluation": "results/evaluate/metrics.json",
    }
    if config["upload"]["enabled"]:
        inputs["model_receipt"] = "results/upload/model.json"
    if config["predict"]["runtime"] != "torch":
        inputs["onnx"] = "results/export_onnx"
    if config["review"]["rules"]["columns"]:
        inputs["rules"] = "results/ledger_rules/rules.parquet"
        inputs["rules_report"] = "results/ledger_rules/report.json"
    return inputs


def predict_inputs(wildcards):
    """New records as ingest wrote them, and the prediction path."""
    return {
        "records": f"results/predict/{wildcards.name}/records.parquet",
        **prediction_path_inputs(),
    }


def register_inputs(wildcards):
    """The prediction path, the test predictions it is judged by, and the records of the splits
    (the input example: test's, else the next that has rows)."""
    return {
        **prediction_path_inputs(),
        "test_predictions": "results/evaluate/test_predictions.parquet",
        "split_records": expand(
            "results/split/{split}.parquet", split=("test", "validation", "train")
        ),
    }


def upload_outputs():
    """Model receipt and, per training segment, checkpoint receipts and retention reports."""
    if not config["upload"]["enabled"]:
        return []
    segments = range(1, TRAIN_SEGMENTS + 1)
    return [
        "results/upload/model.json",
        *expand("results/upload/checkpoints/segment-{segment}.json", segment=segments),
        *expand("results/retain/segment-{segment}.json", segment=segments),
    ]


def other_outputs():
    """Everything the workflow makes but the resources report, which summarises them."""
    predictions = expand(
        "results/predict/{name}.parquet", name=config["predict"]["inputs"]
    )
    return [
        *data_outputs(),
        "results/evaluate/metrics.json",
        *predictions,
        *upload_outputs(),
        *(["results/register/model.json"] if config["register"]["enabled"] else []),
    ]


def final_outputs():
    return [*other_outputs(), "results/report/resources.png"]
