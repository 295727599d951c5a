"""A tiny synthetic GGUF tokenizer, so tokenizer tests run without the real model."""

from __future__ import annotations

from pathlib import Path

import gguf

# A tiny SentencePiece-BPE vocabulary in llama.cpp's GGUF layout: control tokens, 256 byte tokens, words.
# As in Gemma, the whitespace run "  " is an early user-defined token stored with real spaces.
TINY_WORDS = [
    "▁",
    "  ",
    "h",
    "e",
    "l",
    "o",
    "w",
    "r",
    "d",
    "he",
    "ll",
    "llo",
    "hello",
    "▁hello",
    "▁w",
    "or",
    "▁wor",
    "ld",
    "▁world",
]
TINY_WORDS += ["S", "T", "O", "P", "ST", "OP", "STOP", "▁STOP", "!", "é"]


def tiny_metadata(*, add_space_prefix: bool = False, **overrides) -> dict:
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<end_of_turn>"]
    types = [3, 3, 3, 3, 3]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    tokens += TINY_WORDS
    types += [4 if word == "  " else 1 for word in TINY_WORDS]
    metadata = {
        "general.architecture": "tiny",
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * len(tokens),
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 2,
        "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.unknown_token_id": 3,
        "tokenizer.ggml.padding_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_space_prefix": add_space_prefix,
    }
    metadata.update(overrides)
    return metadata


def write_gguf(path: Path, metadata: dict) -> Path:
    """Write ``metadata`` (no tensors) with the ``gguf`` package's writer, the format llama.cpp reads."""
    writer = gguf.GGUFWriter(str(path), metadata["general.architecture"])
    for key, value in metadata.items():
        if key == "general.architecture":
            continue
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        elif key.endswith("scores"):
            writer.add_array(key, [float(v) for v in value])
        else:
            writer.add_array(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
