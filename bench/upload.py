"""Upload benchmark: our verified checkpoint upload against a raw boto3 `upload_file`.

    python bench/upload.py --size-mb 200 --repeats 5

Starts a local SeaweedFS (its data in /dev/shm, so its writes do not touch the disk measured),
writes a synthetic checkpoint of --size-mb (one large file, like a model state, and smaller ones
like optimizer shards and RNG states) and then alternates, --repeats times and to a fresh key
prefix each time:

* ours: `upload_checkpoint` (a hash pass that checks the manifest and computes the checksums,
  the transfer with SHA-256 checksums, one head_object per object, the receipt);
* raw: `client.upload_file` of the same files with the same TransferConfig and nothing else
  (botocore's default CRC32 checksums, no verification).

Hashing alone (`digest_file` over every file: the SHA-256 for the manifest check and the S3
checksums) is also timed: it is the work of ours that raw does not do, and ours overlaps most of
it with the transfer.

Retention's check before a deletion is timed too, on the receipt of each upload of ours: the
question to S3 (`missing_from_store`: one HEAD per object of the receipt, several at once) against
the local half of the same check, which hashes every file again (`proven_by`).

Throughput is the checkpoint's size over the wall time of the whole call; the ratio is ours over
raw, as the ratio of the medians and as the median of the per-repeat ratios. Extra disk used by our
upload is measured three ways while it runs: the bytes this process wrote to storage
(/proc/self/io write_bytes, which counts page-cache writes when they are made; the receipt is
the only file written), the largest free-space drop of the checkpoint's filesystem (other
processes on the machine add noise), and any open file outside the checkpoint folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil

from account_tax.io import sha256_file, write_json
from account_tax.storage import s3server
from account_tax.storage.manifest import (
    MANIFEST,
)
from account_tax.storage.retention import proven_by
from account_tax.storage.s3 import (
    MIB,
    RunInfo,
    UploadSettings,
    client,
    digest_file,
    missing_from_store,
    upload_checkpoint,
)

BUCKET = "bench"


def make_checkpoint(directory: Path, size_mb: int) -> Path:
    """One large file with 80 % of the bytes, the rest in four shards, plus small files."""
    large = size_mb * 4 // 5
    sizes = {"model_states.pt": large * MIB}
    sizes |= {f"optim_states_rank{i}.pt": (size_mb - large) * MIB // 4 for i in range(4)}
    sizes |= {f"rng_state_rank{i}.pt": 15_000 for i in range(2)}
    for name, size in sizes.items():
        with (directory / name).open("wb") as handle:
            for offset in range(0, size, 16 * MIB):
                handle.write(os.urandom(min(16 * MIB, size - offset)))
    files = {name: sha256_file(directory / name) for name in sizes}
    write_json(directory / MANIFEST, {"step": 1, "metrics": {}, "files": files})
    return directory


class DiskWatch:
    """Samples free space and open files in a thread while an upload runs."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = str(checkpoint)
        self.process = psutil.Process()
        self.stop = threading.Event()
        self.lowest_free = self.free()
        self.foreign_files: set[str] = set()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def free(self) -> int:
        return psutil.disk_usage(self.checkpoint).free

    def written(self) -> int:
        return self.process.io_counters().write_bytes

    def sample(self) -> None:
        while not self.stop.is_set():
            self.lowest_free = min(self.lowest_free, self.free())
            for file in self.process.open_files():
                if not file.path.startswith(self.checkpoint):
                    self.foreign_files.add(file.path)
            time.sleep(0.02)

    def __enter__(self) -> DiskWatch:
        self.start_free, self.start_written = self.free(), self.written()
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        self.thread.join()
        self.bytes_written = self.written() - self.start_written
        self.free_drop = self.start_free - self.lowest_free


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200, help="checkpoint size in MiB")
    parser.add_argument("--repeats", type=int, default=5)
    defaults = UploadSettings.of()
    parser.add_argument("--threshold-mb", type=int, default=defaults.multipart_threshold_mb)
    parser.add_argument("--chunksize-mb", type=int, default=defaults.multipart_chunksize_mb)
    parser.add_argument("--concurrency", type=int, default=defaults.max_concurrency)
    parser.add_argument("--work-dir", type=Path, default=None, help="where the checkpoint goes")
    parser.add_argument("--output", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(dir="/dev/shm", prefix="bench-s3-") as server_dir,
        tempfile.TemporaryDirectory(dir=args.work_dir, prefix="bench-upload-") as work,
    ):
        server = s3server.start(Path(server_dir), bucket=BUCKET)
        try:
            os.environ.update(server.env())
            results = run(args, server, Path(work))
        finally:
            server.stop(grace_s=2)
    print(json.dumps(results, indent=2))
    if args.output:
        write_json(args.output, results)


def run(args: argparse.Namespace, server: s3server.S3Server, work: Path) -> dict:
    settings = UploadSettings.of(
        bucket=BUCKET,
        prefix="bench",
        multipart_threshold_mb=args.threshold_mb,
        multipart_chunksize_mb=args.chunksize_mb,
        max_concurrency=args.concurrency,
    )
    checkpoint = work / "step-000000001"
    checkpoint.mkdir()
    make_checkpoint(checkpoint, args.size_mb)
    files = sorted(p for p in checkpoint.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    s3, config = client(settings), settings.transfer_config()
    ours, raw, hashing, watches = [], [], [], []
    s3_check, local_check = [], []
    for repeat in range(args.repeats):
        # Alternate which goes first, so neither always finds the server or cache warmer.
        order = ["ours", "raw"] if repeat % 2 == 0 else ["raw", "ours"]
        began = time.perf_counter()
        for path in files:
            digest_file(path, config)
        hashing.append(time.perf_counter() - began)
        for kind in order:
            if kind == "ours":
                run_info = RunInfo(run_id=uuid.uuid4().hex, experiment_name="bench")
                with DiskWatch(checkpoint) as watch:
                    began = time.perf_counter()
                    receipt = upload_checkpoint(
                        checkpoint,
                        checkpoint.name,
                        run_info,
                        settings,
                        work / "receipt.json",
                        s3=s3,
                    )
                    ours.append(total / MIB / (time.perf_counter() - began))
                watches.append(watch)
                began = time.perf_counter()
                assert missing_from_store(s3, receipt) == []
                s3_check.append(time.perf_counter() - began)
                began = time.perf_counter()
                assert proven_by(checkpoint, receipt) is None
                local_check.append(time.perf_counter() - began)
            else:
                prefix = f"raw/{uuid.uuid4().hex}/"
                began = time.perf_counter()
                for path in files:
                    s3.upload_file(str(path), BUCKET, prefix + path.name, Config=config)
                raw.append(total / MIB / (time.perf_counter() - began))
    return {
        "checkpoint_mib": round(total / MIB, 1),
        "files": len(files),
        "repeats": args.repeats,
        "transfer": {
            "multipart_threshold_mb": args.threshold_mb,
            "multipart_chunksize_mb": args.chunksize_mb,
            "max_concurrency": args.concurrency,
        },
        "ours_mib_s": [round(x, 1) for x in ours],
        "raw_mib_s": [round(x, 1) for x in raw],
        "ours_median_mib_s": round(statistics.median(ours), 1),
        "raw_median_mib_s": round(statistics.median(raw), 1),
        "ratio_of_medians": round(statistics.median(ours) / statistics.median(raw), 3),
        # Each repeat runs both back to back: their ratio is less exposed to load that changes
        # over the run (other work on the machine) than the ratio of the medians.
        "median_ratio_per_repeat": round(
            statistics.median(o / r for o, r in zip(ours, raw, strict=True)), 3
        ),
        "hashing_alone_median_s": round(statistics.median(hashing), 3),
        "retention_s3_check_median_s": round(statistics.median(s3_check), 4),
        "retention_local_rehash_median_s": round(statistics.median(local_check), 4),
        "retention_s3_check_over_rehash": round(
            statistics.median(s3_check) / statistics.median(local_check), 3
        ),
        "ours_bytes_written_max": max(w.bytes_written for w in watches),
        "ours_free_space_drop_max_mib": round(max(w.free_drop for w in watches) / MIB, 1),
        "ours_open_files_outside_checkpoint": sorted(
            set().union(*(w.foreign_files for w in watches))
        ),
        "cpu_count": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    main()
