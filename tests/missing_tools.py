"""What a test does when a tool it needs is missing."""

import os

import pytest


def unavailable(what: str, install: str) -> None:
    """A tool a test needs is missing: in CI (CI set) the test fails, so that a green run never
    hides an unrun check; elsewhere it is skipped with the step that installs the tool."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI must have it: {install})")
    pytest.skip(f"{what}: {install}")
