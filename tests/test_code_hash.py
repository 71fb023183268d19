from pathlib import Path

import account_tax
from account_tax.code_hash import code_sha256, imported_package_files

PACKAGE = Path(account_tax.__file__).parent


def test_the_training_code_is_the_modules_training_imports_directly_or_not():
    files = {path.name for path in imported_package_files(PACKAGE / "training.py")}
    # classifier.py only through model.py and head_init.py.
    assert {"training.py", "model.py", "classifier.py", "loss.py", "checkpoint.py"} <= files
    assert "s3.py" not in files and "evaluation.py" not in files


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
