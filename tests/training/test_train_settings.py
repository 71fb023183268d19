import json
import os
from pathlib import Path

import pytest
import torch

from account_tax.training.distributed import set_launch_defaults
from account_tax.training.loop import deepspeed_config
from account_tax.training.precision import cpu_has_bf16, inference_dtype, resolve_precision
from account_tax.training.settings import TrainSettings

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["zero2.json", "zero3.json"])
def test_deepspeed_files_are_completed_from_the_settings(name):
    settings = TrainSettings.of(
        deepspeed_config=str(REPO / "config" / "deepspeed" / name),
        per_device_batch_size=4,
        gradient_accumulation_steps=3,
        learning_rate=1e-3,
    )
    config = deepspeed_config(settings, "fp32", world_size=2)
    assert config["zero_optimization"]["stage"] == int(name[4])
    assert config["train_batch_size"] == 4 * 3 * 2
    assert config["optimizer"]["params"] == {
        "betas": [0.9, 0.999],
        "eps": 1e-08,
        "torch_adam": True,  # nothing to compile
        "lr": 1e-3,
    }
    assert config["bf16"] == {"enabled": False} and config["fp16"]["enabled"] is False
    assert deepspeed_config(settings, "fp16", 1)["fp16"]["loss_scale"] == 0  # dynamic scaling


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"train_batch_size": 8}, "come from the train settings"),
        ({"zero_optimization": {"stage": "auto"}}, 'does not fill in "auto"'),
    ],
)
def test_deepspeed_files_must_not_set_what_the_settings_own(tmp_path, change, message):
    config = json.loads((REPO / "config" / "deepspeed" / "zero2.json").read_text()) | change
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        deepspeed_config(TrainSettings.of(deepspeed_config=str(path)), "fp32", 1)


@pytest.mark.parametrize("native", [True, False])
def test_precision_on_cpu_follows_native_bf16(monkeypatch, native):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == ("bf16" if native else "fp32")
    assert resolve_precision("fp32", cpu) == "fp32"
    assert inference_dtype(cpu) == (torch.bfloat16 if native else torch.float32)
    if native:
        assert resolve_precision("bf16", cpu) == "bf16"
    else:
        with pytest.raises(ValueError, match="no native bf16"):
            resolve_precision("bf16", cpu)
    with pytest.raises(ValueError, match="fp16 needs a GPU"):
        resolve_precision("fp16", cpu)


def test_this_machines_answer_matches_its_cpu_flags():
    """torch's answer against the kernel's own list of CPU features (Linux)."""
    flags = set(Path("/proc/cpuinfo").read_text().split())
    assert cpu_has_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)


def test_a_plain_process_gets_launch_defaults(monkeypatch, tmp_path):
    launch = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    for name in (*launch, "TORCH_EXTENSIONS_DIR"):
        # Set, then removed: monkeypatch then removes what the call sets, so that no later test
        # in this process (a workflow's rank check) inherits a rank.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")  # a value already set is kept
    monkeypatch.chdir(tmp_path)

    set_launch_defaults()

    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == (
        "0",
        "1",
        "0",
    )
    assert int(os.environ["MASTER_PORT"]) > 0
    assert os.environ["TORCH_EXTENSIONS_DIR"] == str(tmp_path / ".cache" / "torch_extensions")
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
