"""Upload a checkpoint to S3 and prove it arrived intact, before anyone may delete it locally.

The S3 client comes from the standard AWS environment and config files only: endpoint
(`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, or a profile's `endpoint_url`), region and credentials;
the workflow config sets only the bucket, the key prefix, and how to transfer and retry.

How an upload is proven. One read of each file computes its SHA-256, which must equal the
checkpoint's manifest, and from the same bytes the checksums S3 works with:

* below the multipart threshold the object is one PUT, and its checksum is the file's SHA-256
  (a full-object checksum);
* at or above it, s3transfer splits the file into parts of a size it derives from the settings
  (`ChunksizeAdjuster`, used here too), each part has its own SHA-256, and S3 reports a
  composite checksum: the SHA-256 of the concatenated part digests, with `-<parts>` appended.
  S3 has no full-object SHA-256 for multipart uploads (full-object multipart checksums exist
  only for the CRC algorithms), so the composite is what can be compared.

These checksums travel with the data (`ChecksumSHA256` on the PUT and on every part), so the
server checks the bytes it receives against the bytes that were hashed and rejects a mismatch
(BadDigest): a file changed or corrupted after it was hashed cannot be stored, and botocore need
not hash the data again. Afterwards `head_object(ChecksumMode=ENABLED)` must report the expected
size and checksum, which proves that the stored object is the file whose SHA-256 goes into the
receipt (and that its parts were assembled in order). A receipt is written only when every
object is proven. Whoever downloads the objects can check each file against the uploaded
manifest.json, which lists their SHA-256.

When the hashing happens. Files sent in one PUT are hashed before anything is sent, so a
mismatch among them refuses the upload outright. Larger files are hashed in a thread while they
upload: each part waits only for its own checksum (hashing runs far ahead of the network), and
the multipart upload is completed only once the whole file matched the manifest; otherwise
s3transfer aborts it and the file never becomes an object. Hashing so costs the upload almost no
time.

The bucket must exist already: before anything is sent, `head_bucket` confirms it, else the
upload stops and names the bucket and the endpoint. The workflow never creates buckets, and some
servers (SeaweedFS among them) would silently create one on the first write to a misspelt name.

Nothing is copied: s3transfer reads each part straight from the file, so an upload needs no disk
beyond the checkpoint itself.

A receipt is trusted again only while it still proves its folder (`receipt_mismatch`): it names
the current manifest and its files, and S3 still holds each object as it says. A segment upload
sends a checkpoint again whose receipt no longer does, and keeps the old receipt beside the new.

The uploader holds the checkpoint's lock (`checkpoint_lock`) for the whole transfer; retention
takes the same lock before it deletes, so a checkpoint can never vanish under a running upload.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import shutil
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import ProgressCallbackInvoker, TransferConfig, create_transfer_manager
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from s3transfer.utils import ChunksizeAdjuster

from account_tax.errors import DataError
from account_tax.io import write_json
from account_tax.settings import SectionView
from account_tax.stage_log import read_run
from account_tax.storage.manifest import (
    MANIFEST,
    STEP_PREFIX,
    ManifestError,
    checkpoint_lock,
    read_manifest,
    unlisted_or_missing,
)

log = logging.getLogger(__name__)

MIB = 1 << 20
READ_BLOCK = MIB


class UploadError(Exception):
    """The transfer or its verification failed. No receipt was written; a re-run may succeed."""


class CheckpointError(DataError):
    """The folder is not a complete checkpoint (no manifest, or files that do not match it)."""


@dataclass(frozen=True)
class UploadSettings(SectionView):
    """The config's `upload` section."""

    SECTION = "upload"
    bucket: str
    prefix: str
    multipart_threshold_mb: int
    multipart_chunksize_mb: int
    max_concurrency: int
    max_attempts: int
    retry_mode: str
    # The workflow's switch for the upload rules; an upload that runs ignores it.
    enabled: bool

    def transfer_config(self) -> TransferConfig:
        return TransferConfig(
            multipart_threshold=self.multipart_threshold_mb * MIB,
            multipart_chunksize=self.multipart_chunksize_mb * MIB,
            max_concurrency=self.max_concurrency,
            # The classic transfer manager splits parts as ChunksizeAdjuster says, which the
            # local composite checksum relies on; the CRT client would choose its own sizes.
            preferred_transfer_client="classic",
        )


@dataclass(frozen=True)
class RunInfo:
    """The MLflow run an upload belongs to: its id keeps two runs' objects apart."""

    run_id: str
    experiment_name: str

    @classmethod
    def from_file(cls, path: Path) -> RunInfo:
        run = read_run(path)
        return cls(run_id=run["run_id"], experiment_name=run["experiment_name"])


def client(settings: UploadSettings):
    """An S3 client configured by the AWS environment; retries as the settings say.

    `total_max_attempts` counts the first attempt too, like AWS_MAX_ATTEMPTS. Botocore's retry
    modes back off with jitter and retry throttling, 5xx and connection errors; s3transfer
    retries a part whose body failed mid-stream.
    """
    config = Config(
        retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts}
    )
    return boto3.session.Session().client("s3", config=config)


@dataclass(frozen=True)
class FileDigest:
    """What one read of a file proves: its SHA-256 and the checksums S3 must see and report."""

    size: int
    sha256: str
    part_checksums: tuple[str, ...]
    """Base64 SHA-256 of each part of a multipart upload; empty for a single PUT."""
    s3_checksum: str
    """What head_object must report: the file's base64 SHA-256, or the parts' composite."""


def part_size(size: int, config: TransferConfig) -> int | None:
    """The part size s3transfer will use for a file of `size` bytes; None for a single PUT."""
    if size < config.multipart_threshold:
        return None
    return ChunksizeAdjuster().adjust_chunksize(config.multipart_chunksize, size)


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def digest_file(
    path: Path, config: TransferConfig, on_part: Callable[[str], None] | None = None
) -> FileDigest:
    """Hash a file once; `on_part` gets each part's base64 SHA-256 as soon as it is known."""
    size = path.stat().st_size
    chunk = part_size(size, config)
    whole, parts = hashlib.sha256(), []
    part, part_left = hashlib.sha256(), chunk

    def part_done() -> None:
        parts.append(b64(part.digest()))
        if on_part is not None:
            on_part(parts[-1])

    buffer = bytearray(READ_BLOCK)
    view = memoryview(buffer)
    # hashlib releases the GIL while it hashes a block, so the part hash runs in a helper thread
    # beside the whole-file hash: one read, two hashes, in the time of one on two cores.
    with path.open("rb") as handle, ThreadPoolExecutor(max_workers=1) as helper:
        while True:
            # A block never straddles a part boundary.
            read = handle.readinto(view[: min(READ_BLOCK, part_left or READ_BLOCK)])
            if not read:
                break
            block = view[:read]
            pending = helper.submit(part.update, block) if chunk is not None else None
            whole.update(block)
            if pending is not None:
                pending.result()  # before the buffer is read into again
                part_left -= read
                if part_left == 0:
                    part_done()
                    part, part_left = hashlib.sha256(), chunk
    if chunk is not None and part_left != chunk:
        part_done()
    if chunk is None:
        checksum = b64(whole.digest())
    else:
        composite = hashlib.sha256(b"".join(base64.b64decode(p) for p in parts)).digest()
        checksum = f"{b64(composite)}-{len(parts)}"
    return FileDigest(size, whole.hexdigest(), tuple(parts), checksum)


class HashPass:
    """Hashes the multipart files of an upload in a thread, ahead of the transfer that sends them.

    A part's request waits for that part's checksum; the completion of a file's multipart upload
    waits for the whole file, and fails if it does not match the manifest (s3transfer then aborts
    the upload). Files are hashed in upload order, and hashing is far faster than any network, so
    the transfer hardly ever waits.
    """

    def __init__(self, directory: Path, expected: Mapping[str, str], config: TransferConfig):
        self.parts: dict[str, list[str]] = {name: [] for name in expected}
        self.digests: dict[str, FileDigest] = {}
        self.error: BaseException | None = None
        self.cancelled = False
        self.condition = threading.Condition()
        self.thread = threading.Thread(
            target=self.run, args=(directory, expected, config), name="hash-pass", daemon=True
        )
        self.thread.start()

    def run(self, directory: Path, expected: Mapping[str, str], config: TransferConfig) -> None:
        try:
            for name, sha256 in expected.items():
                digest = digest_file(directory / name, config, lambda p, n=name: self.publish(n, p))
                if digest.sha256 != sha256:
                    raise CheckpointError(
                        f"{directory}: {name} differs from its {MANIFEST} sha256; not stored"
                    )
                with self.condition:
                    self.digests[name] = digest
                    self.condition.notify_all()
        except BaseException as error:
            with self.condition:
                self.error = error
                self.condition.notify_all()

    def publish(self, name: str, checksum: str) -> None:
        with self.condition:
            if self.cancelled:
                raise CheckpointError("hashing cancelled: the upload failed")
            self.parts[name].append(checksum)
            self.condition.notify_all()

    def part(self, name: str, number: int) -> str:
        with self.condition:
            self.condition.wait_for(
                lambda: len(self.parts[name]) >= number or name in self.digests or self.error
            )
            if len(self.parts[name]) >= number:
                return self.parts[name][number - 1]
        raise self.failure(name)

    def digest(self, name: str) -> FileDigest:
        with self.condition:
            self.condition.wait_for(lambda: name in self.digests or self.error)
            if name in self.digests:
                return self.digests[name]
        raise self.failure(name)

    def failure(self, name: str) -> CheckpointError:
        if isinstance(self.error, CheckpointError):
            return CheckpointError(str(self.error))
        if self.error is not None:
            return CheckpointError(f"cannot read {name}: {self.error}")
        return CheckpointError(f"{name} changed size while it was uploaded")

    def stop(self) -> None:
        with self.condition:
            self.cancelled = True
        self.thread.join()


def check_checkpoint(directory: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The manifest and the sha256 each file must have; refuses what is not a whole checkpoint.

    Whole means: a manifest that is complete JSON, every file it lists present, and no file it
    does not list (that file would be uploaded unverified). The manifest's own entry is the
    sha256 of its bytes as read here.
    """
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint folder")
    try:
        manifest = read_manifest(directory)
    except ManifestError as error:
        raise CheckpointError(str(error)) from None
    unlisted, missing = unlisted_or_missing(directory, manifest)
    if missing or unlisted:
        raise CheckpointError(
            f"{directory}: files do not match {MANIFEST}: missing {missing}, not listed {unlisted}"
        )
    return manifest.fields, {MANIFEST: manifest.sha256} | dict(sorted(manifest.files.items()))


def unusable_key_part(part: str) -> bool:
    """Whether `part` cannot be one folder of an S3 key: empty, `.` or `..`, with a `/` or a
    character that does not print."""
    return not part or part in (".", "..") or "/" in part or not part.isprintable()


def key_prefix(settings: UploadSettings, run: RunInfo, name: str) -> str:
    """`<prefix>/<experiment>/<run id>/<name>/`: a run never writes over another run's objects."""
    parts = [run.experiment_name, run.run_id, name]
    for part in parts:
        if unusable_key_part(part):
            raise DataError(f"not usable in an S3 key: {part!r} (experiment, run id and name)")
    prefix = settings.prefix.strip("/")
    return "/".join([prefix, *parts] if prefix else parts) + "/"


class ProgressLog:
    """Logs every tenth of the bytes sent; called from the transfer threads."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label = total, label
        self.sent = self.logged_tenths = 0
        self.lock = threading.Lock()

    def __call__(self, amount: int) -> None:
        # A part that is retried reports its bytes again with a negative amount first.
        with self.lock:
            self.sent += amount
            tenths = 10 * self.sent // self.total if self.total else 10
            if tenths > self.logged_tenths:
                self.logged_tenths = tenths
                log.info("%s: %d%% of %.1f MiB sent", self.label, 10 * tenths, self.total / MIB)


def upload_checkpoint(
    source: Path,
    name: str,
    run: RunInfo,
    settings: UploadSettings,
    receipt_path: Path,
    *,
    s3=None,
    on_progress: Callable[[int], None] | None = None,
    unless_proven: bool = False,
) -> dict[str, Any]:
    """Upload every file of a complete checkpoint, verify each object, then write the receipt.

    `s3` is a client (default: `client(settings)`); `on_progress` is called from the transfer
    threads with the bytes sent since its last call. With `unless_proven`, a receipt that proves
    the folder once the lock is held (another upload of it ended while this one waited) is
    returned instead. Raises CheckpointError for a folder that is
    not a complete checkpoint or a file that does not match the manifest, and UploadError when the
    bucket is missing or refused, S3 fails, or an object cannot be proven; in all these cases no
    receipt is written (an earlier one at `receipt_path` stays as it was).
    """
    s3 = s3 if s3 is not None else client(settings)
    config = settings.transfer_config()
    prefix = key_prefix(settings, run, name)
    if not source.is_dir():  # checked again under the lock; the lock file needs its parent
        raise CheckpointError(f"{source}: no such checkpoint folder")
    with checkpoint_lock(source):
        if unless_proven and receipt_mismatch(s3, receipt_path, source, settings.bucket) is None:
            log.info(
                "%s: uploaded while this upload waited for it; %s proves it", source, receipt_path
            )
            return read_receipt(receipt_path)
        manifest, expected = check_checkpoint(source)
        sizes = {relative: (source / relative).stat().st_size for relative in expected}
        single = {r: sha for r, sha in expected.items() if part_size(sizes[r], config) is None}
        digests = {relative: digest_file(source / relative, config) for relative in single}
        changed = sorted(r for r, digest in digests.items() if digest.sha256 != single[r])
        if changed:
            raise CheckpointError(f"{source}: files differ from their {MANIFEST} sha256: {changed}")
        check_bucket(s3, settings.bucket)
        total = sum(sizes.values())
        where = f"s3://{settings.bucket}/{prefix}"
        log.info(
            "uploading %s (%d files, %.1f MiB) to %s", source, len(expected), total / MIB, where
        )
        subscribers = [ProgressCallbackInvoker(ProgressLog(total, where))]
        if on_progress is not None:
            subscribers.append(ProgressCallbackInvoker(on_progress))
        hashing = HashPass(
            source, {r: sha for r, sha in expected.items() if r not in single}, config
        )
        try:
            transfer(s3, config, source, settings.bucket, prefix, digests, hashing, subscribers)
        finally:
            hashing.stop()
        digests |= hashing.digests
        objects = [
            verify_object(s3, settings.bucket, prefix + relative, digests[relative])
            | {"path": relative}
            for relative in expected
        ]
        receipt = {
            "bucket": settings.bucket,
            "prefix": prefix,
            "endpoint_url": s3.meta.endpoint_url,
            "source": str(source.resolve()),
            "name": name,
            "experiment_name": run.experiment_name,
            "run_id": run.run_id,
            "step": manifest.get("step"),
            "metrics": manifest.get("metrics"),
            "manifest_sha256": expected[MANIFEST],
            "verified_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "objects": objects,
        }
        write_json(receipt_path, receipt)
    log.info(
        "uploaded and verified %d objects under %s; receipt %s", len(objects), where, receipt_path
    )
    return receipt


PREFLIGHT = Config(connect_timeout=5, read_timeout=10, retries={"total_max_attempts": 1})


def unusable_store(settings: UploadSettings) -> str | None:
    """Why uploads cannot work in this environment, found in seconds before a workflow starts:
    no credentials, an endpoint that does not answer, a bucket that is missing or refused; None
    when the bucket answers."""
    try:
        # A profile that does not exist, or a key without its secret, fails here.
        session = boto3.session.Session()
        if session.get_credentials() is None:
            return "no S3 credentials in the environment"
        s3 = session.client("s3", config=PREFLIGHT)
    except BotoCoreError as error:
        return f"the S3 credentials cannot be read: {error}"
    try:
        check_bucket(s3, settings.bucket)
    except UploadError as error:
        return str(error)
    return None


def check_bucket(s3, bucket: str) -> None:
    """Raise UploadError, naming bucket and endpoint, unless the bucket exists and is ours to use.

    A HEAD response has no body, so S3 reports only the status: 404 for a missing bucket, 403
    for credentials it refuses (or a bucket they may not list).
    """
    where = f"bucket {bucket!r} at endpoint {s3.meta.endpoint_url}"
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code")
        if code in ("404", "NoSuchBucket"):
            raise UploadError(
                f"{where} does not exist; the workflow never creates buckets: create it, or set "
                "upload.bucket to an existing one"
            ) from error
        if code in ("403", "AccessDenied"):
            raise UploadError(
                f"access to {where} refused (403 Forbidden): check the credentials "
                "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) and that they "
                "may use the bucket"
            ) from error
        raise UploadError(f"cannot check {where}: {error}") from error
    except BotoCoreError as error:
        raise UploadError(f"cannot check {where}: {error}") from error


def transfer(
    s3,
    config: TransferConfig,
    source: Path,
    bucket: str,
    prefix: str,
    single: Mapping[str, FileDigest],
    hashing: HashPass,
    subscribers: list,
) -> None:
    """All files through one transfer manager, so small files share its threads with large ones.

    `single` holds the digests of the files sent in one PUT, `hashing` hashes the others. A
    single PUT carries its checksum as an upload argument. s3transfer takes only one checksum per
    file (for a multipart upload it would declare it a full-object SHA-256, which S3 does not
    offer), so parts get theirs, and completions their wait for the whole file, from event
    handlers on the client, found by key. Small files go first, while the large ones are hashed.
    """
    files = [*single, *hashing.parts]
    names = {prefix + relative: relative for relative in files}

    def add_part_checksum(params: dict[str, Any], **_) -> None:
        params["ChecksumSHA256"] = hashing.part(names[params["Key"]], params["PartNumber"])

    def await_whole_file(params: dict[str, Any], **_) -> None:
        hashing.digest(names[params["Key"]])

    handlers = [
        ("before-parameter-build.s3.UploadPart", add_part_checksum),
        ("before-parameter-build.s3.CompleteMultipartUpload", await_whole_file),
    ]
    for event, handler in handlers:
        s3.meta.events.register(event, handler, unique_id=f"{event}-{id(hashing)}")
    try:
        with create_transfer_manager(s3, config) as manager:
            futures = {}
            for relative in files:
                extra_args = {"ChecksumAlgorithm": "SHA256"}
                if relative in single:
                    extra_args["ChecksumSHA256"] = single[relative].s3_checksum
                futures[relative] = manager.upload(
                    str(source / relative), bucket, prefix + relative, extra_args, subscribers
                )
            for relative, future in futures.items():
                try:
                    future.result()
                except (BotoCoreError, ClientError) as error:
                    # Leaving the `with` on an error cancels the transfers still running.
                    raise UploadError(
                        f"upload of {source / relative} to s3://{bucket}/{prefix}{relative} "
                        f"failed (endpoint {s3.meta.endpoint_url}): {error}"
                    ) from error
    finally:
        for event, _ in handlers:
            s3.meta.events.unregister(event, unique_id=f"{event}-{id(hashing)}")


def head_differences(head: Mapping[str, Any], size: int, checksum: str) -> list[str]:
    """How an object's HEAD differs from the size and SHA-256 checksum it should have."""
    problems = []
    if head["ContentLength"] != size:
        problems.append(f"size {head['ContentLength']}, expected {size}")
    if head.get("ChecksumSHA256") != checksum:
        problems.append(f"SHA-256 checksum {head.get('ChecksumSHA256')}, expected {checksum}")
    return problems


def verify_object(s3, bucket: str, key: str, digest: FileDigest) -> dict[str, Any]:
    """The receipt entry of an object whose size and SHA-256 checksum S3 confirms."""
    try:
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except (BotoCoreError, ClientError) as error:
        raise UploadError(f"cannot verify s3://{bucket}/{key}: {error}") from error
    problems = head_differences(head, digest.size, digest.s3_checksum)
    if problems:
        raise UploadError(f"s3://{bucket}/{key} is not the uploaded file: {'; '.join(problems)}")
    reported = head["ChecksumSHA256"]
    return {
        "bucket": bucket,
        "key": key,
        "size": digest.size,
        "sha256": digest.sha256,
        "checksum_sha256": reported,
        "checksum_type": "COMPOSITE" if "-" in reported else "FULL_OBJECT",
        "etag": head["ETag"].strip('"'),
        "version_id": head.get("VersionId"),
        "last_modified": head["LastModified"].isoformat(),
    }


RECEIPT_KEYS = frozenset({"source", "bucket", "prefix", "objects"})
NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})
HEAD_CONCURRENCY = 16


def read_receipt(path: Path) -> dict[str, Any] | None:
    """The one reader of upload receipts: the receipt's fields, or None when the file is missing,
    damaged or not a receipt."""
    try:
        receipt = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(receipt, dict) or not receipt.keys() >= RECEIPT_KEYS:
        return None
    objects = receipt["objects"]
    if not isinstance(objects, list) or not all(
        isinstance(o, dict) and o.keys() >= {"path", "key", "size", "sha256", "checksum_sha256"}
        for o in objects
    ):
        return None
    return receipt


def missing_from_store(s3, receipt: Mapping[str, Any]) -> list[str]:
    """What S3 no longer holds as the receipt says: one entry per object that is gone or whose
    size or SHA-256 checksum differs; empty when all are there. One HEAD per object, several at
    once. Raises UploadError when S3 cannot be asked (unreachable, refused): nothing is known."""
    bucket = receipt["bucket"]

    def problem(entry: Mapping[str, Any]) -> str | None:
        where = f"s3://{bucket}/{entry['key']}"
        try:
            head = s3.head_object(Bucket=bucket, Key=entry["key"], ChecksumMode="ENABLED")
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in NOT_FOUND:
                return f"{where} is gone"
            raise UploadError(f"cannot check {where}: {error}") from error
        except BotoCoreError as error:
            raise UploadError(f"cannot check {where}: {error}") from error
        differences = head_differences(head, entry["size"], entry["checksum_sha256"])
        return f"{where} differs: {'; '.join(differences)}" if differences else None

    objects = receipt["objects"]
    with ThreadPoolExecutor(max_workers=max(1, min(HEAD_CONCURRENCY, len(objects)))) as pool:
        return [found for found in pool.map(problem, objects) if found is not None]


def receipt_mismatch(s3, receipt_path: Path, source: Path, bucket: str) -> str | None:
    """None when the receipt still proves the folder as it is now: it is whole, names `bucket`
    (upload.bucket: an earlier bucket's receipt proves nothing in this one), the current manifest
    and exactly the files and sha256 the manifest lists, and S3 still holds every object as it
    says; else why not (a new upload is due)."""
    receipt = read_receipt(receipt_path)
    if receipt is None:
        return "no receipt" if not receipt_path.exists() else "the receipt is damaged"
    if receipt["bucket"] != bucket:
        return f"the receipt names bucket {receipt['bucket']!r}, not upload.bucket {bucket!r}"
    try:
        manifest = read_manifest(source)
    except ManifestError as error:
        return str(error)
    if receipt.get("manifest_sha256") != manifest.sha256:
        return f"the receipt names another {MANIFEST}"
    expected = {MANIFEST: manifest.sha256} | manifest.files
    if {o["path"]: o["sha256"] for o in receipt["objects"]} != expected:
        return f"the receipt's files or sha256 differ from {MANIFEST}"
    missing = missing_from_store(s3, receipt)
    if missing:
        return f"S3 no longer holds the upload: {'; '.join(missing)}"
    return None


def keep_replaced(receipt_path: Path) -> Path:
    """Copy a receipt about to be replaced beside it, for the record; the copy's name does not
    end in .json, so nothing reads it as a receipt again."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    kept = receipt_path.with_name(f"{receipt_path.name}.replaced-{stamp}")
    shutil.copy2(receipt_path, kept)
    return kept


def upload_segment(
    marker_path: Path, receipts_dir: Path, run: RunInfo, settings: UploadSettings
) -> dict[str, Any]:
    """Upload every complete checkpoint a training segment left (up to its last step) that has
    no matching receipt yet; return an index of the segment's receipts.

    A checkpoint whose receipt still proves it (`receipt_mismatch`) is skipped; one whose
    receipt no longer does (edited or damaged, or S3 lost objects) is uploaded again and its
    receipt replaced. Ones that retention deleted are gone and were proven before. A folder
    still being written is not a `step-*` folder.
    """
    marker = json.loads(marker_path.read_text(encoding="utf-8"))
    run_dir = Path(marker["run_dir"])
    s3 = client(settings)
    receipts, not_uploaded = [], []
    for source in sorted(run_dir.glob(f"{STEP_PREFIX}*")):
        manifest_step = int(source.name.removeprefix(STEP_PREFIX))
        if manifest_step > marker["step"] or not (source / MANIFEST).is_file():
            continue
        name = f"{run_dir.name}-{source.name}"
        receipt_path = receipts_dir / run_dir.name / f"{source.name}.json"
        why = receipt_mismatch(s3, receipt_path, source, settings.bucket)
        if why is not None:
            if receipt_path.exists():
                log.warning(
                    "%s no longer proves %s (%s): uploading again; the old receipt is kept as %s",
                    receipt_path,
                    source,
                    why,
                    keep_replaced(receipt_path),
                )
            try:
                upload_checkpoint(
                    source, name, run, settings, receipt_path, s3=s3, unless_proven=True
                )
            except CheckpointError as error:
                if not source.is_dir():
                    continue  # deleted by retention meanwhile, so proven before
                if manifest_step == marker["step"]:
                    raise
                # An earlier checkpoint changed since training sealed it (a file removed by
                # hand): training would not resume from it either. It keeps no receipt, so
                # retention keeps it; the others still go up.
                log.warning("%s not uploaded: %s", source, error)
                not_uploaded.append({"path": str(source), "why": str(error)})
                continue
        receipts.append(str(receipt_path))
    return {
        "segment": marker["segment"],
        "step": marker["step"],
        "receipts": receipts,
        "not_uploaded": not_uploaded,
    }
