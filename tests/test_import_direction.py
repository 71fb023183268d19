"""Imports point one way between the package's stage folders: data and storage use only the
shared helpers at the top, training uses data and storage, evaluation uses training, tracking
uses everything, and so does the backtest, which replays the whole workflow. So editing
evaluation code never changes what training runs (its code hash, and with it a checkpoint's
fingerprint and the train rule's re-run trigger). And a job loads no library it has no use for:
one that runs no model would pay seconds to import torch, PEFT and transformers for nothing. The
development guide's map of the package names every module."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from reviewed_ledger import CLEAN_COUNTS, clean_ledger
from sample_ledger import ledger_config
from test_baseline import write_dataset

import account_tax
from account_tax.code_hash import imported_package_files
from account_tax.settings import complete

PACKAGE = Path(account_tax.__file__).parent
HELPERS = "helpers"
# What each stage folder may import besides itself; the top-level modules are HELPERS.
ALLOWED = {
    HELPERS: set(),
    "data": {HELPERS},
    "storage": {HELPERS},
    "training": {HELPERS, "data", "storage"},
    "evaluation": {HELPERS, "data", "storage", "training"},
    "tracking": {HELPERS, "data", "storage", "training", "evaluation"},
    "backtest": {HELPERS, "data", "storage", "training", "evaluation", "tracking"},
}
# The notebook loader (`account_tax.load`) reads every stage's results for a person.
READERS_OF_EVERYTHING = {"notebook.py", "__init__.py"}


def stage_of_module(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ALLOWED else HELPERS


def stage_of_file(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else HELPERS


def package_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name for name in found if name.split(".")[0] == "account_tax"]


def wrong_arrows() -> list[str]:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() in READERS_OF_EVERYTHING:
            continue
        source = stage_of_file(path)
        for module in package_imports(path):
            target = stage_of_module(module)
            if target != source and target not in ALLOWED[source]:
                wrong.append(f"{path.relative_to(PACKAGE)} ({source}) imports {module} ({target})")
    return wrong


def test_imports_between_stage_folders_point_one_way():
    assert wrong_arrows() == []


def test_the_check_sees_a_wrong_arrow(monkeypatch, tmp_path):
    """A training module that imports evaluation is caught (the check can fail)."""
    package = tmp_path / "account_tax"
    (package / "training").mkdir(parents=True)
    (package / "evaluation").mkdir()
    (package / "training" / "loop.py").write_text("from account_tax.evaluation.metrics import x\n")
    (package / "evaluation" / "metrics.py").write_text("from account_tax.training import loop\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    assert wrong_arrows() == [
        "training/loop.py (training) imports account_tax.evaluation.metrics (evaluation)"
    ]


def test_training_code_reaches_no_evaluation_module():
    """What decides train's re-run (the script's code hash) and a checkpoint's fingerprint (the
    training loop's) is the code they import: no evaluation module is part of it."""
    scripts = PACKAGE.parents[1] / "scripts"
    for path in (scripts / "train.py", PACKAGE / "training" / "loop.py"):
        reached = imported_package_files(path)
        assert PACKAGE / "training" / "inference.py" in reached
        assert not [f for f in reached if f.is_relative_to(PACKAGE / "evaluation")], path
    evaluate = imported_package_files(scripts / "evaluate.py")
    assert PACKAGE / "evaluation" / "metrics.py" in evaluate


@pytest.mark.parametrize(
    ("script", "not_loaded"),
    [
        # It builds and writes a TF-IDF evidence index, which only the jobs that predict search;
        # every workflow run and each backtest period runs one.
        ("baseline", ("torch", "peft", "transformers", "deepspeed")),
        # It only puts the shards' files together: every prediction runs it.
        ("predict_gather", ("torch", "peft", "transformers", "deepspeed")),
        # It tabulates and plots the periods' figures that the variants' jobs scored.
        ("backtest_summary", ("torch", "peft", "transformers", "deepspeed")),
        # It copies the champion's files out of the registry.
        ("init_model", ("torch", "peft", "transformers", "deepspeed")),
        # It reads a workbook only where data.corrections names one; CSV and Parquet need none.
        ("correct", ("openpyxl", "torch", "peft", "transformers", "deepspeed")),
    ],
)
def test_a_job_loads_no_library_it_has_no_use_for(script, not_loaded):
    assert loaded(script, ["--help"], not_loaded) == []


# What a job that runs no model must not load as it works, also inside its functions.
MODEL_LIBRARIES = ("torch", "peft", "transformers", "deepspeed")


def test_the_baseline_job_loads_no_model_library_as_it_trains(tmp_path):
    """It builds its evidence index (training/evidence.py imports torch where it searches one)
    without searching it."""
    paths = write_dataset(tmp_path)
    arguments = [
        "--train", paths.train, "--validation", paths.validation, "--test", paths.test,
        "--label-map", paths.label_map, "--model-output", paths.model,
        "--metrics", paths.metrics, "--predictions", paths.predictions,
        "--evidence", paths.evidence, "--settings", "{}",
    ]  # fmt: skip
    assert loaded("baseline", arguments, MODEL_LIBRARIES) == []
    assert paths.metrics.is_file()


def test_the_correct_job_reads_csv_corrections_without_a_workbook_library(tmp_path):
    classes = ["4930", "4210", "4400", "1800", "0000"]
    _, records = clean_ledger(tmp_path, classes)
    reviewed = tmp_path / "reviewed.csv"
    reviewed.write_text("entry_id,account\nE00001,4210\n")
    config = complete(
        ledger_config(tmp_path / "ledger.csv", classes=classes, corrections=[str(reviewed)])
    )
    out = tmp_path / "correct"
    arguments = [
        "--input", records, "--clean-counts", tmp_path / CLEAN_COUNTS,
        "--corrections", reviewed, "--output", out / "records.parquet",
        "--rejects", out / "rejects.parquet", "--counts", out / "counts.json",
        "--track-record", out / "track_record.parquet", "--summary", out / "summary.tsv",
        "--settings", json.dumps(config),
    ]  # fmt: skip
    assert loaded("correct", arguments, ("openpyxl", *MODEL_LIBRARIES)) == []
    assert json.loads((out / "counts.json").read_text())["applied"] == 1


def loaded(script: str, arguments: list, libraries: tuple[str, ...]) -> list[str]:
    """Which of `libraries` are in sys.modules once scripts/`script`.py has run with `arguments`
    in a new process (and ended well)."""
    path = PACKAGE.parents[1] / "scripts" / f"{script}.py"
    code = f"""
import runpy, sys
sys.argv = [{path.name!r}, *{[str(argument) for argument in arguments]!r}]
try:
    runpy.run_path({str(path)!r}, run_name="__main__")
except SystemExit as exit_:
    if exit_.code:
        raise
print(sorted(name for name in {libraries!r} if name in sys.modules))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return ast.literal_eval(run.stdout.strip().splitlines()[-1])


def test_the_development_guide_names_every_module_where_it_lives():
    """docs/development.md's table of the package's folders, and its list of the modules at the
    top, name every module there is."""
    guide = (PACKAGE.parents[1] / "docs" / "development.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)/` \| (.+) \|$", guide, flags=re.MULTILINE))
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert set(rows) == folders
    top = re.search(r"^At the top: (.+?)\n\n", guide, flags=re.MULTILINE | re.DOTALL).group(1)
    named = {folder: set(re.findall(r"`(\w+)`", row)) for folder, row in rows.items()}
    named[HELPERS] = set(re.findall(r"`(\w+)`", top))
    for folder, names in named.items():
        where = PACKAGE if folder == HELPERS else PACKAGE / folder
        modules = {path.stem for path in where.glob("*.py")} - {"__init__"}
        assert modules <= names, (folder, sorted(modules - names))
