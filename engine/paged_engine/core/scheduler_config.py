"""Scheduler budgets and policies, validated once here for start-up and for live changes (admin API)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_NUM_SEQS_LIMIT = 65_536
MAX_NUM_BATCHED_TOKENS_LIMIT = 1 << 20
POLICIES = ("fcfs", "priority")


class SchedulerConfigError(ValueError):
    """A scheduler setting is out of range; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class SchedulerConfig:
    max_num_batched_tokens: int = 2048  # tokens computed per step, all requests together
    max_num_seqs: int = 256  # requests running at once
    max_model_len: int = 8192  # prompt plus output tokens of one request
    long_prefill_token_threshold: int = 0  # cap on one request's prefill chunk per step; 0: no cap
    policy: str = "fcfs"  # "fcfs", or "priority" (lower Request.priority first, then earlier arrival)
    enable_prefix_caching: bool = True
    hash_algorithm: str = "sha256"  # block hashes: "sha256" (stable) or "builtin" (faster, per process)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_range("max_num_batched_tokens", self.max_num_batched_tokens, 1, MAX_NUM_BATCHED_TOKENS_LIMIT)
        check_range("max_num_seqs", self.max_num_seqs, 1, MAX_NUM_SEQS_LIMIT)
        check_range("max_model_len", self.max_model_len, 1, MAX_NUM_BATCHED_TOKENS_LIMIT * 16)
        check_range("long_prefill_token_threshold", self.long_prefill_token_threshold, 0, MAX_NUM_BATCHED_TOKENS_LIMIT)
        if self.policy not in POLICIES:
            raise SchedulerConfigError("policy", f"policy must be one of {POLICIES}, got {self.policy!r}")


def check_range(param: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchedulerConfigError(param, f"{param} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise SchedulerConfigError(param, f"{param} must be in [{low}, {high}], got {value}")
