"""What the front-end returns per request: text, token ids, finish reason and logprobs per sample."""

from __future__ import annotations

from dataclasses import dataclass, field

from paged_engine.core.scheduler_output import Logprobs
from paged_engine.tools.parsers import ToolCall


@dataclass
class CompletionOutput:
    """One of a request's ``n`` samples."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop", "length", "abort", or "error" (see ``error``)
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it, if any
    logprobs: list[Logprobs] | None = None
    error: str | None = None  # why the engine failed this sample; the rest of its batch was served
    # LLM.chat with tools: the calls read from ``text`` (None: no tools asked for); ``content`` is the rest of it
    tool_calls: list[ToolCall] | None = None
    content: str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    prompt_logprobs: list[Logprobs | None] | None = None
    num_cached_tokens: int = 0

    @property
    def finished(self) -> bool:
        return all(o.finished for o in self.outputs)
