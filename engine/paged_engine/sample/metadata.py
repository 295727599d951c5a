"""Per-step sampling metadata: the batch's sampling parameters as tensors, built once per step.

Everything that is off by default is ``None`` here, so the sampler skips it without looking at a single
logit; an all-greedy batch with no penalties builds nothing but a flag. Token-indexed state (penalty
counts, logit bias, min-tokens masks, allowed tokens) is kept sparse as (row, token) index pairs: a dense
``[rows, vocab]`` tensor would cost 1 MiB per row at Gemma's 262,144-token vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import torch

from paged_engine.sample.grammar_mask import GrammarMask, RowGrammar, StructuredOutput
from paged_engine.sampling_params import SamplingParams

# Below this temperature a row is sampled greedily: dividing logits by it would overflow to inf.
GREEDY_TEMPERATURE = 1e-5


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A request's private random stream; kept by the runner for the request's lifetime."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


@dataclass
class SamplingRow:
    """What the sampler needs to know about one request that samples this step.

    The runner keeps one per request and appends to ``output_token_ids`` as tokens are sampled; the
    ``generator`` persists across steps so a seeded request draws the same stream whatever batch it is in.
    ``output_token_ids`` may only grow between steps (a shorter list is detected and handled; replacing
    tokens in place is not: create a new row instead, as on preemption).
    """

    params: SamplingParams
    prompt_token_ids: Sequence[int]
    output_token_ids: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    grammar: RowGrammar | None = field(default=None, repr=False)  # structured output: set when first sampled
    # Distinct prompt + output tokens for the repetition penalty, kept up to date incrementally: rebuilding
    # it from a long prompt every step would cost more than the rest of the sampler.
    _seen: set[int] = field(default_factory=set, init=False, repr=False)
    _seen_tensor: torch.Tensor | None = field(default=None, init=False, repr=False)
    _seen_outputs: int = field(default=0, init=False, repr=False)

    @classmethod
    def create(
        cls, params: SamplingParams, prompt_token_ids: Sequence[int], device: torch.device | str = "cpu"
    ) -> SamplingRow:
        generator = make_generator(params.seed, device) if params.seed is not None else None
        return cls(params=params, prompt_token_ids=prompt_token_ids, generator=generator)

    @property
    def greedy(self) -> bool:
        return self.params.temperature < GREEDY_TEMPERATURE or self.params.top_k == 1

    def seen_token_ids(self) -> torch.Tensor:
        """Distinct token ids of the prompt and the output so far (int64, CPU, no particular order)."""
        if self._seen_tensor is None or len(self.output_token_ids) < self._seen_outputs:
            self._seen = set(self.prompt_token_ids)
            self._seen_tensor = torch.tensor(sorted(self._seen), dtype=torch.int64)
            self._seen_outputs = 0
        new = []
        for token in self.output_token_ids[self._seen_outputs :]:
            if token not in self._seen:
                self._seen.add(token)
                new.append(token)
        self._seen_outputs = len(self.output_token_ids)
        if new:
            self._seen_tensor = torch.cat([self._seen_tensor, torch.tensor(new, dtype=torch.int64)])
        return self._seen_tensor


@dataclass
class SparseTokens:
    """(row, token) pairs, optionally with one value each; the sparse form of a ``[rows, vocab]`` tensor."""

    rows: torch.Tensor  # int64 [n]
    token_ids: torch.Tensor  # int64 [n]
    values: torch.Tensor | None = None  # float32 [n]


@dataclass
class Penalties:
    """Repetition / presence / frequency penalties, for the rows that have any (``rows`` indexes the batch)."""

    rows: torch.Tensor  # int64 [p]: batch rows with a penalty
    repetition: torch.Tensor  # float32 [p]
    presence: torch.Tensor  # float32 [p]
    frequency: torch.Tensor  # float32 [p]
    output_counts: SparseTokens | None  # rows index into ``rows``; values: how often the token was generated
    seen_tokens: SparseTokens | None  # tokens in prompt or output, for rows with a repetition penalty


@dataclass
class SamplingMetadata:
    num_rows: int
    all_greedy: bool
    # Random rows only; None when all_greedy.
    random_rows: torch.Tensor | None  # int64 [r]: batch rows that sample
    temperature: torch.Tensor | None  # float32 [r]; None when every random row uses 1.0
    top_k: torch.Tensor | None  # int64 [r], vocab_size where disabled; None when no row uses top-k
    top_p: torch.Tensor | None  # float32 [r], 1.0 where disabled; None when no row uses top-p
    min_p: torch.Tensor | None  # float32 [r]; None when no row uses min-p
    generators: dict[int, torch.Generator]  # position in random_rows -> the request's seeded generator
    # Logit processing, applied to every row before greedy or random selection.
    penalties: Penalties | None
    logit_bias: SparseTokens | None
    banned_tokens: SparseTokens | None  # min_tokens not reached: EOS and stop tokens set to -inf
    allowed_tokens: SparseTokens | None  # rows with an allow-list: everything else set to -inf
    # Logprobs of the model's raw distribution.
    logprob_rows: torch.Tensor | None  # int64 [l]: rows that asked for logprobs
    num_logprobs: list[int] = field(default_factory=list)  # per row; -1 when not asked
    grammar: GrammarMask | None = None  # structured output: the constrained rows' token bitmask

    @property
    def modifies_logits(self) -> bool:
        """Whether processing changes any logit before selection (penalties, bias, bans, allow-lists, grammars)."""
        processing = (self.penalties, self.logit_bias, self.banned_tokens, self.allowed_tokens, self.grammar)
        return any(x is not None for x in processing)

    @property
    def plain_greedy(self) -> bool:
        """Whether every row takes the argmax of the raw logits and reports nothing else about them."""
        return self.all_greedy and not self.modifies_logits and self.logprob_rows is None

    @property
    def max_num_logprobs(self) -> int:
        return max(self.num_logprobs, default=-1)

    @classmethod
    def build(
        cls,
        rows: Sequence[SamplingRow],
        vocab_size: int,
        eos_token_ids: Sequence[int] = (),
        device: torch.device | str = "cpu",
        structured_output: StructuredOutput | None = None,
    ) -> SamplingMetadata:
        """Collect the batch's parameters (their token ids were checked against the vocabulary on admission).
        ``structured_output`` fills the grammar mask of constrained rows (None: the runner has no grammars)."""
        params = [row.params for row in rows]
        greedy = [row.greedy for row in rows]
        random_idx = [i for i, g in enumerate(greedy) if not g]
        all_greedy = not random_idx

        def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        random_rows = temperature = top_k = top_p = min_p = None
        generators: dict[int, torch.Generator] = {}
        if not all_greedy:
            random_rows = tensor(random_idx, torch.int64)
            temperatures = [params[i].temperature for i in random_idx]
            if any(t != 1.0 for t in temperatures):
                temperature = tensor(temperatures, torch.float32)
            ks = [params[i].top_k if 0 < params[i].top_k < vocab_size else vocab_size for i in random_idx]
            if any(k < vocab_size for k in ks):
                top_k = tensor(ks, torch.int64)
            if any(params[i].top_p < 1.0 for i in random_idx):
                top_p = tensor([params[i].top_p for i in random_idx], torch.float32)
            if any(params[i].min_p > 0.0 for i in random_idx):
                min_p = tensor([params[i].min_p for i in random_idx], torch.float32)
            generators = {j: rows[i].generator for j, i in enumerate(random_idx) if rows[i].generator is not None}

        num_logprobs = [p.logprobs if p.logprobs is not None else -1 for p in params]
        logprob_idx = [i for i, n in enumerate(num_logprobs) if n >= 0]
        return cls(
            num_rows=len(rows),
            all_greedy=all_greedy,
            random_rows=random_rows,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            generators=generators,
            penalties=_build_penalties(rows, vocab_size, device),
            logit_bias=_build_logit_bias(params, device),
            banned_tokens=_build_min_tokens_ban(rows, eos_token_ids, device),
            allowed_tokens=_build_allowed(params, device),
            logprob_rows=tensor(logprob_idx, torch.int64) if logprob_idx else None,
            num_logprobs=num_logprobs,
            grammar=structured_output.mask(rows, device) if structured_output is not None else None,
        )


def _row_index(rows: Sequence[int], lengths: Sequence[int]) -> torch.Tensor:
    """``rows[i]`` repeated ``lengths[i]`` times (numpy's repeat: far cheaper than torch's on CPU)."""
    return torch.from_numpy(np.repeat(np.asarray(rows, dtype=np.int64), np.asarray(lengths, dtype=np.int64)))


def _pairs(per_row: list[tuple[int, Sequence[int]]], device: torch.device | str) -> SparseTokens | None:
    """Flatten ``[(row, token_ids), ...]`` into index tensors."""
    per_row = [(r, ids) for r, ids in per_row if len(ids)]
    if not per_row:
        return None
    rows = _row_index([r for r, _ in per_row], [len(ids) for _, ids in per_row])
    token_ids = torch.tensor(list(chain.from_iterable(ids for _, ids in per_row)), dtype=torch.int64)
    return SparseTokens(rows.to(device), token_ids.to(device))


def _unique_pairs(pairs: SparseTokens, vocab_size: int) -> SparseTokens:
    """Deduplicate (row, token) pairs; ``values`` becomes the multiplicity of each pair."""
    keys, counts = torch.unique(pairs.rows * vocab_size + pairs.token_ids, return_counts=True)
    return SparseTokens(keys // vocab_size, keys % vocab_size, counts.to(torch.float32))


def _build_penalties(rows: Sequence[SamplingRow], vocab_size: int, device: torch.device | str) -> Penalties | None:
    idx = [
        i
        for i, row in enumerate(rows)
        if row.params.presence_penalty != 0.0
        or row.params.frequency_penalty != 0.0
        or row.params.repetition_penalty != 1.0
    ]
    if not idx:
        return None
    outputs = _pairs([(j, rows[i].output_token_ids) for j, i in enumerate(idx)], device)
    seen = None
    rep = [(j, rows[i].seen_token_ids()) for j, i in enumerate(idx) if rows[i].params.repetition_penalty != 1.0]
    if rep:
        positions = _row_index([j for j, _ in rep], [len(ids) for _, ids in rep])
        seen = SparseTokens(positions.to(device), torch.cat([ids for _, ids in rep]).to(device))

    def column(name: str) -> torch.Tensor:
        return torch.tensor([getattr(rows[i].params, name) for i in idx], dtype=torch.float32, device=device)

    return Penalties(
        rows=torch.tensor(idx, dtype=torch.int64, device=device),
        repetition=column("repetition_penalty"),
        presence=column("presence_penalty"),
        frequency=column("frequency_penalty"),
        output_counts=_unique_pairs(outputs, vocab_size) if outputs is not None else None,
        seen_tokens=seen,
    )


def _build_logit_bias(params: Sequence[SamplingParams], device: torch.device | str) -> SparseTokens | None:
    biased = [(i, p.logit_bias) for i, p in enumerate(params) if p.logit_bias]
    pairs = _pairs([(i, list(bias)) for i, bias in biased], device)
    if pairs is None:
        return None
    pairs.values = torch.tensor([v for _, bias in biased for v in bias.values()], dtype=torch.float32, device=device)
    return pairs


def _build_min_tokens_ban(
    rows: Sequence[SamplingRow], eos_token_ids: Sequence[int], device: torch.device | str
) -> SparseTokens | None:
    banned = []
    for i, row in enumerate(rows):
        p = row.params
        if len(row.output_token_ids) < p.min_tokens:
            stops = set(p.stop_token_ids) | (set() if p.ignore_eos else set(eos_token_ids))
            banned.append((i, sorted(stops)))
    return _pairs(banned, device)


def _build_allowed(params: Sequence[SamplingParams], device: torch.device | str) -> SparseTokens | None:
    return _pairs([(i, p.allowed_token_ids) for i, p in enumerate(params) if p.allowed_token_ids], device)
