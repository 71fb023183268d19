"""account-tax: raw accounting records to a fine-tuned classifier of account codes."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`account_tax.load` and `account_tax.runs` for notebooks, imported on first use and by
    name: the stage scripts import this package, and neither need nor install what the notebook
    loader imports (tests/test_environments.py follows import statements)."""
    if name in ("load", "runs"):
        import importlib

        return getattr(importlib.import_module("account_tax.notebook"), name)
    raise AttributeError(f"module 'account_tax' has no attribute '{name}'")
