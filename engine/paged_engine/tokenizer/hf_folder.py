"""Load a tokenizer from a Hugging Face model folder (``tokenizer.json`` + its config files).

Uses the Rust ``tokenizers`` library directly rather than ``transformers.AutoTokenizer``: it loads in a
fraction of the time, and everything the engine needs besides ``tokenizer.json`` is three small JSON keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _RustTokenizer

from paged_engine.tokenizer.chat_template import ChatTemplate
from paged_engine.tokenizer.gguf_convert import bos_eos_processor
from paged_engine.tokenizer.tokenizer import FastTokenizer


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _token_text(value: Any) -> str | None:
    """Special tokens are stored as plain strings or as serialized AddedToken objects."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _template_source(folder: Path, config: dict[str, Any]) -> str | None:
    jinja_file = folder / "chat_template.jinja"  # transformers >= 4.43 saves the template on its own
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _ids(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


def load_hf_tokenizer(folder: str | Path, chat_template: str | None = None) -> FastTokenizer:
    """``chat_template`` (template text) overrides the folder's own."""
    folder = Path(folder)
    tokenizer_file = folder / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.json")
    tokenizer = _RustTokenizer.from_file(str(tokenizer_file))
    config = _read_json(folder / "tokenizer_config.json")
    special_map = _read_json(folder / "special_tokens_map.json")
    bos = _token_text(config.get("bos_token", special_map.get("bos_token")))
    eos = _token_text(config.get("eos_token", special_map.get("eos_token")))

    if "add_bos_token" in config or "add_eos_token" in config:
        # The config is authoritative over the post-processor stored in tokenizer.json (transformers agrees).
        add_bos, add_eos = bool(config.get("add_bos_token")), bool(config.get("add_eos_token"))
        tokenizer.post_processor = bos_eos_processor(
            bos if add_bos else None,
            tokenizer.token_to_id(bos) if bos else None,
            eos if add_eos else None,
            tokenizer.token_to_id(eos) if eos else None,
        )

    generation = _read_json(folder / "generation_config.json")
    extra_eos = _ids(generation.get("eos_token_id"))
    source = chat_template if chat_template is not None else _template_source(folder, config)
    return FastTokenizer(
        tokenizer,
        bos_token=bos,
        eos_token=eos,
        extra_eos_token_ids=extra_eos,
        chat_template=ChatTemplate(source, bos_token=bos, eos_token=eos) if source else None,
        name=str(folder),
    )
