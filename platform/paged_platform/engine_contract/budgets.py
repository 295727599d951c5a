"""The scheduler budgets an engine runs with, as both sides must see them.

A budget is a pair: ``max_num_seqs`` (requests running at once) and ``max_num_batched_tokens`` (tokens computed
per step, all requests together). Invariants, held by every ``Budgets`` and every ``BudgetLimits``:

* each value lies within its bounds (``MAX_NUM_SEQS_BOUNDS``, ``MAX_NUM_BATCHED_TOKENS_BOUNDS``);
* ``max_num_batched_tokens >= max_num_seqs``: every running sequence needs at least one token per step;
* the defaults never break either rule: unset sequences default to ``DEFAULT_MAX_NUM_SEQS`` or the token budget
  if lower, unset tokens to the device's default or the sequence budget if higher (``resolve_budgets``);
* an engine accepts live budgets up to its limits, which it fixes at start-up (its persistent batch is sized for
  them) and which are never below its starting budgets (``live_limits``).
"""

from __future__ import annotations

from dataclasses import dataclass


class SettingError(ValueError):
    """A setting is out of its range, or two break a rule together (a budget below "tokens >= sequences");
    ``param`` names the field at fault, as the admin API's error does."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Bounds:
    """An inclusive range of integers."""

    low: int
    high: int

    def check(self, param: str, value: object) -> int:
        """``value`` if it is an integer in the range, else a ``SettingError`` naming ``param`` and the range."""
        return check_range(param, value, self.low, self.high)


def check_range(param: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingError(param, f"{param} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise SettingError(param, f"{param} must be in [{low}, {high}], got {value}")
    return value


#: Requests running at once unless set (lowered to the token budget when that is smaller).
DEFAULT_MAX_NUM_SEQS = 128
#: Tokens per step unless set ...
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
#: ... and for a server on a CPU, where 2048 prompt tokens take seconds of one step: in a 512-token step first
#: tokens come out sooner (waves of arrivals spread over steps) and running streams wait less.
CPU_SERVING_MAX_NUM_BATCHED_TOKENS = 512
#: What an engine accepts at all, at start-up or live: the widest the CRD admits too.
MAX_NUM_SEQS_BOUNDS = Bounds(1, 4096)
MAX_NUM_BATCHED_TOKENS_BOUNDS = Bounds(1, 1 << 20)
#: An engine started without explicit limits accepts live budgets up to these (or its starting budgets if higher).
LIVE_MAX_NUM_SEQS_FLOOR = 256
LIVE_MAX_NUM_BATCHED_TOKENS_FLOOR = 32768


@dataclass(frozen=True)
class Budgets:
    """A scheduler budget that holds the invariants above (refused with a ``SettingError`` otherwise)."""

    max_num_seqs: int
    max_num_batched_tokens: int

    def __post_init__(self) -> None:
        MAX_NUM_SEQS_BOUNDS.check("max_num_seqs", self.max_num_seqs)
        MAX_NUM_BATCHED_TOKENS_BOUNDS.check("max_num_batched_tokens", self.max_num_batched_tokens)
        check_tokens_cover_seqs(self.max_num_seqs, self.max_num_batched_tokens)

    def describe(self) -> str:
        return f"(max_num_seqs={self.max_num_seqs}, max_num_batched_tokens={self.max_num_batched_tokens})"


def check_tokens_cover_seqs(max_num_seqs: int, max_num_batched_tokens: int) -> None:
    if max_num_batched_tokens < max_num_seqs:
        raise SettingError(
            "max_num_batched_tokens",
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be at least max_num_seqs ({max_num_seqs}): "
            "each running sequence needs a token per step",
        )


def default_max_num_batched_tokens(device_type: str, *, serving: bool) -> int:
    """The per-device rule: 512 tokens per step for a server on a CPU, 2048 otherwise (a GPU, or ``LLM(...)``)."""
    return CPU_SERVING_MAX_NUM_BATCHED_TOKENS if serving and device_type == "cpu" else DEFAULT_MAX_NUM_BATCHED_TOKENS


def resolve_budgets(
    max_num_seqs: int | None, max_num_batched_tokens: int | None, *, device_type: str, serving: bool
) -> Budgets:
    """The budget an engine on ``device_type`` (``cpu``, ``cuda``) runs when given these values (None: unset)."""
    if max_num_seqs is None:
        cap = max_num_batched_tokens if max_num_batched_tokens is not None else DEFAULT_MAX_NUM_SEQS
        max_num_seqs = min(DEFAULT_MAX_NUM_SEQS, cap)
    if max_num_batched_tokens is None:
        max_num_batched_tokens = max(default_max_num_batched_tokens(device_type, serving=serving), max_num_seqs)
    return Budgets(max_num_seqs, max_num_batched_tokens)


@dataclass(frozen=True)
class BudgetLimits:
    """The highest live budgets an engine accepts (its admin API refuses more, naming the limit)."""

    max_num_seqs: int
    max_num_batched_tokens: int

    def __post_init__(self) -> None:
        MAX_NUM_SEQS_BOUNDS.check("max_num_seqs_limit", self.max_num_seqs)
        MAX_NUM_BATCHED_TOKENS_BOUNDS.check("max_num_batched_tokens_limit", self.max_num_batched_tokens)

    def check(self, budgets: Budgets) -> Budgets:
        """``budgets`` if this engine accepts them, else a ``SettingError`` naming the field and its limit."""
        check_range("max_num_seqs", budgets.max_num_seqs, MAX_NUM_SEQS_BOUNDS.low, self.max_num_seqs)
        check_range(
            "max_num_batched_tokens",
            budgets.max_num_batched_tokens,
            MAX_NUM_BATCHED_TOKENS_BOUNDS.low,
            self.max_num_batched_tokens,
        )
        return budgets

    def admits(self, budgets: Budgets) -> bool:
        return (
            budgets.max_num_seqs <= self.max_num_seqs and budgets.max_num_batched_tokens <= self.max_num_batched_tokens
        )

    def clamp(self, budgets: Budgets) -> Budgets:
        """The nearest budgets this engine accepts: each value capped at its limit, then the sequences at the
        tokens."""
        tokens = min(budgets.max_num_batched_tokens, self.max_num_batched_tokens)
        return Budgets(min(budgets.max_num_seqs, self.max_num_seqs, tokens), tokens)

    def meet(self, other: BudgetLimits) -> BudgetLimits:
        """What both engines accept."""
        return BudgetLimits(
            min(self.max_num_seqs, other.max_num_seqs), min(self.max_num_batched_tokens, other.max_num_batched_tokens)
        )


def live_limits(
    start: Budgets, max_num_seqs_limit: int | None = None, max_num_batched_tokens_limit: int | None = None
) -> BudgetLimits:
    """The live limits of an engine starting with ``start``: the given ones (refused below ``start``), else the
    floors or ``start`` if higher."""
    seqs = max(LIVE_MAX_NUM_SEQS_FLOOR, start.max_num_seqs) if max_num_seqs_limit is None else max_num_seqs_limit
    tokens = (
        max(LIVE_MAX_NUM_BATCHED_TOKENS_FLOOR, start.max_num_batched_tokens)
        if max_num_batched_tokens_limit is None
        else max_num_batched_tokens_limit
    )
    limits = BudgetLimits(seqs, tokens)
    if start.max_num_seqs > limits.max_num_seqs:
        raise SettingError(
            "max_num_seqs_limit",
            f"max_num_seqs_limit ({limits.max_num_seqs}) is below max_num_seqs ({start.max_num_seqs})",
        )
    if start.max_num_batched_tokens > limits.max_num_batched_tokens:
        raise SettingError(
            "max_num_batched_tokens_limit",
            f"max_num_batched_tokens_limit ({limits.max_num_batched_tokens}) is below max_num_batched_tokens "
            f"({start.max_num_batched_tokens})",
        )
    return limits


def limits_for_ceiling(start: Budgets, ceiling: BudgetLimits | None) -> BudgetLimits:
    """The limits an engine must start with so that every budget up to ``ceiling`` (a tuner's upper bounds; None:
    only ``start``) is accepted live: the default limits, raised to the ceiling."""
    floor = live_limits(start)
    if ceiling is None:
        return floor
    return BudgetLimits(
        max(floor.max_num_seqs, ceiling.max_num_seqs), max(floor.max_num_batched_tokens, ceiling.max_num_batched_tokens)
    )
