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


def first_occurrence(text: str, stops: list[str]) -> tuple[int, str] | None:
    """Earliest-starting stop occurrence in ``text``."""
    hits = [(text.find(stop), stop) for stop in stops if stop in text]
    return min(hits, default=None)


@given(
    text=st.text(alphabet="abST#OP ", max_size=40),
    stops=st.lists(st.text(alphabet="abST#OP", min_size=1, max_size=4), min_size=1, max_size=3),
    chunks=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=40),
)
def test_streamed_search_stops_at_the_first_completed_stop(text: str, stops: list[str], chunks: list[int]):
    """Streaming stops at the first chunk that completes a stop string, at the earliest start in what was seen.

    (Which stop wins can depend on chunking: with stops '#' and 'O#O', the stream 'O', '#' must stop at '#'.)
    """
    matcher = StopStrings(stops)
    seen, pos = "", 0
    for size in chunks * (len(text) + 1):
        if pos >= len(text):
            break
        new = text[pos : pos + size]
        pos += len(new)
        match = matcher.find(seen + new, len(new))
        if match is not None:
            # Nothing in earlier chunks was a stop; the match is the earliest one in the text seen so far.
            assert first_occurrence(seen, stops) is None
            first = first_occurrence(seen + new, stops)
            assert first is not None and first[0] == match.end
            assert (seen + new).startswith(match.stop, match.end)
            return
        seen += new
    assert first_occurrence(text, stops) is None
