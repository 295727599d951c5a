"""Scheduler budgets and policies, validated once here for start-up and for live changes (admin API).

These are the scheduler's part of the one engine configuration (``EngineConfig.scheduler``): the defaults
here are the defaults of ``paged-engine serve`` and of ``LLM(...)`` alike, and each field's ``help`` is its
command-line help.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

MAX_NUM_SEQS_LIMIT = 65_536
MAX_NUM_BATCHED_TOKENS_LIMIT = 1 << 20
POLICIES = ("fcfs", "priority")


class SchedulerConfigError(ValueError):
    """A scheduler setting is out of range; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


HASH_ALGORITHMS = ("sha256", "builtin")


def _setting(default: object, help: str, **extra: object) -> object:
    return field(default=default, metadata={"help": help, **extra})


#: The token budget per step unless one is given.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
#: ... and for a server on a CPU, where 2048 prompt tokens take seconds of one step: in a 512-token step first
#: tokens come out sooner (waves of arrivals spread over steps) and running streams wait less.
CPU_SERVING_MAX_NUM_BATCHED_TOKENS = 512


@dataclass
class SchedulerConfig:
    max_num_batched_tokens: int | None = _setting(
        None, f"scheduler budget: tokens computed per step, all requests together (default "
        f"{DEFAULT_MAX_NUM_BATCHED_TOKENS}; {CPU_SERVING_MAX_NUM_BATCHED_TOKENS} when serving on a CPU)",
    )  # fmt: skip
    max_num_seqs: int = _setting(128, "scheduler budget: requests running at once")
    max_model_len: int | None = _setting(None, "context length: prompt plus output tokens (default: the model's)")
    long_prefill_token_threshold: int = _setting(0, "cap on one request's prefill chunk per step (0: no cap)")
    policy: str = _setting(
        "fcfs", "priority: requests with a lower 'priority' are served (and kept) first", choices=POLICIES,
        flag="scheduling-policy",
    )  # fmt: skip
    enable_prefix_caching: bool = _setting(True, "reuse the KV blocks of shared prompt prefixes")
    hash_algorithm: str = _setting(
        "sha256", "prefix-cache block hash: sha256 (stable across processes) or builtin (faster)",
        choices=HASH_ALGORITHMS, flag="prefix-cache-hash",
    )  # fmt: skip

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.max_num_batched_tokens is not None:
            check_range("max_num_batched_tokens", self.max_num_batched_tokens, 1, MAX_NUM_BATCHED_TOKENS_LIMIT)
        check_range("max_num_seqs", self.max_num_seqs, 1, MAX_NUM_SEQS_LIMIT)
        if self.max_model_len is not None:
            check_range("max_model_len", self.max_model_len, 1, MAX_NUM_BATCHED_TOKENS_LIMIT * 16)
        check_range("long_prefill_token_threshold", self.long_prefill_token_threshold, 0, MAX_NUM_BATCHED_TOKENS_LIMIT)
        if self.policy not in POLICIES:
            raise SchedulerConfigError("policy", f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.hash_algorithm not in HASH_ALGORITHMS:
            raise SchedulerConfigError(
                "hash_algorithm", f"hash_algorithm must be one of {HASH_ALGORITHMS}, got {self.hash_algorithm!r}"
            )


def with_default_budget(config: SchedulerConfig, device_type: str, serving: bool) -> SchedulerConfig:
    """``config`` with its token budget filled in where it was left unset: the one rule for that default."""
    if config.max_num_batched_tokens is not None:
        return config
    serving_on_cpu = serving and device_type == "cpu"
    tokens = CPU_SERVING_MAX_NUM_BATCHED_TOKENS if serving_on_cpu else DEFAULT_MAX_NUM_BATCHED_TOKENS
    return replace(config, max_num_batched_tokens=tokens)


def check_range(param: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchedulerConfigError(param, f"{param} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise SchedulerConfigError(param, f"{param} must be in [{low}, {high}], got {value}")
