"""A real S3 server (SeaweedFS on 127.0.0.1) shared by the whole test session.

Test modules load this with `pytest_plugins = ["s3_fixtures"]`. The server starts when a test
first asks for it and is stopped at the end of the session.
"""

from __future__ import annotations

import os
import uuid

import pytest
from s3_helpers import BUCKET

from account_tax.storage import s3server
from account_tax.storage.s3 import RunInfo, UploadSettings


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = s3server.start(tmp_path_factory.mktemp("seaweedfs"), bucket=BUCKET)
    yield server
    # A clean stop takes SeaweedFS about 15 s; this server's data is thrown away anyway.
    server.stop(grace_s=2)


@pytest.fixture
def s3_env(s3_server, monkeypatch, tmp_path):
    """Only the standard AWS variables, pointing at the server, for the test and its children.

    The user's own AWS config files and profile are hidden, so nothing else can take part.
    """
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def upload_settings(s3_env) -> UploadSettings:
    """Small parts, so a 12 MiB file is a three-part upload.

    Each test gets its own key prefix in the one bucket: every bucket costs SeaweedFS 7 volumes.
    """
    return UploadSettings.of(
        bucket=BUCKET,
        prefix=f"test-{uuid.uuid4().hex[:8]}",
        multipart_threshold_mb=5,
        multipart_chunksize_mb=5,
        max_concurrency=2,
        max_attempts=2,
    )


@pytest.fixture
def run_info() -> RunInfo:
    return RunInfo(run_id=uuid.uuid4().hex, experiment_name="account-tax-tests")
