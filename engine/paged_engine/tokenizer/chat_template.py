"""Chat templates: Jinja2 templates (as in Hugging Face ``tokenizer_config.json``) that render a list of
messages into the prompt text a chat model was trained on.

Templates come from model files, i.e. from whoever published the model, so they render in Jinja2's
immutable sandbox: no attribute access to Python internals, no mutation of the passed-in messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The model has no chat template, or the template refused the conversation."""


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    # trim_blocks / lstrip_blocks and the helpers below are what transformers provides to templates, so
    # templates written for it render the same here.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled template; ``render`` is cheap, compilation happens once."""

    def __init__(self, source: str, *, bos_token: str | None = None, eos_token: str | None = None) -> None:
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise ChatTemplateError(f"chat template does not compile (line {error.lineno}): {error.message}") from error
        self.source = source
        self._special = {"bos_token": bos_token or "", "eos_token": eos_token or ""}

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True, **extra: Any) -> str:
        """Render ``messages`` (OpenAI shape: ``{"role": ..., "content": ...}``); ``extra`` reaches the template
        as variables (``tools``, ``documents``, model-specific switches)."""
        for i, message in enumerate(messages):
            if "role" not in message:
                raise ChatTemplateError(f"message {i} has no 'role'")
        reserved = sorted({"messages", "add_generation_prompt", *self._special} & set(extra))
        if reserved:
            raise ChatTemplateError(f"chat template variables {reserved} are set by the server and can't be passed")
        try:
            return self._template.render(
                messages=list(messages), add_generation_prompt=add_generation_prompt, **self._special, **extra
            )
        except jinja2.TemplateError as error:
            raise ChatTemplateError(f"chat template failed to render: {error}") from error
        except Exception as error:  # the template's own code tripping over unusual input (types, missing keys)
            raise ChatTemplateError(f"chat template failed to render: {type(error).__name__}: {error}") from error


def builtin_template(architecture: str) -> str | None:
    """The template shipped for an architecture whose model files often lack one (llama.cpp GGUFs of Gemma)."""
    resource = resources.files("paged_engine.tokenizer").joinpath("templates", f"{architecture}.jinja")
    return resource.read_text(encoding="utf-8") if resource.is_file() else None


def read_template_override(value: str | Path) -> str:
    """A user-given template: a path to a file, or the template text itself (recognized by Jinja markup)."""
    text = str(value)
    if "{{" in text or "{%" in text:
        return text
    path = Path(text)
    if not path.is_file():
        raise ChatTemplateError(f"chat template {text!r} is neither a readable file nor Jinja template text")
    return path.read_text(encoding="utf-8")
