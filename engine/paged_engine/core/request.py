"""One generation request as the scheduler sees it: token ids, progress, stop conditions.

The scheduler chases two numbers per request: ``num_computed_tokens`` (tokens whose KV is in the cache)
catches up with ``num_tokens`` (prompt plus sampled output). Everything else here is bookkeeping for
stop conditions, prefix-cache hashing and parallel sampling.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Sequence

from paged_engine.sampling_params import SamplingParams

from .block_hash import BlockHash
from .scheduler_output import Logprobs


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"  # back in the waiting queue after losing its KV blocks
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH = "finished_length"
    FINISHED_ABORTED = "finished_aborted"
    FINISHED_ERROR = "finished_error"  # its own work in a step failed; the rest of the batch went on
    FORKED = "forked"  # a parallel-sampling parent whose children took over its blocks

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset(
    {
        RequestStatus.FINISHED_STOPPED,
        RequestStatus.FINISHED_LENGTH,
        RequestStatus.FINISHED_ABORTED,
        RequestStatus.FINISHED_ERROR,
        RequestStatus.FORKED,
    }
)


class FinishReason(enum.StrEnum):
    """Why a request ended; the values are the OpenAI ``finish_reason`` strings and the metric label."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"  # not an OpenAI value: the request failed inside a step and was answered with an error


_STATUS_TO_REASON = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH: FinishReason.LENGTH,
    RequestStatus.FINISHED_ABORTED: FinishReason.ABORT,
    RequestStatus.FINISHED_ERROR: FinishReason.ERROR,
}


def child_request_id(parent_request_id: str, index: int) -> str:
    """The id of sample ``index`` of a parallel-sampling request: the one rule every part of the engine uses."""
    return f"{parent_request_id}-{index}"


class Request:
    """A request's mutable scheduling state.

    ``block_hashes`` holds the chained hash of every *full* block of ``all_token_ids`` (prompt and output);
    it grows incrementally through ``block_hasher`` whenever tokens are appended, so a lookup never rehashes.
    """

    __slots__ = (
        "adapter_id",
        "all_token_ids",
        "arrival_time",
        "block_hasher",
        "block_hashes",
        "cache_salt",
        "eos_token_id",
        "index",
        "is_beam",
        "is_fork_parent",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "parent_request_id",
        "priority",
        "prompt_logprobs",
        "prompt_token_ids",
        "request_id",
        "sampling_params",
        "status",
        "stop_token_id",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        sampling_params: SamplingParams,
        eos_token_id: int | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
        cache_salt: str | None = None,
        adapter_id: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.sampling_params = sampling_params
        self.eos_token_id = eos_token_id
        self.arrival_time = time.time() if arrival_time is None else arrival_time
        self.priority = priority
        self.cache_salt = cache_salt
        self.adapter_id = adapter_id

        self.all_token_ids: list[int] = list(self.prompt_token_ids)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.status = RequestStatus.WAITING
        self.stop_token_id: int | None = None
        # Prompt tokens served from the prefix cache on first scheduling (-1: not scheduled yet).
        self.num_cached_tokens = -1
        self.num_preemptions = 0

        self.block_hashes: list[BlockHash] = []
        self.block_hasher: Callable[[Request], None] | None = None

        # Parallel sampling: a parent (n > 1) computes the prompt once and is forked into children.
        self.parent_request_id: str | None = None
        self.index = 0  # child index within its parent's n samples
        self.is_fork_parent = sampling_params.n > 1 and not sampling_params.use_beam_search
        self.is_beam = False  # one beam of a beam search (``parent_request_id``: the search's request id)
        # A fork parent's prompt logprobs, which it never reports itself: each child reports them with its first
        # output (a child computes only the last prompt token, which predicts no prompt token).
        self.prompt_logprobs: list[Logprobs | None] = []

    # ---- token accounting -------------------------------------------------------------------------------
    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[self.num_prompt_tokens :]

    @property
    def schedule_target(self) -> int:
        """Tokens this request wants computed. A fork parent stops one short: each child computes the last
        prompt token itself, so every child gets its own logits and samples independently."""
        return self.num_tokens - 1 if self.is_fork_parent else self.num_tokens

    def attach_block_hasher(self, hasher: Callable[[Request], None]) -> None:
        self.block_hasher = hasher
        hasher(self)

    def append_output_token(self, token_id: int) -> None:
        self.all_token_ids.append(token_id)
        if self.block_hasher is not None:
            self.block_hasher(self)

    # ---- status -----------------------------------------------------------------------------------------
    @property
    def is_finished(self) -> bool:
        return self.status.finished

    @property
    def finish_reason(self) -> FinishReason | None:
        return _STATUS_TO_REASON.get(self.status)

    def sort_key(self) -> tuple[int, float]:
        """Order under the priority policy: lower value first, then earlier arrival."""
        return (self.priority, self.arrival_time)

    def fork_child(self, index: int, request_id: str | None = None) -> Request:
        """A child sharing this parent's prompt, progress and block hashes; it samples with n = 1. Its id is
        ``child_request_id(self.request_id, index)`` unless ``request_id`` is given."""
        params = self.sampling_params
        # Independent but reproducible streams: child i of a seeded parent uses seed + i.
        seed = None if params.seed is None else params.seed + index
        child_params = dataclasses.replace(params, n=1, seed=seed)
        child = Request(
            child_request_id(self.request_id, index) if request_id is None else request_id,
            self.prompt_token_ids,
            child_params,
            eos_token_id=self.eos_token_id,
            arrival_time=self.arrival_time,
            priority=self.priority,
            cache_salt=self.cache_salt,
            adapter_id=self.adapter_id,
        )
        child.all_token_ids = list(self.all_token_ids)
        child.num_computed_tokens = self.num_computed_tokens
        child.num_cached_tokens = self.num_cached_tokens
        child.block_hashes = list(self.block_hashes)
        child.block_hasher = self.block_hasher
        child.parent_request_id = self.request_id
        child.index = index
        child.prompt_logprobs = list(self.prompt_logprobs)
        child.status = RequestStatus.RUNNING
        return child

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.value}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens})"
        )
