"""Scheduler budgets and policies, validated once here for start-up and for live changes (admin API).

These are the scheduler's part of the one engine configuration (``EngineConfig.scheduler``): the defaults
here are the defaults of ``paged-engine serve`` and of ``LLM(...)`` alike, and each field's ``help`` is its
command-line help. The budgets' defaults, bounds, per-device rule and live limits are the engine contract's
(``paged_platform.engine_contract.budgets``), which the operator and the CRD read too.

Invariants: a valid config has every set value in its range and, when both budgets are set,
``max_num_batched_tokens >= max_num_seqs``; ``resolved`` fills the unset budgets by the contract's rule and checks
the live limits against them, so the scheduler only ever runs with concrete budgets that hold both rules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paged_platform.engine_contract.budgets import (
    CPU_SERVING_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    LIVE_MAX_NUM_BATCHED_TOKENS_FLOOR,
    LIVE_MAX_NUM_SEQS_FLOOR,
    MAX_NUM_BATCHED_TOKENS_BOUNDS,
    MAX_NUM_SEQS_BOUNDS,
    BudgetLimits,
    Budgets,
    SettingError,
    check_range,
    check_tokens_cover_seqs,
    live_limits,
    resolve_budgets,
)
from paged_platform.engine_contract.launch import MAX_NUM_BATCHED_TOKENS_ENV, MAX_NUM_SEQS_ENV

from paged_engine.config_fields import positive_int, setting

POLICIES = ("fcfs", "priority")
HASH_ALGORITHMS = ("sha256", "builtin")


@dataclass
class SchedulerConfig:
    max_num_batched_tokens: int | None = setting(
        None, f"scheduler budget: tokens computed per step, all requests together (default "
        f"{DEFAULT_MAX_NUM_BATCHED_TOKENS}; {CPU_SERVING_MAX_NUM_BATCHED_TOKENS} when serving on a CPU; at least "
        f"--max-num-seqs)", env=MAX_NUM_BATCHED_TOKENS_ENV, parse=positive_int,
    )  # fmt: skip
    max_num_seqs: int | None = setting(
        None, f"scheduler budget: requests running at once (default {DEFAULT_MAX_NUM_SEQS}, or "
        f"--max-num-batched-tokens if lower)", env=MAX_NUM_SEQS_ENV, parse=positive_int,
    )  # fmt: skip
    max_num_seqs_limit: int | None = setting(
        None, f"highest max_num_seqs the admin API may set live (default: {LIVE_MAX_NUM_SEQS_FLOOR}, or "
        "--max-num-seqs if higher); the model runner's batch is sized for it",
    )  # fmt: skip
    max_num_batched_tokens_limit: int | None = setting(
        None, f"highest max_num_batched_tokens the admin API may set live (default: "
        f"{LIVE_MAX_NUM_BATCHED_TOKENS_FLOOR}, or --max-num-batched-tokens if higher)",
    )  # fmt: skip
    max_model_len: int | None = setting(None, "context length: prompt plus output tokens (default: the model's)")
    long_prefill_token_threshold: int = setting(0, "cap on one request's prefill chunk per step (0: no cap)")
    policy: str = setting(
        "fcfs", "priority: requests with a lower 'priority' are served (and kept) first", choices=POLICIES,
        flag="scheduling-policy",
    )  # fmt: skip
    enable_prefix_caching: bool = setting(True, "reuse the KV blocks of shared prompt prefixes")
    hash_algorithm: str = setting(
        "sha256", "prefix-cache block hash: sha256 (stable across processes) or builtin (faster)",
        choices=HASH_ALGORITHMS, flag="prefix-cache-hash",
    )  # fmt: skip

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        seqs, tokens = self.max_num_seqs, self.max_num_batched_tokens
        if tokens is not None:
            MAX_NUM_BATCHED_TOKENS_BOUNDS.check("max_num_batched_tokens", tokens)
        if seqs is not None:
            MAX_NUM_SEQS_BOUNDS.check("max_num_seqs", seqs)
        if seqs is not None and tokens is not None:
            check_tokens_cover_seqs(seqs, tokens)
        if self.max_num_seqs_limit is not None:
            MAX_NUM_SEQS_BOUNDS.check("max_num_seqs_limit", self.max_num_seqs_limit)
        if self.max_num_batched_tokens_limit is not None:
            MAX_NUM_BATCHED_TOKENS_BOUNDS.check("max_num_batched_tokens_limit", self.max_num_batched_tokens_limit)
        if self.max_model_len is not None:
            check_range("max_model_len", self.max_model_len, 1, MAX_NUM_BATCHED_TOKENS_BOUNDS.high * 16)
        check_range(
            "long_prefill_token_threshold", self.long_prefill_token_threshold, 0, MAX_NUM_BATCHED_TOKENS_BOUNDS.high
        )
        if self.policy not in POLICIES:
            raise SettingError("policy", f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.hash_algorithm not in HASH_ALGORITHMS:
            raise SettingError(
                "hash_algorithm", f"hash_algorithm must be one of {HASH_ALGORITHMS}, got {self.hash_algorithm!r}"
            )

    def resolved(self, device_type: str, serving: bool) -> SchedulerConfig:
        """This config with its unset budgets filled in by the contract's rule for ``device_type`` (``serving``:
        for the API server, whose CPU default differs), and its live limits checked against them."""
        budgets = resolve_budgets(self.max_num_seqs, self.max_num_batched_tokens, device_type=device_type,
                                  serving=serving)  # fmt: skip
        config = replace(self, max_num_seqs=budgets.max_num_seqs, max_num_batched_tokens=budgets.max_num_batched_tokens)
        config.live_limits()
        return config

    @property
    def budgets(self) -> Budgets:
        """The budgets of a resolved config."""
        if self.max_num_seqs is None or self.max_num_batched_tokens is None:
            raise SettingError("max_num_batched_tokens", "the budgets are not resolved yet (SchedulerConfig.resolved)")
        return Budgets(self.max_num_seqs, self.max_num_batched_tokens)

    def live_limits(self) -> BudgetLimits:
        """The highest budgets the admin API may set live, for a resolved config."""
        return live_limits(self.budgets, self.max_num_seqs_limit, self.max_num_batched_tokens_limit)
