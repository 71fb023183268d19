"""Tiny real models, built from a config (hidden size 32, two layers) with tokenizers trained by
the `tokenizers` library on a given corpus, so nothing comes from a model hub. They are saved the
way real checkpoints are: a bare BERT encoder (like all-MiniLM-L6-v2, no classification head) and
a Llama causal LM whose tokenizer has no pad token.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import (
    BertConfig,
    BertModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)


def train_bert_tokenizer(corpus: Sequence[str]) -> PreTrainedTokenizerFast:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # The vocabulary is every word and character of the corpus, in sorted order, not one that
    # WordPieceTrainer learns: its choice among tied candidates differs from process to process,
    # and so did the tests' model (and what it learned).
    words = {
        word
        for text in corpus
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
    }
    characters = sorted({character for word in words for character in word})
    vocabulary = [*specials, *characters, *(f"##{c}" for c in characters), *sorted(words)]
    tokenizer = Tokenizer(
        models.WordPiece(
            {token: i for i, token in enumerate(dict.fromkeys(vocabulary))}, unk_token="[UNK]"
        )
    )
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    tokenizer.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def train_llama_tokenizer(corpus: Sequence[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE with bos and eos and, as in many decoder checkpoints, no pad token."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["<s>", "</s>"],
            initial_alphabet=sorted(pre_tokenizers.ByteLevel.alphabet()),
        ),
    )
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")


def build_tiny_bert(folder: Path, corpus: Sequence[str], dropout: float = 0.1) -> Path:
    tokenizer = train_bert_tokenizer(corpus)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_llama(folder: Path, corpus: Sequence[str]) -> Path:
    tokenizer = train_llama_tokenizer(corpus)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
