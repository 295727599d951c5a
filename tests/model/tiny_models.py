"""Tiny random checkpoints of every supported architecture, saved as safetensors HF folders."""

from __future__ import annotations

from pathlib import Path

import torch

BLOCK_SIZE = 8
VOCAB = 128


def _common() -> dict:
    return dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def tiny_config(arch: str, vocab_size: int = VOCAB):
    import transformers as tf

    common = {**_common(), "vocab_size": vocab_size}
    if arch == "llama":
        return tf.LlamaConfig(**common, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "mistral":
        # a window shorter than the longer prompts, on every layer
        return tf.MistralConfig(**common, sliding_window=12, head_dim=16)
    if arch == "qwen2":
        return tf.Qwen2Config(**common, tie_word_embeddings=True)
    if arch == "qwen3":
        return tf.Qwen3Config(**{**common, "num_key_value_heads": 1}, head_dim=32)
    if arch == "gemma3":
        return tf.Gemma3TextConfig(
            **{**common, "num_key_value_heads": 1},
            head_dim=32,
            sliding_window=12,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            query_pre_attn_scalar=32,
        )
    raise ValueError(arch)


ARCHS = ["llama", "mistral", "qwen2", "qwen3", "gemma3"]


def save_tiny_model(arch: str, folder: Path, seed: int = 0, vocab_size: int = VOCAB) -> Path:
    """Build a random model with transformers and save it (fp32 safetensors) under ``folder``."""
    import transformers as tf

    config = tiny_config(arch, vocab_size)
    torch.manual_seed(seed)
    cls = tf.Gemma3ForCausalLM if arch == "gemma3" else tf.AutoModelForCausalLM
    model = cls.from_config(config) if cls is tf.AutoModelForCausalLM else cls(config)
    with torch.no_grad():
        # random norm weights so the (1 + w) and plain forms are exercised, and larger-than-default weights so
        # logits are not near-uniform (well-separated greedy choices)
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(0.0 if arch == "gemma3" else 1.0, 0.1)
            elif param.dim() == 2:
                param.normal_(0.0, 0.15)
            else:
                param.normal_(0.0, 0.05)
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def save_tiny_tokenizer(folder: Path) -> None:
    """A word-level tokenizer over ``t0 .. t127`` (ids 0-2 are pad/bos/eos), so text prompts work too."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["<pad>", "<bos>", "<eos>"])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "add_bos_token": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
