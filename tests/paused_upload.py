"""An upload in a process of its own that stops mid-transfer, for a test to kill it there.

    python paused_upload.py SOURCE NAME RECEIPT RUN_FILE SETTINGS_JSON PAUSE_AFTER_BYTES

Once PAUSE_AFTER_BYTES have been sent it prints `paused` and blocks its transfer thread for good:
the multipart upload is open on the server, with parts stored, and the checkpoint lock is held.
"""

import json
import sys
import threading
from pathlib import Path

from account_tax.storage.s3 import RunInfo, UploadSettings, upload_checkpoint


def main() -> None:
    source, name, receipt, run_file, settings, pause_after = sys.argv[1:]
    sent = 0
    never = threading.Event()

    def progress(amount: int) -> None:
        nonlocal sent
        sent += amount
        if sent >= int(pause_after):
            print("paused", flush=True)
            never.wait()

    upload_checkpoint(
        Path(source),
        name,
        RunInfo.from_file(Path(run_file)),
        UploadSettings.of(**json.loads(settings)),
        Path(receipt),
        on_progress=progress,
    )


if __name__ == "__main__":
    main()
