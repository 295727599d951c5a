"""The default model through the real server: greedy completions equal transformers' on the same weights."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
import torch

from tests.server.conftest import start_server

pytestmark = [pytest.mark.server, pytest.mark.gemma]

PROMPT = "The three primary colours are"
NEW_TOKENS = 24


def test_default_model_greedy_completion_matches_transformers(tmp_path: Path) -> None:
    from paged_engine.loader.default_model import resolve_model
    from paged_engine.tokenizer import load_tokenizer
    from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder
    from transformers import Gemma3ForCausalLM

    server = start_server("default", tmp_path, "--kv-cache-memory", "128MiB", "--max-model-len", "512")
    try:
        with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300) as client:
            completion = client.completions.create(
                model="tiny-gemma", prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0,
                extra_body={"ignore_eos": True},
            )  # fmt: skip
            chat = client.chat.completions.create(
                model="tiny-gemma", messages=[{"role": "user", "content": "Name one colour."}], max_tokens=16,
                temperature=0,
            )  # fmt: skip
    finally:
        server.stop()
    assert completion.usage.completion_tokens == NEW_TOKENS
    assert chat.choices[0].message.content and chat.choices[0].finish_reason in ("stop", "length")

    folder = resolve_model(None, write_tokenizer=write_gguf_tokenizer_folder)
    tokenizer = load_tokenizer(folder)
    ids = tokenizer.encode(PROMPT)
    assert completion.usage.prompt_tokens == len(ids)
    hf = Gemma3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.inference_mode():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None)
    expected = tokenizer.decode(out[0, len(ids) :].tolist())
    assert completion.choices[0].text == expected
