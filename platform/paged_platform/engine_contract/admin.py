"""The engine's admin API as both sides speak it: paths, the live-budget bodies, the drain query.

The admin API is served on its own port (``--admin-port``; not in the Service) behind a bearer token
(``ADMIN_TOKEN_ENV``). The engine's routes validate with these models and answer with them; the operator builds
its requests and reads the answers with the same ones.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from paged_platform.engine_contract.budgets import (
    MAX_NUM_BATCHED_TOKENS_BOUNDS,
    MAX_NUM_SEQS_BOUNDS,
    BudgetLimits,
    Budgets,
)

BUDGETS_PATH = "/admin/budgets"
DRAIN_PATH = "/admin/drain"
LORA_PATH = "/admin/lora"
#: Query parameters of ``POST /admin/drain``: wait for in-flight requests up to this long (seconds) ...
DRAIN_WAIT_PARAM = "wait_seconds"
#: ... after admitting this long while the Service stops routing here (seconds).
DRAIN_LINGER_PARAM = "linger_seconds"
DRAIN_MAX_WAIT_S = 3600
DRAIN_MAX_LINGER_S = 600


class BudgetUpdate(BaseModel):
    """``PUT /admin/budgets``: either budget or both; both are applied, or neither. The engine checks them against
    its own live limits too (``BudgetsReport.limits``), naming the field and the limit when it refuses."""

    model_config = ConfigDict(extra="forbid")

    max_num_seqs: int | None = Field(None, ge=MAX_NUM_SEQS_BOUNDS.low, le=MAX_NUM_SEQS_BOUNDS.high)
    max_num_batched_tokens: int | None = Field(
        None, ge=MAX_NUM_BATCHED_TOKENS_BOUNDS.low, le=MAX_NUM_BATCHED_TOKENS_BOUNDS.high
    )

    @classmethod
    def of(cls, budgets: Budgets) -> BudgetUpdate:
        return cls(max_num_seqs=budgets.max_num_seqs, max_num_batched_tokens=budgets.max_num_batched_tokens)


class LimitRanges(BaseModel):
    """Each budget's accepted range, ``[low, high]``."""

    max_num_seqs: tuple[int, int]
    max_num_batched_tokens: tuple[int, int]


class BudgetsReport(BaseModel):
    """``GET /admin/budgets`` (and the answer to a ``PUT``): the budgets in force and the live limits."""

    max_num_seqs: int
    max_num_batched_tokens: int
    limits: LimitRanges

    @classmethod
    def of(cls, budgets: Budgets, limits: BudgetLimits) -> BudgetsReport:
        ranges = LimitRanges(
            max_num_seqs=(MAX_NUM_SEQS_BOUNDS.low, limits.max_num_seqs),
            max_num_batched_tokens=(MAX_NUM_BATCHED_TOKENS_BOUNDS.low, limits.max_num_batched_tokens),
        )
        return cls(max_num_seqs=budgets.max_num_seqs, max_num_batched_tokens=budgets.max_num_batched_tokens,
                   limits=ranges)  # fmt: skip

    @property
    def budgets(self) -> Budgets:
        return Budgets(self.max_num_seqs, self.max_num_batched_tokens)

    @property
    def budget_limits(self) -> BudgetLimits:
        return BudgetLimits(self.limits.max_num_seqs[1], self.limits.max_num_batched_tokens[1])
