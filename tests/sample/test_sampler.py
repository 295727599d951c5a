"""Sampler behaviour on fixed logits: greedy, seeds, distributions, truncation."""

from __future__ import annotations

import pytest
import torch
from paged_engine.sample import Sampler, SamplingMetadata, SamplingRow
from paged_engine.sampling_params import SamplingParams
from sampling_helpers import chi_square, critical, fixed_logits, frequencies, rows_for, sample

VOCAB = 64


def test_all_greedy_is_argmax():
    logits = fixed_logits(5)
    tokens = sample(logits, rows_for(*[SamplingParams(temperature=0.0)] * 5))
    assert tokens.tolist() == logits.argmax(dim=-1).tolist()


def test_top_k_one_equals_greedy_even_with_temperature():
    logits = fixed_logits(8)
    tokens = sample(logits, rows_for(*[SamplingParams(temperature=1.5, top_k=1)] * 8))
    assert tokens.tolist() == logits.argmax(dim=-1).tolist()


def test_top_k_rows_only_sample_their_candidates():
    logits = fixed_logits(6)
    params = [SamplingParams(temperature=2.0, top_k=k) for k in (2, 3, 5)] + [SamplingParams(seed=s) for s in range(3)]
    for seed in range(30):
        torch.manual_seed(seed)
        tokens = sample(logits, rows_for(*params))
        for row, k in enumerate((2, 3, 5)):
            assert tokens[row].item() in torch.topk(logits[row], k).indices.tolist()


def test_seeded_rows_reproduce_regardless_of_batch_composition():
    logits = fixed_logits(4)
    seeded = [SamplingParams(temperature=1.0, seed=s) for s in (7, 8, 9)]

    def run(order: list[int], extra: int) -> dict[int, list[int]]:
        rows = {i: SamplingRow.create(seeded[i], [1]) for i in order}
        out: dict[int, list[int]] = {i: [] for i in order}
        for step in range(6):
            batch = [rows[i] for i in order] + [SamplingRow.create(SamplingParams(temperature=1.0), [1])] * extra
            batch_logits = torch.stack([logits[(i + step) % 4] for i in order] + [logits[0]] * extra)
            tokens = sample(batch_logits, batch).tolist()
            for pos, i in enumerate(order):
                out[i].append(tokens[pos])
                rows[i].output_token_ids.append(tokens[pos])
        return out

    first = run([0, 1, 2], extra=0)
    assert run([2, 0, 1], extra=3) == first
    assert run([1, 2, 0], extra=1) == first
    # Different seeds give different streams (6 draws over a spread distribution).
    assert len({tuple(v) for v in first.values()}) == 3


def test_same_seed_same_tokens_different_seed_differs():
    logits = torch.zeros(1, VOCAB)
    a = [sample(logits, rows_for(SamplingParams(seed=3)))[0].item() for _ in range(3)]
    assert len(set(a)) == 1  # a fresh generator with the same seed draws the same token
    row = SamplingRow.create(SamplingParams(seed=3), [1])
    stream = [sample(logits, [row])[0].item() for _ in range(10)]
    assert stream[0] == a[0] and len(set(stream)) > 1  # the persisted generator advances


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_distribution(temperature: float):
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    draws = 6000
    observed = frequencies(logits, SamplingParams(temperature=temperature), draws)
    expected = torch.softmax(logits / temperature, dim=-1)
    stat, df = chi_square(observed, expected, draws)
    assert stat < critical(df - 1), (observed, expected)


def test_top_p_distribution_renormalizes_the_nucleus():
    logits = torch.log(torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05]))
    draws = 6000
    observed = frequencies(logits, SamplingParams(top_p=0.8), draws)
    # Nucleus: 0.4 + 0.3 = 0.7 < 0.8, adding 0.15 reaches it; the rest are excluded.
    assert observed[3:].sum() == 0
    expected = torch.tensor([0.4, 0.3, 0.15, 0.0, 0.0]) / 0.85
    stat, df = chi_square(observed[:3], expected[:3], draws)
    assert stat < critical(df - 1)


def test_min_p_distribution():
    logits = torch.log(torch.tensor([0.5, 0.2, 0.12, 0.09, 0.05, 0.04]))
    draws = 6000
    observed = frequencies(logits, SamplingParams(min_p=0.2), draws)  # keeps p >= 0.1
    assert observed[3:].sum() == 0
    expected = torch.tensor([0.5, 0.2, 0.12]) / 0.82
    stat, df = chi_square(observed[:3], expected, draws)
    assert stat < critical(df - 1)


def test_top_k_distribution():
    logits = torch.log(torch.tensor([0.1, 0.4, 0.2, 0.3]))
    draws = 4000
    observed = frequencies(logits, SamplingParams(top_k=2), draws)
    assert observed[0] == 0 and observed[2] == 0
    assert abs(float(observed[1]) - 4 / 7) < 0.03


def test_mixed_batch_keeps_greedy_rows_greedy():
    logits = fixed_logits(6)
    params = [SamplingParams(temperature=0.0 if i % 2 else 1.0, seed=i) for i in range(6)]
    tokens = sample(logits, rows_for(*params))
    greedy = logits.argmax(dim=-1)
    assert all(tokens[i] == greedy[i] for i in range(1, 6, 2))


def test_logits_shape_mismatch_is_refused():
    rows = rows_for(SamplingParams())
    metadata = SamplingMetadata.build(rows, vocab_size=VOCAB)
    with pytest.raises(ValueError, match=r"shape \(2, 64\) for 1 sampling rows"):
        Sampler()(torch.zeros(2, VOCAB), metadata)


def test_top_k_combined_with_top_p_and_min_p():
    logits = torch.log(torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05]))
    draws = 6000
    # top-k 4 renormalizes to [.421, .316, .158, .105]; top-p 0.75 then keeps three (mass before the third: .737).
    observed = frequencies(logits, SamplingParams(top_k=4, top_p=0.75), draws)
    assert observed[3:].sum() == 0
    stat, df = chi_square(observed[:3], torch.tensor([0.4, 0.3, 0.15]) / 0.85, draws)
    assert stat < critical(df - 1)
    # min-p 0.5 keeps p >= 0.2 of the top-3 candidates.
    observed = frequencies(logits, SamplingParams(top_k=3, min_p=0.5), draws)
    assert observed[2:].sum() == 0
    assert abs(float(observed[0]) - 4 / 7) < 0.03


def test_seeded_top_k_row_is_independent_of_other_rows_k():
    logits = fixed_logits(3)
    logits[0] *= 0.1  # the seeded row: a flat distribution, so its draws vary

    def run(others: list[SamplingParams]) -> list[int]:
        row = SamplingRow.create(SamplingParams(top_k=5, temperature=1.3, seed=42), [1])
        tokens = []
        for _ in range(8):
            batch = [SamplingRow.create(p, [1]) for p in others] + [row]
            token = sample(torch.cat([logits[1:].clone()[: len(others)], logits[:1]]), batch)[-1].item()
            tokens.append(token)
            row.output_token_ids.append(token)
        return tokens

    alone = run([])
    assert run([SamplingParams(top_k=40)]) == alone
    assert run([SamplingParams(top_p=0.9), SamplingParams(temperature=0.0)]) == alone
    assert len(set(alone)) > 1


def test_plain_greedy_batch_builds_nothing_but_the_flag():
    rows = rows_for(*[SamplingParams(temperature=0.0)] * 3, SamplingParams(temperature=1e-6, top_p=0.5))
    metadata = SamplingMetadata.build(rows, vocab_size=VOCAB, eos_token_ids=[0])
    assert metadata.all_greedy
    assert metadata.random_rows is None and metadata.temperature is None and metadata.top_p is None
    assert metadata.penalties is None and metadata.logit_bias is None
    assert metadata.banned_tokens is None and metadata.allowed_tokens is None and metadata.logprob_rows is None


def test_metadata_only_carries_what_rows_ask_for():
    rows = rows_for(
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.5, top_p=0.9),
        SamplingParams(temperature=0.0, presence_penalty=1.0),
    )
    metadata = SamplingMetadata.build(rows, vocab_size=VOCAB)
    assert metadata.random_rows.tolist() == [0, 1]
    assert metadata.temperature.tolist() == [1.0, 0.5]
    assert metadata.top_k is None and metadata.min_p is None
    assert metadata.top_p.tolist() == pytest.approx([1.0, 0.9])
    assert metadata.penalties.rows.tolist() == [2]
    assert metadata.penalties.seen_tokens is None  # no repetition penalty: prompt tokens are not even collected


def test_min_tokens_holds_off_eos_on_random_rows():
    logits = torch.full((200, VOCAB), -5.0)
    logits[:, 0] = 5.0  # EOS dominates
    rows = rows_for(*[SamplingParams(temperature=1.0, min_tokens=1)] * 200)
    torch.manual_seed(0)
    assert (sample(logits, rows, eos=(0,)) != 0).all()
