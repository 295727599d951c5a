"""Convert a GGUF file into a cached Hugging Face folder (config.json + fp32 safetensors + tokenizer).

GGUF tensors are dequantised with the ``gguf`` package and renamed to Hugging Face names, undoing llama.cpp's
conversion-time changes: the Q/K row permutation it applies to Llama-family attention (not to Gemma or Qwen),
and the ``+1`` it folds into Gemma's RMSNorm weights (transformers' Gemma norms compute ``1 + w`` themselves).
The folder is keyed by the file's sha256, so later starts skip the conversion and load safetensors directly.
It is written atomically (``cache_writes``): a conversion killed midway or out of disk is never used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from paged_engine.cache_home import cache_home
from paged_engine.loader.cache_writes import exclusive, remove_partials, staged_dir
from paged_engine.loader.hf import ModelLoadError

logger = logging.getLogger(__name__)

# HF layer-module name for each GGUF block tensor stem, per architecture family.
_COMMON = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LLAMA_LIKE = {**_COMMON, "ffn_norm": "post_attention_layernorm"}
_GEMMA3 = {
    **_COMMON,
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", "llama", _LLAMA_LIKE),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", _LLAMA_LIKE),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", _LLAMA_LIKE),
    "gemma3": ("Gemma3ForCausalLM", "gemma3_text", _GEMMA3),
}


def cache_root() -> Path:
    """``$PAGED_CACHE/models`` (``~/.cache/paged/models``)."""
    return cache_home() / "models"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def hf_config_from_gguf(reader: Any, vocab_size: int) -> dict[str, Any]:
    """A transformers ``config.json`` dict from GGUF metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in _ARCHITECTURES:
        raise ValueError(f"unsupported GGUF architecture {arch!r}; supported: {', '.join(sorted(_ARCHITECTURES))}")
    hf_arch, model_type, _ = _ARCHITECTURES[arch]

    def get(key: str, default: Any = None) -> Any:
        value = _field(reader, f"{arch}.{key}", default)
        if value is None:
            raise ValueError(f"GGUF metadata lacks {arch}.{key}")
        return value

    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    config: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("attention.key_length", hidden // heads)),
        "max_position_embeddings": int(get("context_length")),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
    }
    theta = float(get("rope.freq_base", 10000.0))
    if arch == "gemma3":
        window = int(get("attention.sliding_window"))
        config.update(
            sliding_window=window,
            sliding_window_pattern=6,
            query_pre_attn_scalar=config["head_dim"],
            hidden_activation="gelu_pytorch_tanh",
            tie_word_embeddings=True,
            pad_token_id=0,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": theta},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        )
    else:
        config.update(hidden_act="silu", rope_parameters={"rope_type": "default", "rope_theta": theta})
        if arch == "qwen2":
            config["attention_bias"] = True
    return config


def _unpermute_qk(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Invert llama.cpp's ``permute`` of Q/K rows (it interleaves the two RoPE halves of each head)."""
    rows = weight.shape[0]
    return weight.reshape(num_heads, rows // num_heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _hf_name(arch: str, gguf_name: str) -> str | None:
    table = _ARCHITECTURES[arch][2]
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in table:
        return f"model.layers.{parts[1]}.{table[parts[2]]}.{parts[3]}"
    return None


def convert_gguf(
    gguf_path: Path,
    out_dir: Path,
    write_tokenizer: Callable[[Path, Path], None] | None = None,
) -> None:
    """Dequantise ``gguf_path`` into ``out_dir``, which must not exist (written atomically: see cache_writes;
    the caller holds its lock)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    start = time.perf_counter()
    try:
        reader = GGUFReader(str(gguf_path))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read GGUF file {gguf_path}: {exc}") from exc
    arch = _field(reader, "general.architecture")
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise ModelLoadError(f"GGUF file {gguf_path} has no token_embd.weight tensor")
    try:
        config = hf_config_from_gguf(reader, int(embed.shape[-1]))
    except ValueError as exc:
        raise ModelLoadError(f"{gguf_path}: {exc}") from exc
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    total_bytes = sum(int(t.n_bytes) for t in reader.tensors)
    logger.info(
        "converting %s (%s, %d tensors, %.1f MiB quantised) to fp32 safetensors",
        gguf_path.name,
        arch,
        len(reader.tensors),
        total_bytes / 2**20,
    )
    tensors: dict[str, torch.Tensor] = {}
    done_bytes = 0
    for index, tensor in enumerate(reader.tensors, 1):
        name = _hf_name(arch, tensor.name)
        if name is None:
            raise ModelLoadError(f"GGUF file {gguf_path}: unexpected tensor {tensor.name!r} for {arch}")
        array = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        if arch == "llama" and tensor.name.endswith(("attn_q.weight", "attn_k.weight")):
            array = _unpermute_qk(array, heads if "attn_q" in tensor.name else kv_heads)
        if arch == "gemma3" and tensor.name.endswith("norm.weight"):
            array = array - 1.0
        if not array.flags.writeable or not array.flags.c_contiguous:  # F32 tensors are views of the mmap
            array = np.array(array, order="C")
        tensors[name] = torch.from_numpy(array)
        done_bytes += int(tensor.n_bytes)
        if index % 40 == 0 or index == len(reader.tensors):
            logger.info(
                "dequantised %d/%d tensors (%.1f/%.1f MiB)",
                index,
                len(reader.tensors),
                done_bytes / 2**20,
                total_bytes / 2**20,
            )
    if config.get("tie_word_embeddings") is None:
        config["tie_word_embeddings"] = "lm_head.weight" not in tensors
    needed = sum(t.numel() * t.element_size() for t in tensors.values())
    try:
        with staged_dir(out_dir) as tmp:
            save_file(tensors, str(tmp / "model.safetensors"))
            (tmp / "config.json").write_text(json.dumps(config, indent=2))
            (tmp / "paged_source.json").write_text(json.dumps({"gguf": str(gguf_path)}, indent=2))
            if write_tokenizer is not None:
                write_tokenizer(gguf_path, tmp)
    except (OSError, SafetensorError) as exc:
        raise ModelLoadError(
            f"cannot write the converted model into {out_dir.parent} (about {needed / 2**20:.0f} MiB needed; "
            f"set PAGED_CACHE to elsewhere): {exc}"
        ) from exc
    size = (out_dir / "model.safetensors").stat().st_size
    logger.info("wrote %s (%.1f MiB) in %.1f s", out_dir, size / 2**20, time.perf_counter() - start)


def _add_tokenizer(gguf_path: Path, out_dir: Path, write_tokenizer: Callable[[Path, Path], None]) -> None:
    """Complete a cached folder converted without a tokenizer (files staged, then moved in one by one,
    ``tokenizer.json`` last: a folder without it gets its tokenizer written again)."""
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-tokenizer-", dir=out_dir.parent))
    try:
        write_tokenizer(gguf_path, staging)
        for file in sorted(staging.iterdir(), key=lambda f: f.name == "tokenizer.json"):
            file.replace(out_dir / file.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _converted(out_dir: Path) -> bool:
    return (out_dir / "config.json").is_file() and (out_dir / "model.safetensors").is_file()


def _complete(out_dir: Path, write_tokenizer: Callable[[Path, Path], None] | None) -> bool:
    return _converted(out_dir) and (write_tokenizer is None or (out_dir / "tokenizer.json").is_file())


def gguf_to_hf_folder(
    gguf_path: str | Path,
    sha256: str | None = None,
    write_tokenizer: Callable[[Path, Path], None] | None = None,
) -> Path:
    """The cached HF folder for ``gguf_path``, converting it on first use. ``sha256``, when the caller already
    verified the file, saves hashing it again."""
    path = Path(gguf_path)
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}")
    digest = sha256 or sha256_file(path)
    out_dir = cache_root() / f"{path.stem}-{digest[:16]}"
    if _complete(out_dir, write_tokenizer):  # no lock: the cache may be read-only
        logger.info("using cached conversion %s", out_dir)
        return out_dir
    with exclusive(out_dir):  # another process converting the same file: wait, then use its result
        remove_partials(out_dir)
        if not _converted(out_dir):
            if out_dir.exists():  # not written by this version (it renames complete folders into place)
                logger.warning("removing the incomplete conversion %s", out_dir)
                shutil.rmtree(out_dir)
            convert_gguf(path, out_dir, write_tokenizer)
        elif write_tokenizer is not None and not (out_dir / "tokenizer.json").is_file():
            _add_tokenizer(path, out_dir, write_tokenizer)
    return out_dir
