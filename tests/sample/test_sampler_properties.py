"""Property test: over random batches with mixed parameters, every row samples from its own support.

The reference below is a deliberately naive per-row implementation of the same definitions; a batching bug
(a row reading another row's parameters, a mask landing on the wrong row) shows up as a token outside it.
"""

from __future__ import annotations

from unittest import mock

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from paged_engine.sample import Sampler, SamplingMetadata, SamplingRow, random_sampling
from paged_engine.sampling_params import SamplingParams

VOCAB = 24
EOS = 0


def reference_logits(logits: torch.Tensor, row: SamplingRow) -> torch.Tensor:
    p = row.params
    out = logits.clone()
    for token in set(row.prompt_token_ids) | set(row.output_token_ids):
        if p.repetition_penalty != 1.0:
            out[token] = out[token] / p.repetition_penalty if out[token] > 0 else out[token] * p.repetition_penalty
    for token in set(row.output_token_ids):
        count = row.output_token_ids.count(token)
        out[token] -= p.frequency_penalty * count + p.presence_penalty
    for token, bias in (p.logit_bias or {}).items():
        out[token] += bias
    if p.allowed_token_ids:
        keep = torch.full_like(out, float("-inf"))
        keep[p.allowed_token_ids] = out[p.allowed_token_ids]
        out = keep
    if len(row.output_token_ids) < p.min_tokens:
        for token in {*p.stop_token_ids, *([] if p.ignore_eos else [EOS])}:
            out[token] = float("-inf")
    return out


def reference_support(logits: torch.Tensor, p: SamplingParams) -> set[int]:
    """Tokens with non-zero probability after temperature, top-k, top-p and min-p."""
    scaled = logits / p.temperature
    if 0 < p.top_k < VOCAB:
        kth = torch.sort(scaled, descending=True).values[p.top_k - 1]
        scaled = torch.where(scaled >= kth, scaled, torch.tensor(float("-inf")))
    probs = torch.softmax(scaled, dim=-1)
    order = sorted(range(VOCAB), key=lambda t: -float(probs[t]))
    support, mass = set(), 0.0
    for token in order:
        if float(probs[token]) == 0.0 or (support and mass >= p.top_p):
            break
        support.add(token)
        mass += float(probs[token])
    top = float(probs.max())
    return {t for t in support if float(probs[t]) >= p.min_p * top}


params_strategy = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.0, 0.5, 1.0, 1.7]),
    top_k=st.sampled_from([-1, 0, 1, 3, 10, VOCAB + 5]),
    top_p=st.sampled_from([1.0, 0.95, 0.5, 0.1]),
    min_p=st.sampled_from([0.0, 0.1, 0.6]),
    presence_penalty=st.sampled_from([0.0, 1.5, -1.0]),
    frequency_penalty=st.sampled_from([0.0, 0.7]),
    repetition_penalty=st.sampled_from([1.0, 1.3, 0.8]),
    logit_bias=st.one_of(st.none(), st.dictionaries(st.integers(0, VOCAB - 1), st.floats(-100, 100), max_size=3)),
    allowed_token_ids=st.one_of(st.none(), st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=5)),
    min_tokens=st.sampled_from([0, 2]),
    max_tokens=st.just(16),
    stop_token_ids=st.lists(st.integers(1, VOCAB - 1), max_size=2),
    seed=st.one_of(st.none(), st.integers(0, 2**31)),
)

row_strategy = st.tuples(
    params_strategy,
    st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6),
    st.lists(st.integers(0, VOCAB - 1), max_size=6),
)


@settings(max_examples=120, deadline=None)
@given(
    rows=st.lists(row_strategy, min_size=1, max_size=6), seed=st.integers(0, 2**16), head=st.sampled_from([2, 5, 1024])
)
def test_every_row_samples_inside_its_own_support(rows, seed: int, head: int):
    torch.manual_seed(seed)
    logits = torch.randn(len(rows), VOCAB) * 3
    sampling_rows = []
    for params, prompt, output in rows:
        row = SamplingRow.create(params, prompt)
        row.output_token_ids.extend(output)
        sampling_rows.append(row)
    # A request can ban every token it allows (allow-list inside the min_tokens ban): nothing to check then.
    assume(all(reference_logits(logits[i], row).isfinite().any() for i, row in enumerate(sampling_rows)))
    metadata = SamplingMetadata.build(sampling_rows, vocab_size=VOCAB, eos_token_ids=[EOS])
    with mock.patch.object(random_sampling, "HEAD_SIZE", head):  # small heads exercise the tail paths
        tokens = Sampler()(logits.clone(), metadata).sampled_token_ids.tolist()
    for i, row in enumerate(sampling_rows):
        processed = reference_logits(logits[i], row)
        if row.greedy:
            assert tokens[i] == int(processed.argmax()), i
        else:
            support = reference_support(processed, row.params)
            assert tokens[i] in support, (i, row.params, tokens[i], support)
