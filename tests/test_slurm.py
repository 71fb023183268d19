"""The workflow on a real SLURM cluster, through `snakemake --profile profiles/slurm`.

The cluster runs on 127.0.0.1 (tests/slurm_cluster.py): two slurmd daemons, n1 and n2, each with
the machine's CPUs and a stand-in GPU, and no accounting, so the plugin's squeue status mode is
used. The data stages and a two-node training job of a tiny BERT (one torchrun per node under
srun, c10d rendezvous, gloo) run as SLURM jobs; the test checks the results and SLURM's own
records of the jobs. The Debian packages are installed when missing; the test skips only when
that fails. The launcher's command for other layouts is checked by dry runs, without a cluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import polars as pl
import pytest
import yaml
from missing_tools import unavailable
from sample_ledger import ledger_config, small_ledger
from slurm_cluster import SlurmCluster, left_by_a_killed_cluster, missing_slurm
from tiny_models import build_tiny_bert
from workflow_runner import REPO, jobs_run, snakemake_command, snakemake_env

pytestmark = pytest.mark.workflow

PROFILE = REPO / "profiles" / "slurm"
SERIALIZED = [f"results/serialize/{name}.parquet" for name in ("train", "validation", "test")]
CORPUS = [
    "memo office supplies rent sales revenue bank no #",
    "vendor acme gmbh amount +1e1 +1e2 month 3",
    *"0123456789|:#+",
] * 3
# The test cluster's limits instead of the profile's: its partition, no accounting (squeue
# status; --slurm-no-account is a no-op in plugin 2.8.0), small memory, one stand-in GPU and
# one CPU per node for training, first status check after 1 s, SLURM logs of successful jobs
# kept as evidence.
CLUSTER_OVERRIDES = [
    "--default-resources",
    "slurm_partition=debug",
    "mem_mb=1000",
    "runtime=10",
    "--set-resources",
    "train:gres=gpu:1",
    "train:cpus_per_gpu=1",
    "train:mem_mb=3000",
    "train:runtime=10",
    "train_trial:gres=gpu:1",
    "train_trial:cpus_per_gpu=1",
    "train_trial:mem_mb=3000",
    "train_trial:runtime=10",
    # The scorers load torch and the model: more than the data stages' memory.
    "baseline:mem_mb=3000",
    "evaluate:mem_mb=3000",
    "predict_shard:mem_mb=3000",
    "--set-threads",
    "train=1",
    "train_trial=1",
    "serialize=1",
    "--slurm-status-command",
    "squeue",
    "--slurm-no-account",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--slurm-keep-successful-logs",
    "--jobs",
    "3",
]


def run_snakemake(workdir, *args, config, env=None, timeout=900):
    """snakemake with the repository's Snakefile in `workdir`; killed (its whole process group)
    if it outlives `timeout`: the executor plugin has been seen to wait forever."""
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = [*snakemake_command(workdir), *args, "--configfile", str(workdir / "config.yaml")]
    env = snakemake_env(workdir, env)
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as timed_out:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"snakemake still running after {timeout} s:\n{stderr[-6000:]}"
        ) from timed_out
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = missing_slurm()
    if reason is not None:
        unavailable(f"no SLURM: {reason}", "make system-packages (as root)")
    with SlurmCluster(
        tmp_path_factory.mktemp("slurm"), nodes=2, cpus=2, gpus_per_node=1, min_job_age=3600
    ) as running:
        yield running


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("slurm-workflow")
    small_ledger(workdir / "ledger.csv")
    config = ledger_config(workdir / "ledger.csv", classes=["4930", "4210", "4400", "1800", "0000"])
    config["train"] = {
        "model": str(build_tiny_bert(workdir / "tiny-bert", CORPUS)),
        "max_length": 48,
        "epochs": 1,
        "per_device_batch_size": 8,
        "learning_rate": 0.01,
        "checkpoint_every_steps": 2,
        "lora": {"r": 4, "alpha": 8},
    }
    config["train_resources"] = {"nodes": 2, "gpus": 1, "mem_mb": 3000, "runtime_minutes": 10}
    targets = [*SERIALIZED, "results/train/segment-1/metrics.json"]
    started = time.monotonic()
    result = run_snakemake(
        workdir,
        *targets,
        "--profile",
        str(PROFILE),
        *CLUSTER_OVERRIDES,
        config=config,
        env=cluster.env,
    )
    elapsed = time.monotonic() - started
    print(f"workflow on SLURM: {elapsed:.1f} s")
    if result.returncode != 0:
        logs = "\n".join(
            f"--- {path.relative_to(workdir)}\n{path.read_text(errors='replace')[-2000:]}"
            for path in sorted(workdir.glob(".snakemake/slurm_logs/**/*.log"))
            + sorted(workdir.glob("logs/**/*.log"))
        )
        raise AssertionError(
            f"snakemake failed ({result.returncode}):\n{result.stderr[-6000:]}\n{logs}\n"
            f"{cluster.logs()}"
        )
    return workdir, result


def slurm_job_ids(workdir) -> dict[str, list[str]]:
    """Rule -> SLURM job ids, from the plugin's per-job logs (.snakemake/slurm_logs/rule_<rule>/
    [<wildcards>/]<jobid>.log)."""
    jobs: dict[str, list[str]] = {}
    for log in (workdir / ".snakemake" / "slurm_logs").glob("rule_*/**/*.log"):
        rule = log.relative_to(workdir / ".snakemake" / "slurm_logs").parts[0][len("rule_") :]
        jobs.setdefault(rule, []).append(log.stem)
    return jobs


def scontrol_job(cluster, job_id: str) -> dict[str, str]:
    result = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id],
        env=os.environ | cluster.env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(re.findall(r"(\w+(?:/\w+)?)=(\S*)", result.stdout))


def test_every_job_ran_as_a_slurm_job(slurm_run, cluster):
    workdir, result = slurm_run
    expected = {"ingest": 1, "clean": 1, "features": 1, "split": 1, "serialize": 3, "train": 1}
    assert jobs_run(result) == expected
    jobs = slurm_job_ids(workdir)
    assert {rule: len(ids) for rule, ids in jobs.items()} == expected
    submitted = re.findall(r"submitted with SLURM jobid (\d+) ", result.stderr + result.stdout)
    assert sorted(submitted) == sorted(i for ids in jobs.values() for i in ids)
    for rule, ids in jobs.items():
        for job_id in ids:
            record = scontrol_job(cluster, job_id)
            assert record["JobState"] == "COMPLETED", (rule, record)
            assert record["Partition"] == "debug"
            assert record["Comment"].startswith(f"rule_{rule}")


def test_data_stages_wrote_the_splits(slurm_run):
    workdir, _ = slurm_run
    frames = [pl.read_parquet(workdir / path) for path in SERIALIZED]
    assert sum(frame.height for frame in frames) == 60
    assert frames[0].columns == ["id", "text", "label_id", "label_source"]
    counts = json.loads((workdir / "results/clean/counts.json").read_text())
    assert counts == {"rows_in": 65, "rows_out": 60, "rejected": 3, "duplicates": 2}


def test_training_spanned_two_nodes_with_one_torchrun_each(slurm_run, cluster):
    workdir, result = slurm_run
    (job_id,) = slurm_job_ids(workdir)["train"]
    record = scontrol_job(cluster, job_id)
    assert (record["NumNodes"], record["NumTasks"], record["NodeList"]) == ("2", "2", "n[1-2]")
    assert (record["TresPerNode"], record["BatchHost"]) == ("gres:gpu:1", "n1")
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in result.stdout + result.stderr
    assert "account_tax.training.launch --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d" in (
        result.stdout + result.stderr
    )
    # The launcher's srun started step 0 of the job on both nodes.
    for node in ("n1", "n2"):
        slurmd_log = (cluster.root / "log" / f"slurmd-{node}.log").read_text()
        assert f"launch task StepId={job_id}.0 " in slurmd_log, node
    metrics = json.loads((workdir / "results/train/segment-1/metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert (workdir / "results/train/segment-1/model/adapter_model.safetensors").is_file()
    log = (workdir / "logs/train/segment-1.log").read_text()
    assert " rank 0 " in log and " rank 1 " in log


def test_sharded_predict_on_slurm_equals_one_job(slurm_run, cluster):
    """`predict.shards: 2` scores the ledger (65 rows, chunks of 16) in two SLURM jobs and gathers
    one predictions, one review and one rejects file, identical (rows, order, values) to those
    of the same rule with one shard, run here without the cluster; the review file's copy for
    spreadsheets, byte for byte."""
    workdir, _ = slurm_run
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    targets = [f"results/predict/ledger{suffix}.parquet" for suffix in ("", ".review", ".rejects")]
    # The model's upload is not what this test is about (and needs an S3 server).
    config["upload"] = {"enabled": False}
    outputs, review_csv = {}, {}
    runs = [
        (2, ["--profile", str(PROFILE), *CLUSTER_OVERRIDES], cluster.env),
        (1, ["--cores", "2"], None),
    ]
    for shards, executor, env in runs:
        config["predict"] = {
            "inputs": {"ledger": str(workdir / "ledger.csv")},
            "shards": shards,
            "chunk_rows": 16,
        }
        result = run_snakemake(workdir, targets[0], *executor, config=config, env=env)
        assert result.returncode == 0, result.stderr[-6000:]
        assert jobs_run(result)["predict_shard"] == shards
        outputs[shards] = [pl.read_parquet(workdir / target) for target in targets]
        review_csv[shards] = (workdir / "results/predict/ledger.review.csv").read_bytes()
    shard_jobs = slurm_job_ids(workdir)["predict_shard"]
    assert len(shard_jobs) == 2
    for job_id in shard_jobs:
        assert scontrol_job(cluster, job_id)["JobState"] == "COMPLETED"
    predictions, review, rejects = outputs[1]
    assert predictions.height + rejects.height == 65 and rejects.height == 2
    assert review.height > 0
    for sharded, whole in zip(outputs[2], outputs[1], strict=True):
        assert sharded.equals(whole)
    assert review_csv[2] == review_csv[1]
    assert pl.read_csv(review_csv[1], infer_schema=False)["id"].equals(review["id"])


def test_a_sweep_runs_each_trial_as_a_slurm_job(slurm_run, cluster):
    """Two trials of a sweep, each a `train_trial` SLURM job with the training resources (two
    nodes, a GPU each), then the choice between them."""
    workdir, _ = slurm_run
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["sweep"] = {"parameters": {"learning_rate": [0.01, 0.02]}}
    result = run_snakemake(
        workdir,
        "results/sweep/selected.json",
        "--profile",
        str(PROFILE),
        *CLUSTER_OVERRIDES,
        config=config,
        env=cluster.env,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    assert jobs_run(result) == {"train_trial": 2, "choose_trial": 1}
    trial_jobs = slurm_job_ids(workdir)["train_trial"]
    assert len(trial_jobs) == 2
    for job_id in trial_jobs:
        record = scontrol_job(cluster, job_id)
        assert record["JobState"] == "COMPLETED"
        assert (record["NumNodes"], record["TresPerNode"]) == ("2", "gres:gpu:1")
    selected = json.loads((workdir / "results/sweep/selected.json").read_text())
    assert selected["train"]["learning_rate"] in {0.01, 0.02}


def test_only_a_link_left_by_a_killed_test_cluster_is_replaced(tmp_path):
    """A suite killed mid-run leaves /etc/slurm/slurm.conf linked into its temporary folder; the
    next run must start, yet a machine's own config is never touched."""
    link = tmp_path / "etc" / "slurm.conf"
    link.parent.mkdir()

    def cluster_config(root, pid):
        (root / "run").mkdir(parents=True)
        (root / "run" / "slurmctld.pid").write_text(f"{pid}\n")
        config = root / "slurm.conf"
        config.write_text(f"ClusterName=ci\nSlurmctldPidFile={root / 'run' / 'slurmctld.pid'}\n")
        return config

    dead = subprocess.Popen(["true"])
    dead.wait()
    link.symlink_to(cluster_config(tmp_path / "killed", dead.pid))
    assert left_by_a_killed_cluster(link)
    link.unlink()

    link.symlink_to(tmp_path / "removed" / "slurm.conf")
    assert left_by_a_killed_cluster(link), "a dangling link"
    link.unlink()

    # A live pid that is not slurmctld (the number was reused) does not keep the link.
    link.symlink_to(cluster_config(tmp_path / "reused", os.getpid()))
    assert left_by_a_killed_cluster(link)
    link.unlink()

    own = tmp_path / "opt" / "slurm.conf"
    own.parent.mkdir()
    own.write_text("ClusterName=site\nSlurmctldPidFile=/run/slurmctld.pid\n")
    link.symlink_to(own)
    assert not left_by_a_killed_cluster(link), "a link to a machine's own config"
    link.unlink()
    link.write_text("ClusterName=site\n")
    assert not left_by_a_killed_cluster(link), "a machine's own file"


def test_profiles_are_valid_and_default_to_sacct():
    slurm = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    assert slurm["executor"] == "slurm"
    assert slurm["slurm-status-command"] == "sacct"
    assert set(slurm["set-resources"]["train"]) >= {"gres", "cpus_per_gpu", "mem_mb", "runtime"}
    # A rule that asks for every core (Snakemake caps it at --cores, which a cluster run does
    # not set) gets its threads from the profile, else sbatch is asked for all of them.
    for rules in (REPO / "workflow/rules").glob("*.smk"):
        for block in re.split(r"^rule ", rules.read_text(), flags=re.M)[1:]:
            threads = re.search(r"^    threads: (\d+)$", block, re.M)
            rule = block.split(":", 1)[0]
            assert not threads or int(threads[1]) <= 64 or rule in slurm["set-threads"], rule
    squeue = "# slurm-status-command: squeue"
    assert squeue in (REPO / "profiles/slurm/config.yaml").read_text()
    # profiles/default is the workflow profile of every run, cluster runs too, and wins over
    # --profile: no cores (a cap on every cluster job's threads), nothing the cluster profile
    # sets differently.
    default = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    assert not set(default) & {"cores", "jobs", "executor", "latency-wait", "default-resources"}
    assert {key: slurm[key] for key in set(default) & set(slurm)} == {
        key: default[key] for key in set(default) & set(slurm)
    }


@pytest.mark.parametrize(
    ("train_resources", "extra", "expected"),
    [
        (
            {"gpus": 2},
            [],
            "OMP_NUM_THREADS=1 python -m account_tax.training.launch --standalone"
            " --nproc_per_node 2 ",
        ),
        (
            {"cpu_processes": 2, "threads_per_process": 2},
            [],
            "OMP_NUM_THREADS=2 python -m account_tax.training.launch --standalone"
            " --nproc_per_node 2 ",
        ),
        # A profile's set-resources decide the GPUs per node; the launcher follows them.
        (
            {"gpus": 1},
            ["--set-resources", "train:gres=gpu:a100:4", "--set-threads", "train=16"],
            "OMP_NUM_THREADS=4 python -m account_tax.training.launch --standalone"
            " --nproc_per_node 4 ",
        ),
        (
            {"nodes": 4, "gpus": 8, "threads_per_process": 4},
            [],
            "OMP_NUM_THREADS=4 srun --nodes=4 --ntasks=4 --ntasks-per-node=1 --cpus-per-task=32"
            " --mem=0 --kill-on-bad-exit=1 python -m account_tax.training.launch --nnodes 4"
            " --nproc_per_node 8"
            " --rdzv_backend c10d --rdzv_endpoint $(hostname):$((29500 + SLURM_JOB_ID % 1000))"
            " --rdzv_id $SLURM_JOB_ID ",
        ),
    ],
)
def test_launcher_follows_the_job_resources(tmp_path, train_resources, extra, expected):
    """Dry runs (no cluster needed): the train rule's command for one and several nodes."""
    small_ledger(tmp_path / "ledger.csv")
    config = ledger_config(tmp_path / "ledger.csv")
    config["train_resources"] = train_resources
    result = run_snakemake(
        tmp_path,
        "results/train/segment-1/metrics.json",
        "--dry-run",
        "--printshellcmds",
        "--cores",
        "64",
        *extra,
        config=config,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert expected in result.stdout + result.stderr
