"""Stop-string search and hold-back, as pure string logic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_engine.tokenizer.stop_strings import StopStrings


def test_earliest_match_wins_and_only_new_text_is_searched():
    stops = StopStrings(["world", "lo w"])
    match = stops.find("hello world", num_new_chars=11)
    assert match is not None and match.stop == "lo w" and match.end == 3
    assert stops.find("world and more", num_new_chars=4) is None  # 'world' ended before the new text


def test_include_in_output_moves_the_cut_after_the_stop():
    match = StopStrings(["END"], include_in_output=True).find("abcEND tail", 11)
    assert match is not None and match.end == 6


def test_holdback_is_the_longest_tail_that_could_start_a_stop():
    stops = StopStrings(["###", "STOP"])
    assert stops.holdback("abc") == 0
    assert stops.holdback("abc#") == 1
    assert stops.holdback("abc##") == 2
    assert stops.holdback("abcST") == 2
    assert stops.holdback("abcSTO") == 3
    assert StopStrings(["###"], include_in_output=True).holdback("ab##") == 0


def test_empty_stop_string_is_refused():
    with pytest.raises(ValueError, match="non-empty"):
        StopStrings(["ok", ""])


@given(
    text=st.text(alphabet="abST#OP ", max_size=40),
    stops=st.lists(st.text(alphabet="abST#OP", min_size=1, max_size=4), min_size=1, max_size=3),
    chunks=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=40),
)
def test_streamed_search_equals_search_of_the_whole_text(text: str, stops: list[str], chunks: list[int]):
    matcher = StopStrings(stops)
    expected = min((text.find(s) for s in stops if s in text), default=None)
    seen, found, pos = "", None, 0
    for size in chunks * (len(text) + 1):
        if pos >= len(text) or found is not None:
            break
        new = text[pos : pos + size]
        pos += len(new)
        seen += new
        match = matcher.find(seen, len(new))
        if match is not None:
            found = match.end
    assert found == expected
