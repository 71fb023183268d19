"""`train.compile`: the same training step through torch.compile, with batches padded to length
buckets so that shapes repeat. Models without dropout here: compiled code draws its dropout masks
from another random stream, so only a model without dropout can give the eager losses."""

import json
import subprocess
from pathlib import Path

import pytest
import torch

from account_tax.training.batching import BucketPadding, length_buckets, on_device
from account_tax.training.loop import compiled_graphs
from account_tax.training.loss import forward_loss
from account_tax.training.model import add_lora, build_model, load_tokenizer
from account_tax.training.settings import LoraSettings

REPO = Path(__file__).resolve().parents[2]


def test_buckets_are_powers_of_two_up_to_max_length():
    assert length_buckets(128) == (16, 32, 64, 128)
    assert length_buckets(48) == (16, 32, 48)
    assert length_buckets(16) == (16,)


def test_a_batch_is_padded_to_the_shortest_bucket_that_holds_it(tiny_bert_without_dropout):
    tokenizer = load_tokenizer(tiny_bert_without_dropout)
    padding = BucketPadding(tokenizer, (16, 32, 48))
    rows = [{"input_ids": [5] * n, "attention_mask": [1] * n, "labels": 0} for n in (3, 17)]
    batch = padding(rows)
    assert batch["input_ids"].shape == (2, 32)
    assert batch["attention_mask"].sum(dim=1).tolist() == [3, 17]
    assert padding(rows[:1])["input_ids"].shape == (1, 16)


def batch_of(tokenizer, rows: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, len(tokenizer), (rows, length), generator=generator)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones(rows, length, dtype=torch.long),
        "labels": torch.randint(0, 4, (rows,), generator=generator),
    }


@pytest.mark.slow
def test_a_new_bucket_compiles_once_and_a_smaller_batch_not_at_all(tiny_bert_without_dropout):
    torch.manual_seed(0)
    model = add_lora(
        build_model(tiny_bert_without_dropout, list("abcd"), "cosine"), LoraSettings.of()
    )
    model.compile(dynamic=False)
    tokenizer, weights = load_tokenizer(tiny_bert_without_dropout), torch.ones(4)

    def step(rows: int, length: int) -> int:
        batch = on_device(
            batch_of(tokenizer, rows, length, rows + length), torch.device("cpu"), True
        )
        loss, _ = forward_loss(model, batch, weights)
        loss.backward()
        return compiled_graphs()

    first = step(8, 16)
    assert first >= 1
    assert step(8, 16) == first  # the same shape
    assert step(5, 16) == first  # the last, smaller batch of an epoch
    assert step(8, 32) == first + 1  # a new bucket: exactly one more graph
    assert step(3, 32) == first + 1


@pytest.mark.slow
def test_compiled_training_gives_the_eager_losses(
    tiny_bert_without_dropout, ledger, run_training, tiny_settings, tmp_path
):
    settings = tiny_settings(
        tiny_bert_without_dropout, lora={"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}
    )
    eager = run_training(ledger, tmp_path / "eager", settings)
    compiled = run_training(ledger, tmp_path / "compiled", settings | {"compile": True})

    def history(name: str) -> list[dict]:
        lines = (tmp_path / name / "history.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    steps = history("eager")
    assert len(steps) == len(history("compiled")) == eager["steps"] > 10
    for plain, fused in zip(steps, history("compiled"), strict=True):
        # Padded to buckets instead of to each batch's longest row: masked, so equal up to the
        # order of floating-point sums.
        assert fused["loss"] == pytest.approx(plain["loss"], rel=1e-4, abs=1e-5)
    assert compiled["validation_macro_f1"] == eager["validation_macro_f1"]
    assert compiled["validation_loss"] == pytest.approx(eager["validation_loss"], rel=1e-4)
    # Training and validation each meet at most one graph per bucket (16, 32 and 48 here).
    assert eager["compiled_graphs"] is None
    assert 2 <= compiled["compiled_graphs"] <= 2 * len(length_buckets(48))


@pytest.mark.parametrize(
    ("backend", "zero"), [("deepspeed", "zero3"), ("fsdp", "zero2")], ids=["zero3", "fsdp"]
)
def test_compile_is_refused_where_parameters_are_gathered_per_layer(
    ledger, tiny_bert, tiny_settings, train_command, tmp_path, backend, zero
):
    """ZeRO-3 and FSDP gather every layer's sharded weights at run time; the compiled step is
    built and tested for unsharded weights only, so it is refused there before any model is
    built, not left to fail or silently recompile."""
    settings = tiny_settings(
        tiny_bert,
        compile=True,
        backend=backend,
        deepspeed_config=str(REPO / "config" / "deepspeed" / f"{zero}.json"),
    )
    command, env = train_command(ledger, tmp_path, settings, None)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "train.compile runs under DeepSpeed ZeRO stages 0 to 2, not 3 or fsdp" in result.stderr
    assert not (tmp_path / "model").exists()
