"""What the scheduler reports per request after each step, for the front-end (detokenise, stream, metrics)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .outputs import Logprobs
from .request import FinishReason


@dataclass(slots=True)
class EngineCoreOutput:
    """New tokens of one request in one step, and how it ended if it did.

    For parallel sampling (``n > 1``) the outputs come from the children: ``req_id`` is
    ``f"{parent_req_id}-{index}"`` and ``parent_req_id``/``index`` let the front-end regroup them.
    """

    req_id: str
    new_token_ids: list[int]
    finish_reason: FinishReason | None = None
    stop_token_id: int | None = None  # the stop token (EOS or one of stop_token_ids) that ended the request
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    logprobs: list[Logprobs] = field(default_factory=list)
    prompt_logprobs: list[Logprobs | None] = field(default_factory=list)
    parent_req_id: str | None = None
    index: int = 0
    error: str | None = None  # with finish_reason ERROR: what failed

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
