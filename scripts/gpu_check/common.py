"""Shared by the GPU check's stages: the random-weight model with Gemma 3 270M's real config, prompts, results.

Each stage is its own process (one stage's crash or hang costs only that stage) and writes
``OUT/<stage>.json``: ``{"status": "pass" | "fail" | "skip", "figures": {...}, "note": "..."}``, which
``summary.py`` turns into the final table. ``--smoke`` shrinks the model and workload so the stage scripts run
on a CPU in CI (tests/bench/test_gpu_check_stages.py), where they cannot rot unseen between GPU runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "engine"))

# Gemma 3 270M's config.json (what our GGUF conversion writes): vocabulary 262,144, head size 256, one KV head,
# a 512-token sliding window on five layers of every six.
GEMMA_270M = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
    "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
    "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "sliding_window": 512,
    "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
    "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    },
}  # fmt: skip
# The same switches at a size a CPU runs in seconds (window 16, so prompts still slide out of it).
SMOKE = {
    **GEMMA_270M, "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 6,
    "head_dim": 64, "sliding_window": 16, "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
}  # fmt: skip


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", type=Path, required=True, help="the check's output folder")
    p.add_argument("--smoke", action="store_true", help="tiny model and workload, on the CPU (CI)")
    return p


def ensure_model(out: Path, smoke: bool) -> Path:
    """The random-weight model (fp32 safetensors and a word-level tokenizer over its vocabulary), built once per
    output folder. Embeddings are drawn wider than transformers' default so greedy choices are well separated."""
    folder = out / ("model-smoke" if smoke else "model")
    if (folder / "model.safetensors").exists() or (folder / "model.safetensors.index.json").exists():
        return folder
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, models, pre_tokenizers

    config = SMOKE if smoke else GEMMA_270M
    torch.manual_seed(0)
    model = tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(**config))
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 0.1)
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(0.0, 0.1)
    tmp = folder.with_suffix(".partial")
    model.save_pretrained(tmp, safe_serialization=True)
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **{f"t{i}": i for i in range(3, config["vocab_size"])}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["<pad>", "<eos>", "<bos>"])
    tokenizer.save(str(tmp / "tokenizer.json"))
    (tmp / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    tmp.rename(folder)
    return folder


def random_prompts(count: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab_size, (length + 37 * i,), generator=gen).tolist() for i in range(count)]


def device(smoke: bool) -> str:
    return "cpu" if smoke else "cuda"


def write_result(out: Path, stage: str, status: str, note: str = "", **figures: Any) -> None:
    result = {"status": status, "note": note, "figures": figures}
    (out / f"{stage}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


def peak_gpu_mib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
