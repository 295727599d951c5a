"""What the scheduler reports per request after each step, for the front-end (detokenise, stream, metrics)."""

from __future__ import annotations

import msgspec

from .request import FinishReason
from .scheduler_output import Logprobs


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """New tokens of one request in one step, and how it ended if it did.

    The one type for it: the scheduler builds it, ``LLM`` reads it in-process, and the engine-core process sends
    it to the API server as it is (msgpack). For parallel sampling (``n > 1``) the outputs come from the children:
    ``req_id`` is ``child_request_id(parent_req_id, index)``.
    """

    req_id: str
    new_token_ids: list[int]
    finish_reason: FinishReason | None = None
    stop_token_id: int | None = None  # the stop token (EOS or one of stop_token_ids) that ended the request
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    logprobs: list[Logprobs] = msgspec.field(default_factory=list)
    prompt_logprobs: list[Logprobs | None] = msgspec.field(default_factory=list)
    parent_req_id: str | None = None
    index: int = 0
    # A refusal on admission (finish_reason ABORT) or a failure in the request's own work in a step (ERROR).
    error: str | None = None
    first_scheduled_time: float | None = None  # set by the engine-core loop when the request first left waiting

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
