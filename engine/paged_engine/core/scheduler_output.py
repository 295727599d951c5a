"""What one scheduler step hands to the model runner, and what the runner hands back.

Block ids are given per KV-cache group (a tuple with one list per group, in KVCacheConfig order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from paged_engine.sampling_params import SamplingParams

BlockIds = tuple[list[int], ...]


@dataclass
class NewRequestData:
    """A request the runner has not seen yet, or one resumed after preemption (its state was dropped)."""

    req_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]  # non-empty only when resumed after preemption (recompute)
    sampling_params: SamplingParams
    block_ids: BlockIds
    num_computed_tokens: int  # tokens whose KV is already in the cache (prefix-cache hit)
    adapter_id: str | None = None  # the LoRA adapter's cache id, None for the base model


@dataclass
class CachedRequestData:
    """A request the runner already holds; only what changed since the last step."""

    req_id: str
    new_block_ids: BlockIds  # appended to the request's block table, per group
    num_computed_tokens: int


@dataclass
class SchedulerOutput:
    new_requests: list[NewRequestData] = field(default_factory=list)
    cached_requests: list[CachedRequestData] = field(default_factory=list)
    # req_id -> tokens to compute this step (prefill chunk length, or 1 for decode)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    total_num_scheduled_tokens: int = 0
    # (src, dst) block copies the runner performs before the step (copy-on-write)
    copy_on_write: list[tuple[int, int]] = field(default_factory=list)
    # requests the runner must forget: finished or aborted since the last step
    finished_req_ids: set[str] = field(default_factory=set)
    # requests preempted this step; the runner drops their state, they come back as NewRequestData
    preempted_req_ids: set[str] = field(default_factory=set)


class Logprobs(msgspec.Struct, array_like=True):
    """Top-N logprobs for one position: ``token_ids[0]`` is the sampled (or prompt) token. A msgspec struct: it
    crosses the process boundary as it is."""

    token_ids: list[int]
    logprobs: list[float]
    ranks: list[int]


@dataclass
class ModelRunnerOutput:
    # req_id -> tokens sampled this step (empty for a prefill chunk that did not reach the end of the prompt)
    sampled_token_ids: dict[str, list[int]] = field(default_factory=dict)
    logprobs: dict[str, list[Logprobs]] = field(default_factory=dict)
    prompt_logprobs: dict[str, list[Logprobs | None]] = field(default_factory=dict)
    # req_id -> why its own part of the step failed (it is finished with an error; the batch went on)
    failed: dict[str, str] = field(default_factory=dict)
