"""Progress in a log file: plain lines, no carriage-return redraws."""

import logging
import subprocess
import sys

from account_tax.progress import progress_bar


def test_a_bar_in_a_log_file_writes_whole_lines(caplog, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    with caplog.at_level(logging.INFO, logger="account_tax.progress"):
        bar = progress_bar(total=50, desc="train", unit="step")
        for _ in range(50):
            bar.update()
        bar.close()
    lines = [record.getMessage() for record in caplog.records]
    # The first draw and the last; no redraw between them within 30 s.
    assert len(lines) == 2
    assert lines[0].startswith("train:   0%") and lines[-1].startswith("train: 100%")
    assert "50/50" in lines[-1]
    assert not any("\r" in line for line in lines)


def test_a_stage_in_a_log_file_has_no_carriage_returns(tmp_path):
    """The libraries' own bars (weights loading, artifact downloads) are off in a log file."""
    script = (
        "from account_tax import cli\n"
        "from transformers.utils import logging as tl\n"
        "from tqdm.auto import tqdm\n"
        "def main():\n"
        "    assert not tl.is_progress_bar_enabled()\n"
        "    import os; assert os.environ['MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR'] == 'false'\n"
        "    for _ in tl.tqdm(range(3), desc='weights'): pass\n"
        "cli.run(main)\n"
    )
    log = tmp_path / "stage.log"
    with log.open("w") as out:
        subprocess.run([sys.executable, "-c", script], stdout=out, stderr=out, check=True)
    assert "\r" not in log.read_text()
