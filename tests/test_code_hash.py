import shutil
from pathlib import Path

import account_tax
from account_tax.code_hash import code_sha256, imported_package_files

PACKAGE = Path(account_tax.__file__).parent


def test_the_training_code_is_the_modules_the_loop_imports_directly_or_not():
    loop = PACKAGE / "training" / "loop.py"
    files = {str(path.relative_to(PACKAGE)) for path in imported_package_files(loop)}
    # classifier.py only through model.py and head_init.py.
    expected = {"loop.py", "model.py", "classifier.py", "loss.py", "checkpoint.py"}
    assert {f"training/{name}" for name in expected} <= files
    assert {"settings.py", "storage/manifest.py"} <= files
    assert "storage/s3.py" not in files and "evaluation/assessment.py" not in files


def test_an_edit_to_an_imported_module_changes_the_hash(tmp_path, monkeypatch):
    package = tmp_path / "account_tax"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from account_tax.b import f\n")
    (package / "b.py").write_text("def f():\n    return 1\n")
    (package / "c.py").write_text("x = 1\n")
    monkeypatch.setattr("account_tax.code_hash.PACKAGE", package)
    before = code_sha256(package / "a.py")
    (package / "c.py").write_text("x = 2\n")
    assert code_sha256(package / "a.py") == before
    (package / "b.py").write_text("def f():\n    return 2\n")
    assert code_sha256(package / "a.py") != before


def test_the_hash_does_not_depend_on_where_the_package_lies(tmp_path, monkeypatch):
    """The same code in another folder (a copy of the repository, another clone) has the same
    hash: the train rule of a moved checkout is not re-run, its checkpoints still resume."""
    script = Path(__file__).parents[1] / "scripts" / "ingest.py"
    here = code_sha256(script)
    copy = tmp_path / "elsewhere" / "account_tax"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr("account_tax.code_hash.PACKAGE", copy)
    assert code_sha256(script) == here
    (copy / "data" / "ingest.py").write_text("# edited\n", encoding="utf-8")
    assert code_sha256(script) != here
