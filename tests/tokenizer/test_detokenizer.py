"""Streaming detokenization: deltas add up to the full decode, never split a character, never leak stops."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paged_engine.sampling_params import SamplingParams
from paged_engine.tokenizer import FastTokenizer
from paged_engine.tokenizer.detokenizer import IncrementalDetokenizer

REPLACEMENT = "\ufffd"


def stream(tok, ids, prompt=(), step_sizes=(1,), **kwargs) -> tuple[list[str], IncrementalDetokenizer]:
    detok = IncrementalDetokenizer(tok, list(prompt), **kwargs)
    deltas, pos, i = [], 0, 0
    while pos < len(ids) and not detok.finished:
        size = step_sizes[i % len(step_sizes)]
        deltas.append(detok.update(ids[pos : pos + size]))
        pos, i = pos + size, i + 1
    deltas.append(detok.flush())
    return deltas, detok


# --- tiny synthetic tokenizer (no model needed) ---------------------------------------------------------


def test_byte_fallback_characters_are_held_until_complete(tiny_tokenizer: FastTokenizer):
    tok = tiny_tokenizer
    ids = tok.encode("hü😀", add_special_tokens=False)
    assert len(ids) == 1 + 2 + 4  # 'h', two bytes, four bytes
    deltas, _ = stream(tok, ids)
    assert deltas == ["h", "", "ü", "", "", "", "😀", ""]


def test_prompt_tail_starting_inside_a_character_does_not_corrupt_output(tiny_tokenizer: FastTokenizer):
    tok = tiny_tokenizer
    prompt = tok.encode("ü😀", add_special_tokens=False)  # six byte tokens: the context window starts mid-'ü'
    output = tok.encode("ü", add_special_tokens=False)
    assert "".join(stream(tok, output, prompt=prompt)[0]) == "ü"


class CountingTokenizer:
    """Delegates to a real tokenizer and records how many ids each decode call was given."""

    def __init__(self, inner: FastTokenizer) -> None:
        self.inner = inner
        self.decoded_lengths: list[int] = []

    def decode(self, token_ids, skip_special_tokens=True) -> str:
        self.decoded_lengths.append(len(token_ids))
        return self.inner.decode(token_ids, skip_special_tokens=skip_special_tokens)


def test_each_step_decodes_a_short_window_not_the_whole_sequence(tiny_tokenizer: FastTokenizer):
    counting = CountingTokenizer(tiny_tokenizer)
    ids = tiny_tokenizer.encode(" hello world ü" * 100, add_special_tokens=False)
    deltas, _ = stream(counting, ids, prompt=tiny_tokenizer.encode("hello world"))
    assert "".join(deltas) == tiny_tokenizer.decode(ids)
    assert len(ids) > 400 and max(counting.decoded_lengths) <= 6


def test_special_tokens_skipped_or_shown(tiny_tokenizer: FastTokenizer):
    tok = tiny_tokenizer
    ids = tok.encode("hello<end_of_turn> world", add_special_tokens=False)
    assert "".join(stream(tok, ids)[0]) == "hello world"
    assert "".join(stream(tok, ids, skip_special_tokens=False)[0]) == "hello<end_of_turn> world"


def test_leading_space_uses_prompt_context(tmp_path):
    from paged_engine.tokenizer import load_tokenizer
    from tiny_gguf import tiny_metadata, write_gguf

    # Llama-2 style: decoding '▁world' alone strips its space; with the prompt as context it must not.
    tok = load_tokenizer(write_gguf(tmp_path / "l.gguf", tiny_metadata(add_space_prefix=True)), cache_dir=tmp_path)
    prompt = tok.encode("hello")
    output = tok.encode("hello world", add_special_tokens=False)[1:]
    assert tok.convert_ids_to_tokens(output) == ["▁world"]
    assert "".join(stream(tok, output, prompt=prompt)[0]) == " world"


def test_stop_string_split_across_tokens_is_never_streamed(tiny_tokenizer: FastTokenizer):
    tok = tiny_tokenizer
    ids = tok.encode("hello S", add_special_tokens=False) + tok.encode("TOP world", add_special_tokens=False)
    deltas, detok = stream(tok, ids, stop=["STOP"])
    assert "".join(deltas) == "hello "
    assert detok.stop == "STOP" and detok.output_text == "hello "
    assert all("S" not in d for d in deltas)
    deltas, detok = stream(tok, ids, stop=["STOP"], include_stop_str_in_output=True)
    assert "".join(deltas) == "hello STOP" and detok.output_text == "hello STOP"


def test_stop_strings_wait_for_min_tokens(tiny_tokenizer: FastTokenizer):
    tok = tiny_tokenizer
    ids = tok.encode("hello STOP hello STOP hello", add_special_tokens=False)
    first_stop_end = len(tok.encode("hello STOP", add_special_tokens=False))
    deltas, detok = stream(tok, ids, stop=["STOP"], min_tokens=first_stop_end + 1)
    assert "".join(deltas) == "hello STOP hello " and detok.stop == "STOP"
    params = SamplingParams(stop=["STOP"], min_tokens=first_stop_end + 1, max_tokens=20)
    detok = IncrementalDetokenizer.from_params(tok, [], params)
    assert detok.update(ids) + detok.flush() == "hello STOP hello "
    # The token that reaches min_tokens may itself complete a stop string.
    for steps in ((1,), (len(ids),)):
        deltas, detok = stream(tok, ids, step_sizes=steps, stop=["STOP"], min_tokens=first_stop_end)
        assert "".join(deltas) == "hello " and detok.stop == "STOP"


def test_update_after_stop_is_refused(tiny_tokenizer: FastTokenizer):
    detok = IncrementalDetokenizer(tiny_tokenizer, stop=["he"])
    detok.update(tiny_tokenizer.encode("hello", add_special_tokens=False))
    assert detok.finished
    with pytest.raises(RuntimeError, match="after the stop string 'he'"):
        detok.update([5])


def test_from_params_reads_stop_settings(tiny_tokenizer: FastTokenizer):
    params = SamplingParams(stop=["wor"], include_stop_str_in_output=True, skip_special_tokens=False)
    detok = IncrementalDetokenizer.from_params(tiny_tokenizer, [2], params)
    text = detok.update(tiny_tokenizer.encode("<end_of_turn>hello world", add_special_tokens=False)) + detok.flush()
    assert text == "<end_of_turn>hello wor"


# --- the real Gemma tokenizer ----------------------------------------------------------------------------

TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from(list(" \n\t😀日本ü🇫🇷")),
    max_size=60,
)


@pytest.mark.gemma
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT, steps=st.lists(st.integers(1, 4), min_size=1, max_size=5), prompt=TEXT)
def test_gemma_streaming_of_valid_text(gemma_tokenizer: FastTokenizer, text: str, steps: list[int], prompt: str):
    tok = gemma_tokenizer
    ids = tok.encode(text, add_special_tokens=False)
    deltas, detok = stream(tok, ids, prompt=tok.encode(prompt), step_sizes=steps)
    assert "".join(deltas) == tok.decode(ids) == detok.output_text
    assert not any(REPLACEMENT in d for d in deltas if REPLACEMENT not in text)


@st.composite
def token_sequences(draw, tok_size: int = 262_144) -> list[int]:
    """Random ids: ordinary tokens, special tokens, and UTF-8 characters spelled as byte-fallback tokens."""
    ids: list[int] = []
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["normal", "normal", "special", "bytes"]))
        if kind == "normal":
            ids.append(draw(st.integers(494, 255_967)))  # Gemma's ordinary (non-control, non-byte) tokens
        elif kind == "special":
            ids.append(draw(st.sampled_from([1, 2, 105, 106])))
        else:
            char = draw(st.characters(codec="utf-8", exclude_categories=("Cs",)))
            ids.extend(238 + b for b in char.encode("utf-8"))  # <0x00> is token 238
    return ids


@pytest.mark.gemma
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=token_sequences(), steps=st.lists(st.integers(1, 3), min_size=1, max_size=4), skip=st.booleans())
def test_gemma_streaming_of_random_tokens(gemma_tokenizer: FastTokenizer, ids: list[int], steps, skip: bool):
    tok = gemma_tokenizer
    deltas, _ = stream(tok, ids, prompt=[2, 105], step_sizes=steps, skip_special_tokens=skip)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=skip)
    assert not any(d.endswith(REPLACEMENT) for d in deltas[:-1])  # incomplete characters are held back


@pytest.mark.gemma
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    before=TEXT,
    after=TEXT,
    stop=st.sampled_from(["STOP", "\n\n", "</answer>", "日本", "😀!", "a"]),
    steps=st.lists(st.integers(1, 3), min_size=1, max_size=4),
)
def test_gemma_stop_strings_never_leak(gemma_tokenizer: FastTokenizer, before: str, after: str, stop: str, steps):
    tok = gemma_tokenizer
    text = before + stop + after
    ids = tok.encode(text, add_special_tokens=False)
    deltas, detok = stream(tok, ids, step_sizes=steps, stop=[stop, "never-present-zzz"])
    decoded = tok.decode(ids)
    expected = decoded[: decoded.index(stop)]
    assert "".join(deltas) == expected == detok.output_text
    assert detok.stop == stop
