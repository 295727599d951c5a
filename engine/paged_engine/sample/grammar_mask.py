"""Structured output in the sampler: each constrained row's grammar state, and the step's token bitmask.

A row's matcher is created the first time the row samples and, before each fill, catches up with the tokens
the row has sampled since (they were drawn under its mask, so the grammar accepts them). So nothing needs to
run after sampling, a step retried for fault isolation fills the same mask again, and a request resumed after
preemption (a new row holding its output so far) replays its output into a fresh matcher.

The fill is one batched xgrammar call over the constrained rows (a thread pool in C++); the mask is applied to
those rows only, in place, with xgrammar's kernel for the logits' device. Unconstrained rows cost nothing, and
a batch without a constrained row builds no mask at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import xgrammar

    from paged_engine.sample.metadata import SamplingRow
    from paged_engine.structured_output.grammar import GrammarCompiler


class GrammarViolation(RuntimeError):
    """A row's token history does not fit its grammar (a bug: tokens are sampled under the mask)."""


@dataclass
class RowGrammar:
    matcher: xgrammar.GrammarMatcher
    num_accepted: int = 0  # output tokens fed to the matcher so far

    def catch_up(self, output_token_ids: Sequence[int]) -> None:
        """Feed the tokens sampled since the last call. Once the grammar has accepted a stop token it is done:
        a request that goes on (``ignore_eos``) may only repeat stop tokens, which are not fed."""
        if len(output_token_ids) < self.num_accepted:
            raise GrammarViolation("a row's output shrank; a resumed request gets a new row")
        for token in output_token_ids[self.num_accepted :]:
            if not self.matcher.is_terminated() and not self.matcher.accept_token(token):
                raise GrammarViolation(f"token {token} does not fit the request's grammar")
            self.num_accepted += 1


@dataclass
class GrammarMask:
    rows: list[int]  # batch rows that are constrained
    bitmask: torch.Tensor  # int32 [batch rows, ceil(vocab / 32)]: bit set = token allowed; only ``rows`` are filled
    vocab_size: int

    def apply(self, logits: torch.Tensor) -> None:
        """Sets every disallowed logit of the constrained rows to -inf, in place."""
        import xgrammar

        xgrammar.apply_token_bitmask_inplace(logits, self.bitmask, vocab_size=self.vocab_size, indices=self.rows)


class StructuredOutput:
    """The model runner's side of structured output: matchers per row, one bitmask buffer reused every step."""

    def __init__(self, compiler: GrammarCompiler) -> None:
        self.compiler = compiler
        self._bitmask: torch.Tensor | None = None
        self._batch: xgrammar.BatchGrammarMatcher | None = None
        self._stop_row: torch.Tensor | None = None

    def _stop_tokens_only(self) -> torch.Tensor:
        """One bitmask row allowing only the stop tokens: what a finished grammar leaves."""
        if self._stop_row is None:
            words = -(-self.compiler.vocab_size // 32)
            bits = torch.zeros(words * 32, dtype=torch.bool)
            bits[self.compiler.stop_token_ids] = True
            weights = 1 << torch.arange(32, dtype=torch.int64)
            packed = (bits.view(words, 32).to(torch.int64) * weights).sum(dim=1)
            self._stop_row = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
        return self._stop_row

    def mask(self, rows: Sequence[SamplingRow], device: torch.device | str = "cpu") -> GrammarMask | None:
        """The step's mask for ``rows``, or None when no row is constrained."""
        constrained = [i for i, row in enumerate(rows) if row.params.structured_output is not None]
        if not constrained:
            return None
        import xgrammar

        matchers, active, done = [], [], []
        for i in constrained:
            row = rows[i]
            spec = row.params.structured_output
            assert spec is not None
            if row.grammar is None:
                row.grammar = RowGrammar(self.compiler.matcher(spec))
            row.grammar.catch_up(row.output_token_ids)
            if row.grammar.matcher.is_terminated():
                done.append(i)
            else:
                matchers.append(row.grammar.matcher)
                active.append(i)
        vocab = self.compiler.vocab_size
        if self._bitmask is None or self._bitmask.shape[0] < len(rows):
            self._bitmask = xgrammar.allocate_token_bitmask(max(len(rows), 8), vocab)
        if self._batch is None:
            self._batch = xgrammar.BatchGrammarMatcher(self.compiler.max_threads)
        bitmask = self._bitmask[: len(rows)]
        if matchers:
            self._batch.batch_fill_next_token_bitmask(matchers, bitmask, indices=active)
        for i in done:
            bitmask[i] = self._stop_tokens_only()
        device = torch.device(device)
        return GrammarMask(constrained, bitmask.to(device) if device.type != "cpu" else bitmask, vocab)
