"""Chat template rendering: Gemma's turn format, errors, and the sandbox."""

from __future__ import annotations

import pytest
from paged_engine.tokenizer import ChatTemplate, ChatTemplateError
from paged_engine.tokenizer.chat_template import builtin_template

GEMMA = ChatTemplate(builtin_template("gemma3"), bos_token="<bos>", eos_token="<eos>")


def test_gemma_format_with_system_folded_into_first_user_turn():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi "},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": [{"type": "text", "text": "Bye"}]},
    ]
    assert GEMMA.render(messages) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert GEMMA.render(messages[1:2], add_generation_prompt=False) == "<bos><start_of_turn>user\nHi<end_of_turn>\n"


def test_gemma_refuses_non_alternating_roles():
    with pytest.raises(ChatTemplateError, match="alternate user/assistant"):
        GEMMA.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    with pytest.raises(ChatTemplateError, match="Unsupported content part type: audio"):
        GEMMA.render([{"role": "user", "content": [{"type": "audio"}]}])


def test_message_without_role_is_refused():
    with pytest.raises(ChatTemplateError, match="message 1 has no 'role'"):
        GEMMA.render([{"role": "user", "content": "a"}, {"content": "b"}])


def test_syntax_error_names_the_line():
    with pytest.raises(ChatTemplateError, match="line 2"):
        ChatTemplate("ok\n{% if %}")


def test_sandbox_blocks_python_internals():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError, match="failed to render"):
        template.render([{"role": "user", "content": "x"}])
    mutate = ChatTemplate("{% set _ = messages.append(1) %}{{ messages | length }}")
    with pytest.raises(ChatTemplateError):
        mutate.render([{"role": "user", "content": "x"}])


def test_extra_variables_reach_the_template():
    template = ChatTemplate("{{ tools | length }}:{{ strftime_now('%Y') | length }}")
    assert template.render([{"role": "user", "content": "x"}], tools=[{"name": "f"}]) == "1:4"


def test_unknown_architecture_has_no_builtin():
    assert builtin_template("no-such-arch") is None


@pytest.mark.gemma
def test_gemma_gguf_tokenizer_uses_the_gemma_format(gemma_tokenizer):
    text = gemma_tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    ids = gemma_tokenizer.encode(text, add_special_tokens=False)
    assert ids[:2] == [2, 105] and ids.count(2) == 1  # the template's BOS, not doubled
    assert 106 in gemma_tokenizer.eos_token_ids  # <end_of_turn> ends generation
