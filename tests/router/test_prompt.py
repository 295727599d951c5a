"""The routing text of completions and chat requests, and its chained chunk hashes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paged_platform.router.prompt import chunk_hashes, routing_text


def test_completion_text_and_first_of_a_prompt_list():
    assert routing_text({"prompt": "hello"}) == "hello"
    assert routing_text({"prompt": ["first", "second"]}) == "first"
    assert routing_text({"prompt": [1, 2, 3]}) == "1,2,3"
    assert routing_text({"prompt": [[5, 6], [7]]}) == "5,6"
    assert routing_text({}) == ""


def test_chat_routes_on_every_message_not_the_first_only():
    system = {"role": "system", "content": "shared system prompt"}
    one = routing_text({"messages": [system, {"role": "user", "content": "question one"}]})
    two = routing_text({"messages": [system, {"role": "user", "content": "question two"}]})
    assert one != two
    assert "question one" in one
    assert one.startswith(routing_text({"messages": [system]}))


def test_an_anthropic_system_prompt_leads_its_messages():
    """Messages API requests sharing a system prompt share its chunks, as chat requests with a system message do."""
    question = [{"role": "user", "content": [{"type": "text", "text": "question one"}]}]
    one = routing_text({"system": "shared system prompt", "messages": question})
    blocks = routing_text({"system": [{"type": "text", "text": "shared system prompt"}], "messages": question})
    assert one == blocks
    assert one.index("shared system prompt") < one.index("question one")
    assert one != routing_text({"system": "another system prompt", "messages": question})


def test_chat_content_parts_count_their_text():
    parts = [{"type": "text", "text": "look at "}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "this"}]  # fmt: skip
    assert "look at this" in routing_text({"messages": [{"role": "user", "content": parts}]})


def test_roles_are_part_of_the_text():
    user = routing_text({"messages": [{"role": "user", "content": "hi"}]})
    assistant = routing_text({"messages": [{"role": "assistant", "content": "hi"}]})
    assert user != assistant


def test_only_full_chunks_are_hashed_and_capped():
    assert chunk_hashes("abcdefg", 4, 100) == chunk_hashes("abcdxyz", 4, 100)
    assert len(chunk_hashes("a" * 17, 4, 100)) == 4
    assert len(chunk_hashes("a" * 400, 4, 10)) == 10
    with pytest.raises(ValueError, match="chunk size must be >= 1"):
        chunk_hashes("abc", 0, 10)


@given(st.text(max_size=200), st.text(max_size=200), st.integers(1, 16))
def test_hashes_chain_a_common_prefix_exactly(a: str, b: str, size: int):
    """The hashes agree exactly on the full chunks inside the common prefix (and, chained, diverge after it)."""
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    ha, hb = chunk_hashes(a, size, 1000), chunk_hashes(b, size, 1000)
    shared = common // size
    assert ha[:shared] == hb[:shared]
    if len(ha) > shared and len(hb) > shared:
        assert ha[shared] != hb[shared]  # differs (a collision of 64-bit hashes is not a practical concern)
