"""Per-request sampling and stop parameters.

Pure Python (no torch): the scheduler reads the stop conditions, the sampler reads the rest.
Validation lives here so every entry point (offline API, HTTP server) refuses the same bad values
with the same message. What depends on the model (token ids, context, the logprobs limit) is checked by
:mod:`paged_engine.request_limits`.
"""

from __future__ import annotations

import dataclasses
import json as _json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar


class SamplingParamsError(ValueError):
    """A sampling parameter is outside its allowed range; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


MAX_LOGPROBS = 20  # the default of the engine's max_logprobs; RequestLimits enforces the configured value
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed accepts
STRUCTURED_OUTPUT_KINDS = ("json", "json_object", "regex", "choice", "grammar")
MAX_STRUCTURED_CHOICES = 1024
MAX_CONSTRAINT_CHARS = 1 << 16  # a regex, grammar, JSON schema or all choices together: compiled in the engine loop
MAX_BEAM_WIDTH = 64  # each beam is a running sequence; the scheduler also caps n at max_num_seqs


@dataclass
class StructuredOutputParams:
    """What a request constrains its output to; exactly one field is set. Compiled in the model runner
    (:mod:`paged_engine.structured_output.grammar`), applied as a token bitmask by the sampler."""

    json: str | dict[str, Any] | None = None  # a JSON schema (text or object)
    json_object: bool = False  # any JSON object
    regex: str | None = None
    choice: list[str] | None = None  # exactly one of these strings
    grammar: str | None = None  # an EBNF grammar whose start rule is ``root``

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        given = [kind for kind in STRUCTURED_OUTPUT_KINDS if getattr(self, kind) not in (None, False)]
        if len(given) != 1:
            raise SamplingParamsError(
                "structured_output",
                f"give exactly one of {', '.join(STRUCTURED_OUTPUT_KINDS)}; got {', '.join(given) or 'none'}",
            )
        if isinstance(self.json, str):
            try:
                schema = _json.loads(self.json)
            except ValueError as exc:
                raise SamplingParamsError(
                    "structured_output.json", f"the JSON schema is not valid JSON: {exc}"
                ) from None
            if not isinstance(schema, dict | bool):
                raise SamplingParamsError("structured_output.json", "a JSON schema must be an object or a boolean")
        if self.choice is not None:
            if not self.choice or len(self.choice) > MAX_STRUCTURED_CHOICES:
                raise SamplingParamsError(
                    "structured_output.choice",
                    f"choice needs 1 to {MAX_STRUCTURED_CHOICES} strings, got {len(self.choice)}",
                )
            if any(not isinstance(c, str) or not c for c in self.choice):
                raise SamplingParamsError("structured_output.choice", "every choice must be a non-empty string")
        for kind in ("regex", "grammar"):
            value = getattr(self, kind)
            if value is not None and not value:
                raise SamplingParamsError(f"structured_output.{kind}", f"{kind} must not be empty")
        kind = given[0]
        size = len(self.key[1])
        if size > MAX_CONSTRAINT_CHARS:
            raise SamplingParamsError(
                f"structured_output.{kind}",
                f"the {kind} constraint has {size} characters; at most {MAX_CONSTRAINT_CHARS}",
            )

    @property
    def kind(self) -> str:
        return next(kind for kind in STRUCTURED_OUTPUT_KINDS if getattr(self, kind) not in (None, False))

    @property
    def key(self) -> tuple[str, str]:
        """(kind, canonical text): equal constraints share one compiled grammar."""
        kind = self.kind
        if kind == "json":
            schema = self.json if isinstance(self.json, dict) else _json.loads(self.json or "")
            return kind, _json.dumps(schema, sort_keys=True, separators=(",", ":"))
        if kind == "json_object":
            return kind, ""
        if kind == "choice":
            return kind, _json.dumps(self.choice)
        return kind, str(getattr(self, kind))


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0) disables top-k
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None  # when set, only these tokens may be sampled
    max_tokens: int | None = 16  # None: up to the model's context length
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    logprobs: int | None = None  # top-N logprobs of sampled positions (plus the sampled token)
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    structured_output: StructuredOutputParams | None = None  # constrain the output (JSON schema, regex, ...)
    # Beam search (vLLM's extra parameters): ``n`` is the beam width and every beam is returned, best first.
    use_beam_search: bool = False
    length_penalty: float = 1.0  # a hypothesis scores cum_logprob / length ** length_penalty
    early_stopping: bool | str = False  # True, False or "never", as transformers defines them

    def __post_init__(self) -> None:
        self.validate()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    def validate(self) -> None:
        def bad(param: str, message: str) -> None:
            raise SamplingParamsError(param, message)

        if self.n < 1:
            bad("n", f"n must be at least 1, got {self.n}")
        if self.temperature < 0.0:
            bad("temperature", f"temperature must be non-negative, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            bad("top_p", f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            bad("top_k", f"top_k must be -1 (disabled) or at least 1, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            bad("min_p", f"min_p must be in [0, 1], got {self.min_p}")
        if not -2.0 <= self.presence_penalty <= 2.0:
            bad("presence_penalty", f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            bad("frequency_penalty", f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        if self.repetition_penalty <= 0.0:
            bad("repetition_penalty", f"repetition_penalty must be positive, got {self.repetition_penalty}")
        if self.max_tokens is not None and self.max_tokens < 1:
            bad("max_tokens", f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            bad("min_tokens", f"min_tokens must be non-negative, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            bad("min_tokens", f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                bad(name, f"{name} must be non-negative, got {value}")
        if self.seed is not None and not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]:
            bad("seed", f"seed must be in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {self.seed}")
        if self.logit_bias:
            for token, bias in self.logit_bias.items():
                if not -100.0 <= bias <= 100.0:
                    bad("logit_bias", f"logit_bias for token {token} must be in [-100, 100], got {bias}")
        if self.allowed_token_ids is not None and not self.allowed_token_ids:
            bad("allowed_token_ids", "allowed_token_ids must not be empty when given")
        if self.structured_output is not None:
            self.structured_output.validate()
            if self.min_tokens > 0:
                # A grammar may end (or allow only its end) before min_tokens: holding its stop back leaves the
                # row no token to sample. The grammar decides where the output ends.
                bad("min_tokens", "min_tokens cannot be combined with structured output (response_format, guided_*):"
                    " the grammar decides where the output ends")  # fmt: skip
        if self.early_stopping not in (True, False, "never"):
            bad("early_stopping", f'early_stopping must be true, false or "never", got {self.early_stopping!r}')
        if not math.isfinite(self.length_penalty):
            bad("length_penalty", f"length_penalty must be a finite number, got {self.length_penalty}")
        if self.use_beam_search:
            self._validate_beam_search(bad)

    # What beam search leaves at its default: it ranks the model's own logprobs, so nothing may reshape them.
    _BEAM_DEFAULTS: ClassVar[dict[str, Any]] = {
        "top_p": 1.0, "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
        "logit_bias": None, "allowed_token_ids": None, "min_tokens": 0, "logprobs": None, "prompt_logprobs": None,
        "structured_output": None,
    }  # fmt: skip

    def _validate_beam_search(self, bad: Callable[[str, str], None]) -> None:
        if self.temperature != 0.0:
            bad(
                "temperature",
                f"use_beam_search needs temperature 0 (beam search is not sampled), got {self.temperature}",
            )
        if self.top_k not in (-1, 0):
            bad("top_k", f"top_k is not supported with use_beam_search, got {self.top_k}")
        for name, default in self._BEAM_DEFAULTS.items():
            if getattr(self, name) != default:
                bad(name, f"{name} is not supported with use_beam_search (leave it at {default!r})")
        if self.stop:
            bad("stop", "stop strings are not supported with use_beam_search; use stop_token_ids")
        if self.n > MAX_BEAM_WIDTH:
            bad("n", f"the beam width n={self.n} exceeds the limit of {MAX_BEAM_WIDTH}")

    def beam_member_params(self, num_candidates: int) -> SamplingParams:
        """What each beam of this request samples with: greedy, reporting its top ``num_candidates`` logprobs."""
        return dataclasses.replace(
            self, n=1, temperature=0.0, seed=None, logprobs=num_candidates, use_beam_search=False
        )
