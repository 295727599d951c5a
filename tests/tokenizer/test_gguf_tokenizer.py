"""GGUF metadata reading, conversion, caching and loading on small synthetic files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paged_engine.tokenizer import ChatTemplateError, load_tokenizer
from paged_engine.tokenizer.gguf_convert import UnsupportedTokenizerError, convert_gguf_tokenizer
from paged_engine.tokenizer.gguf_metadata import GGUFFormatError, read_gguf_metadata
from paged_engine.tokenizer.loader import gguf_tokenizer_folder
from tiny_gguf import tiny_metadata, write_gguf


def test_metadata_round_trip_and_array_selection(tiny_gguf: Path):
    everything = read_gguf_metadata(tiny_gguf)
    assert everything["tokenizer.ggml.tokens"][:3] == ["<pad>", "<eos>", "<bos>"]
    assert everything["tokenizer.ggml.bos_token_id"] == 2
    assert everything["tokenizer.ggml.add_bos_token"] is True
    assert list(everything["tokenizer.ggml.token_type"][:6]) == [3, 3, 3, 3, 3, 6]
    only_types = read_gguf_metadata(tiny_gguf, {"tokenizer.ggml.token_type"})
    assert "tokenizer.ggml.tokens" not in only_types
    assert only_types["tokenizer.ggml.eos_token_id"] == 1


def test_not_a_gguf_file_is_refused(tmp_path: Path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"NOPE" + bytes(64))
    with pytest.raises(GGUFFormatError, match="not a GGUF file"):
        read_gguf_metadata(bogus)


def test_truncated_file_is_refused(tiny_gguf: Path, tmp_path: Path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:200])
    with pytest.raises(GGUFFormatError, match="past the end"):
        read_gguf_metadata(cut)


def test_sentencepiece_encoding_and_decoding(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = tok.encode("hello world")
    assert tok.convert_ids_to_tokens(ids) == ["<bos>", "hello", "▁world"]
    assert tok.decode(ids) == "hello world"
    assert tok.decode(ids, skip_special_tokens=False) == "<bos>hello world"
    assert tok.encode("hello", add_special_tokens=False) == [tok.token_to_id("hello")]
    # Byte fallback: "ü" is not in the vocabulary, so it is spelled as its two UTF-8 bytes.
    assert tok.convert_ids_to_tokens(tok.encode("ü", add_special_tokens=False)) == ["<0xC3>", "<0xBC>"]
    assert tok.decode(tok.encode("hü wé")) == "hü wé"
    # Control tokens are matched whole, user-defined whitespace runs go through BPE as '▁▁'.
    assert tok.convert_ids_to_tokens(tok.encode("<end_of_turn>  hello", add_special_tokens=False)) == [
        "<end_of_turn>",
        "▁▁",
        "hello",
    ]
    assert tok.bos_token_id == 2 and tok.eos_token_id == 1
    assert tok.eos_token_ids == {1, tok.token_to_id("<end_of_turn>")}
    assert tok.vocab_size == len(tiny_metadata()["tokenizer.ggml.tokens"])


def test_space_prefix_variant(tmp_path: Path):
    gguf = write_gguf(tmp_path / "llama.gguf", tiny_metadata(add_space_prefix=True))
    tok = load_tokenizer(gguf, cache_dir=tmp_path / "cache")
    ids = tok.encode("hello world", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids) == ["▁hello", "▁world"]
    assert tok.decode(ids) == "hello world"


def test_add_bos_false_and_eot_key(tmp_path: Path):
    metadata = tiny_metadata(**{"tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.eot_token_id": 4})
    tok = load_tokenizer(write_gguf(tmp_path / "m.gguf", metadata), cache_dir=tmp_path / "cache")
    assert tok.encode("hello") == [tok.token_to_id("hello")]
    assert 4 in tok.eos_token_ids


def test_unsupported_model_and_bad_ids_are_refused():
    with pytest.raises(UnsupportedTokenizerError, match="'t5' is not supported"):
        convert_gguf_tokenizer(tiny_metadata(**{"tokenizer.ggml.model": "t5"}))
    size = len(tiny_metadata()["tokenizer.ggml.tokens"])
    with pytest.raises(ValueError, match=rf"bos_token_id = 9999 is outside the vocabulary \[0, {size}\)"):
        convert_gguf_tokenizer(tiny_metadata(**{"tokenizer.ggml.bos_token_id": 9999}))


def test_conversion_is_cached_and_keyed_by_file(tiny_gguf: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    folder = gguf_tokenizer_folder(tiny_gguf, cache)
    assert {p.name for p in folder.iterdir()} == {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}
    marker = folder / "tokenizer.json"
    mtime = marker.stat().st_mtime_ns
    assert gguf_tokenizer_folder(tiny_gguf, cache) == folder
    assert marker.stat().st_mtime_ns == mtime  # reused, not rewritten
    assert not [p for p in cache.iterdir() if p.name.startswith(".staging")]
    # A changed file gets a new folder.
    write_gguf(tiny_gguf, tiny_metadata(**{"tokenizer.ggml.add_bos_token": False}))
    assert gguf_tokenizer_folder(tiny_gguf, cache) != folder


def test_model_without_template_errors_clearly(tiny_tokenizer):
    with pytest.raises(ChatTemplateError, match="has no chat template"):
        tiny_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])


def test_template_from_gguf_metadata_and_override(tmp_path: Path):
    template = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    metadata = tiny_metadata(**{"tokenizer.chat_template": template})
    gguf = write_gguf(tmp_path / "chat.gguf", metadata)
    tok = load_tokenizer(gguf, cache_dir=tmp_path / "cache")
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "[user]hi"
    override = tmp_path / "override.jinja"
    override.write_text("{{ bos_token }}{{ messages[-1]['content'] }}")
    tok = load_tokenizer(gguf, cache_dir=tmp_path / "cache", chat_template=override)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "<bos>hi"
    with pytest.raises(ChatTemplateError, match="neither a readable file"):
        load_tokenizer(gguf, cache_dir=tmp_path / "cache", chat_template=tmp_path / "missing.jinja")


def test_hf_folder_loading(tiny_tokenizer, tmp_path: Path):
    folder = tmp_path / "hf"
    folder.mkdir()
    tiny_tokenizer.backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": {"content": "<bos>", "special": True},
                "eos_token": "<eos>",
                "add_bos_token": False,
                "chat_template": [{"name": "default", "template": "{{ messages[0]['content'] }}!"}],
            }
        )
    )
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 4]}))
    tok = load_tokenizer(folder)
    assert tok.bos_token_id == 2
    assert tok.eos_token_ids == {1, 4}
    assert tok.encode("hello") == [tok.token_to_id("hello")]  # add_bos_token false wins over tokenizer.json
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "x!"
    (folder / "chat_template.jinja").write_text("J{{ messages | length }}")
    assert load_tokenizer(folder).apply_chat_template([{"role": "user", "content": "x"}]) == "J1"


def test_bad_paths_are_refused(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(ValueError, match=r"0 \.gguf files"):
        load_tokenizer(tmp_path)
    other = tmp_path / "weights.bin"
    other.write_bytes(b"")
    with pytest.raises(ValueError, match=r"neither a \.gguf file"):
        load_tokenizer(other)
