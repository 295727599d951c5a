"""From engine-core outputs to what a user sees: one implementation for ``LLM`` and for the API server.

Two jobs, each with one rule:

* **Routing** (:class:`OutputRouter`). A request with ``n > 1`` samples is forked by the scheduler into children
  ``child_request_id(id, i)`` whose outputs arrive under their own ids, while anything that concerns the request
  as a whole before the fork (a refusal, a failure in a step, its first scheduling) arrives under the parent's
  id and goes to every child still open. A child is forgotten once it finished.
* **Choices** (:class:`ChoiceState`). Per sample: incremental detokenisation, stop strings (found here, where
  the text is: the caller then aborts the request in the core and the tokens past the stop are not reported),
  finish reasons, logprobs, prompt logprobs (a chunked prefill reports them over several steps) and cached
  prompt tokens.

Invariant: every output routed to a choice is applied in order, and once a choice finished it changes no more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from paged_engine.core.engine_core_output import EngineCoreOutput
from paged_engine.core.request import child_request_id
from paged_engine.core.scheduler_output import Logprobs
from paged_engine.sampling_params import SamplingParams
from paged_engine.tokenizer.detokenizer import IncrementalDetokenizer
from paged_engine.tokenizer.tokenizer import Tokenizer

T = TypeVar("T")


def stream_ids(request_id: str, n: int) -> list[str]:
    """The ids a request's outputs arrive under: its own, or its children's when it forks (``n > 1``)."""
    return [request_id] if n == 1 else [child_request_id(request_id, i) for i in range(n)]


class OutputRouter(Generic[T]):
    """Maps core request ids to whoever consumes their outputs (a choice, a stream's queue)."""

    def __init__(self) -> None:
        self._targets: dict[str, T] = {}
        self._children: dict[str, list[str]] = {}  # request id (n > 1) -> its open children
        self._parent_of: dict[str, str] = {}

    def __contains__(self, stream_id: str) -> bool:
        return stream_id in self._targets

    def __len__(self) -> int:
        return len(self._targets)

    def targets(self) -> list[T]:
        return list(self._targets.values())

    def add(self, request_id: str, n: int, make: Callable[[str, int], T]) -> list[T]:
        """Register a request's ``n`` streams; ``make(stream_id, index)`` builds each target."""
        ids = stream_ids(request_id, n)
        if any(sid in self._targets or sid in self._children for sid in (request_id, *ids)):
            raise ValueError(f"request id {request_id!r} is already in flight")
        made = [make(sid, i) for i, sid in enumerate(ids)]
        self._targets.update(zip(ids, made, strict=True))
        if n > 1:
            self._children[request_id] = list(ids)
            self._parent_of.update(dict.fromkeys(ids, request_id))
        return made

    def streams_of(self, request_id: str) -> list[str]:
        """The open stream ids of a request (its own id, or its open children)."""
        return [request_id] if request_id in self._targets else list(self._children.get(request_id, ()))

    def route(self, out: EngineCoreOutput) -> list[tuple[str, T]]:
        """The (stream id, target) pairs ``out`` concerns; finished streams are forgotten after this."""
        routed = [(sid, self._targets[sid]) for sid in self.streams_of(out.req_id)]
        if out.finish_reason is not None:
            for sid, _ in routed:
                self.remove(sid)
        return routed

    def remove(self, stream_id: str) -> None:
        self._targets.pop(stream_id, None)
        parent = self._parent_of.pop(stream_id, None)
        if parent is not None:
            siblings = self._children[parent]
            siblings.remove(stream_id)
            if not siblings:
                del self._children[parent]

    def clear(self) -> None:
        self._targets.clear()
        self._children.clear()
        self._parent_of.clear()


@dataclass
class ChoiceUpdate:
    """What one core output changed in one choice (the unit of a streamed chunk)."""

    choice: ChoiceState
    text: str
    token_ids: list[int]
    logprobs: list[Logprobs]
    finished: bool
    stopped_here: bool  # a stop string ended it before the core did: the caller aborts it in the core


@dataclass
class ChoiceState:
    """One sample of a request, as it is built from the core's outputs."""

    index: int
    request_id: str  # the core id its outputs arrive under
    detokenizer: IncrementalDetokenizer
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None  # stop / length / abort / error
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it
    error: str | None = None  # with finish_reason "error" (failed in a step) or a refusal
    logprobs: list[Logprobs] = field(default_factory=list)
    prompt_logprobs: list[Logprobs | None] | None = None
    num_cached_tokens: int = 0
    prompt_index: int = 0  # which prompt of a multi-prompt request (the HTTP API's batched completions)

    @classmethod
    def create(
        cls,
        tokenizer: Tokenizer,
        index: int,
        request_id: str,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        prompt_index: int = 0,
    ) -> ChoiceState:
        detokenizer = IncrementalDetokenizer.from_params(tokenizer, prompt_token_ids, params)
        return cls(index, request_id, detokenizer, prompt_index=prompt_index)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def apply(self, out: EngineCoreOutput) -> ChoiceUpdate:
        if self.finished:
            return ChoiceUpdate(self, "", [], [], False, False)
        if out.prompt_logprobs:
            self.prompt_logprobs = (self.prompt_logprobs or []) + list(out.prompt_logprobs)
        self.num_cached_tokens = max(self.num_cached_tokens, out.num_cached_tokens)
        if out.error is not None:
            self.finish_reason, self.error = str(out.finish_reason or "abort"), out.error
            return ChoiceUpdate(self, "", [], [], True, False)
        new_ids = list(out.new_token_ids)
        text = self.detokenizer.update(new_ids)
        stopped_here = False
        if self.detokenizer.stop is not None:
            # The detokenizer cut the text at the stop string; the tokens past it are not reported.
            self.finish_reason, self.stop_reason = "stop", self.detokenizer.stop
            stopped_here = out.finish_reason is None
        elif out.finish_reason is not None:
            text += self.detokenizer.flush()
            self.finish_reason, self.stop_reason = str(out.finish_reason), out.stop_token_id
        self.token_ids.extend(new_ids)
        logprobs = list(out.logprobs)
        self.logprobs.extend(logprobs)
        self.text += text
        return ChoiceUpdate(self, text, new_ids, logprobs, self.finished, stopped_here)
