"""Run the real Snakemake workflow in a scratch folder, the way a user would from a shell."""

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
# Set in every workflow run (unless a test brings its own): no file, log, param or tag may ever
# contain them.
SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "test-secret-7f3a9c1e-never-logged",
    "MLFLOW_TRACKING_TOKEN": "test-token-52b8d04a-never-logged",
}


def snakemake_command(workdir: Path) -> list[str]:
    """This environment's `snakemake` on the repository's Snakefile, working in `workdir`."""
    return [
        str(VENV_BIN / "snakemake"),
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
    ]


def snakemake_env(workdir: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a workflow run: the sentinel secrets, `env`, and this venv first."""
    return (
        dict(os.environ)
        | SECRETS
        | (env or {})
        | {
            # Rules call `python`: this environment's, as after `source .venv/bin/activate`.
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
            "XDG_CACHE_HOME": str(workdir / ".cache"),
            # DeepSpeed compiles a CPU module once (minutes): share the repository's cache.
            "TORCH_EXTENSIONS_DIR": str(REPO / ".cache" / "torch_extensions"),
        }
    )


def snakemake(
    workdir: Path,
    *args: str,
    config: dict | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
):
    """`snakemake` on the repo's Snakefile in `workdir`, with `env` added to the environment;
    returns the CompletedProcess."""
    command = [*snakemake_command(workdir), "--cores", "2"]
    # Targets first: --configfile takes several values and would swallow them.
    command += list(args)
    if config is not None:
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        command += ["--configfile", str(config_path)]
    result = subprocess.run(
        command, cwd=workdir, env=snakemake_env(workdir, env), capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-6000:]}"
        )
    return result


def jobs_run(result) -> dict[str, int]:
    """Rule -> job count from the 'Job stats' table Snakemake prints when it runs jobs."""
    text = result.stderr + result.stdout
    match = re.search(r"Job stats:\n(.*?)\n\n", text, re.S)
    if match is None:
        return {}
    counts = {}
    for line in match.group(1).splitlines()[2:]:
        name, count = line.split()
        if name != "total":
            counts[name] = int(count)
    return counts
