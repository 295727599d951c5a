"""One beam-search request as the scheduler holds it: the search policy, the live beams, their reports.

Each live beam is a :class:`Request` of its own (greedy, reporting its top-``K`` logprobs). A step of the group
waits until every live beam has computed its tokens and reported; then the policy (:mod:`.beam_search`) picks the
next beams and the scheduler forks them from their parents' block tables (each child is a new request id, so
the model runner receives its whole table and any copy-on-write with it) and frees every parent at once.

Invariants: ``members`` are the live beams in the policy's beam order; ``reports`` holds only members' ids; the
group's results go out under the request's stream ids (``child_request_id(request_id, i)`` when ``width > 1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .beam_search import BeamSearch, Hypothesis
from .engine_core_output import EngineCoreOutput
from .request import FinishReason, Request, RequestStatus, child_request_id
from .scheduler_output import Logprobs


@dataclass
class BeamGroup:
    request_id: str
    search: BeamSearch
    members: list[Request]
    reports: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    started: bool = False  # admitted once: from then on it holds ``width`` seats of max_num_seqs
    _next_member: int = 1  # the root beam is the request itself

    @property
    def width(self) -> int:
        return self.search.width

    def stream_ids(self) -> list[str]:
        if self.width == 1:
            return [self.request_id]
        return [child_request_id(self.request_id, i) for i in range(self.width)]

    def new_member_id(self) -> str:
        member_id = f"{self.request_id}-beam{self._next_member}"
        self._next_member += 1
        return member_id

    def num_unseated(self) -> int:
        """Seats the group holds but its running beams do not fill (preempted beams, or not started)."""
        if not self.started:
            return 0
        return self.width - sum(1 for m in self.members if m.status is RequestStatus.RUNNING)

    def report(self, request_id: str, logprobs: Logprobs) -> bool:
        """Record a beam's top tokens (column 0 of ``logprobs`` is its sampled token, the rest its top-K);
        returns whether every live beam has reported."""
        self.reports[request_id] = list(zip(logprobs.token_ids[1:], logprobs.logprobs[1:], strict=True))
        return len(self.reports) == len(self.members)

    def take_reports(self) -> list[list[tuple[int, float]]]:
        reports = [self.reports[m.request_id] for m in self.members]
        self.reports.clear()
        return reports

    def results(self, num_cached_tokens: int) -> list[EngineCoreOutput]:
        """The finished hypotheses as the request's final outputs, best first (there are ``width`` of them once the
        search is done, given a vocabulary of at least ``num_candidates`` tokens: ``RequestLimits`` checks it)."""
        best = self.search.best(self.width)
        parent = self.request_id if self.width > 1 else None
        return [
            _output(sid, h, num_cached_tokens, parent, i)
            for i, (sid, h) in enumerate(zip(self.stream_ids(), best, strict=True))
        ]

    def ended(self, reason: FinishReason, num_cached_tokens: int, error: str | None) -> list[EngineCoreOutput]:
        """Outputs that end every stream of the request without tokens (abort, failure)."""
        parent = self.request_id if self.width > 1 else None
        return [
            EngineCoreOutput(sid, [], reason, None, num_cached_tokens, parent_req_id=parent, index=i, error=error)
            for i, sid in enumerate(self.stream_ids())
        ]


def _output(
    stream_id: str, hypothesis: Hypothesis, num_cached_tokens: int, parent: str | None, index: int
) -> EngineCoreOutput:
    return EngineCoreOutput(
        stream_id,
        list(hypothesis.token_ids),
        FinishReason.STOP if hypothesis.stopped else FinishReason.LENGTH,
        hypothesis.token_ids[-1] if hypothesis.stopped else None,
        num_cached_tokens,
        parent_req_id=parent,
        index=index,
    )
