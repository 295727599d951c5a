"""Penalties, logit bias, min_tokens, allow-lists and logprobs against their definitions."""

from __future__ import annotations

import pytest
import torch
from paged_engine.sample import Sampler, SamplingMetadata, SamplingRow, prompt_logprobs, truncation
from paged_engine.sample.logits_processing import process_logits
from paged_engine.sample.truncation import apply_top_p
from paged_engine.sampling_params import SamplingParams

VOCAB = 32


def processed(logits: torch.Tensor, rows: list[SamplingRow], eos=(0,)) -> torch.Tensor:
    out = logits.clone()
    process_logits(out, SamplingMetadata.build(rows, vocab_size=logits.shape[1], eos_token_ids=eos))
    return out


def base_logits(num_rows: int = 1) -> torch.Tensor:
    return torch.linspace(-4, 4, VOCAB).repeat(num_rows, 1)


def test_presence_and_frequency_penalties_follow_openai():
    logits = base_logits()
    outputs = [5, 5, 5, 9, 20]
    row = SamplingRow.create(SamplingParams(presence_penalty=0.5, frequency_penalty=0.25), prompt_token_ids=[1, 2, 9])
    row.output_token_ids.extend(outputs)
    expected = logits.clone()
    for token in set(outputs):
        count = outputs.count(token)
        expected[0, token] -= 0.25 * count + 0.5 * (count > 0)
    # Prompt tokens are not penalized by presence/frequency (OpenAI counts generated tokens only).
    torch.testing.assert_close(processed(logits, [row]), expected)


def test_negative_penalties_encourage():
    row = SamplingRow.create(SamplingParams(presence_penalty=-1.0, frequency_penalty=-0.5), [0])
    row.output_token_ids.extend([3, 3])
    out = processed(base_logits(), [row])
    assert out[0, 3] == pytest.approx(base_logits()[0, 3].item() + 2.0)


def test_repetition_penalty_divides_positive_multiplies_negative_over_prompt_and_output():
    logits = base_logits()
    negative, positive, output_only, untouched = 2, 30, 25, 12
    row = SamplingRow.create(SamplingParams(repetition_penalty=2.0), [negative, positive, negative])
    row.output_token_ids.extend([output_only, output_only])
    out = processed(logits, [row])
    assert out[0, negative] == pytest.approx(logits[0, negative].item() * 2.0)
    assert out[0, positive] == pytest.approx(logits[0, positive].item() / 2.0)
    assert out[0, output_only] == pytest.approx(logits[0, output_only].item() / 2.0)  # applied once, not per count
    assert out[0, untouched] == logits[0, untouched]


def test_penalties_only_touch_their_rows():
    logits = base_logits(3)
    rows = [
        SamplingRow.create(SamplingParams(), [4]),
        SamplingRow.create(SamplingParams(repetition_penalty=1.5, frequency_penalty=1.0), [4]),
        SamplingRow.create(SamplingParams(), [4]),
    ]
    for row in rows:
        row.output_token_ids.append(7)
    out = processed(logits, rows)
    torch.testing.assert_close(out[[0, 2]], logits[[0, 2]])
    assert out[1, 7] == pytest.approx(logits[1, 7].item() * 1.5 - 1.0)


def test_logit_bias_adds_and_can_force_a_token():
    logits = base_logits(2)
    rows = [SamplingRow.create(SamplingParams(temperature=0.0, logit_bias={3: 100.0, 4: -2.5}), [1])]
    rows.append(SamplingRow.create(SamplingParams(temperature=0.0), [1]))
    out = processed(logits, rows)
    assert out[0, 3] == pytest.approx(logits[0, 3].item() + 100.0)
    assert out[0, 4] == pytest.approx(logits[0, 4].item() - 2.5)
    torch.testing.assert_close(out[1], logits[1])
    tokens = Sampler()(logits.clone(), SamplingMetadata.build(rows, vocab_size=VOCAB)).sampled_token_ids
    assert tokens.tolist() == [3, VOCAB - 1]


def test_min_tokens_masks_eos_and_stop_tokens_until_reached():
    logits = torch.zeros(1, VOCAB)
    logits[0, 0] = 10.0  # EOS is the favourite
    logits[0, 5] = 9.0  # then a stop token
    params = SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=[5])
    row = SamplingRow.create(params, [1])
    sampler = Sampler()
    for expected in (1, 1, 0):  # token 1 is the first unmasked maximum (ties break to the lowest id)
        metadata = SamplingMetadata.build([row], vocab_size=VOCAB, eos_token_ids=[0])
        token = sampler(logits.clone(), metadata).sampled_token_ids.item()
        assert token == expected
        row.output_token_ids.append(token)


def test_min_tokens_with_ignore_eos_leaves_eos_alone():
    row = SamplingRow.create(SamplingParams(min_tokens=3, ignore_eos=True, stop_token_ids=[5]), [1])
    out = processed(base_logits(), [row], eos=(0,))
    assert out[0, 0].isfinite() and out[0, 5] == float("-inf")


def test_allowed_token_ids_restrict_sampling():
    allowed = [2, 17, 29]
    rows = [SamplingRow.create(SamplingParams(temperature=1.0, allowed_token_ids=allowed), [1]) for _ in range(200)]
    rows.append(SamplingRow.create(SamplingParams(temperature=0.0), [1]))
    logits = torch.cat([torch.zeros(200, VOCAB), base_logits()])  # flat rows: every allowed token is likely
    torch.manual_seed(0)
    tokens = Sampler()(logits.clone(), SamplingMetadata.build(rows, vocab_size=VOCAB)).sampled_token_ids
    assert set(tokens[:200].tolist()) == set(allowed)
    assert tokens[200].item() == VOCAB - 1


def test_logprobs_are_raw_log_softmax_with_ranks():
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(1))
    rows = [
        SamplingRow.create(SamplingParams(temperature=0.8, logprobs=3, repetition_penalty=1.3, seed=1), [4, 5]),
        SamplingRow.create(SamplingParams(temperature=0.0), [1]),
        SamplingRow.create(SamplingParams(temperature=0.0, logprobs=0, logit_bias={9: 50.0}), [1]),
    ]
    metadata = SamplingMetadata.build(rows, vocab_size=VOCAB)
    output = Sampler()(logits.clone(), metadata)
    per_row = output.logprobs_per_row(metadata)
    reference = torch.log_softmax(logits, dim=-1)
    first, second, third = per_row
    assert second is None
    sampled = output.sampled_token_ids[0].item()
    assert first.token_ids[0] == sampled
    assert first.logprobs[0] == pytest.approx(reference[0, sampled].item(), abs=1e-5)
    assert first.ranks[0] == 1 + int((reference[0] > reference[0, sampled]).sum())
    top = torch.topk(reference[0], 3)
    assert first.token_ids[1:] == top.indices.tolist()
    assert first.logprobs[1:] == pytest.approx(top.values.tolist(), abs=1e-5)
    assert first.ranks[1:] == [1, 2, 3]
    # The bias forced token 9, but the reported logprob is the model's own (before bias).
    assert third.token_ids == [9]
    assert third.logprobs[0] == pytest.approx(reference[2, 9].item(), abs=1e-5)
    assert third.ranks[0] == 1 + int((reference[2] > reference[2, 9]).sum()) > 1


def test_prompt_logprobs_helper():
    logits = torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(2))
    next_tokens = torch.tensor([3, 1, 4, 1])
    result = prompt_logprobs(logits, next_tokens, 2)
    reference = torch.log_softmax(logits, dim=-1)
    torch.testing.assert_close(result.logprobs[:, 0], reference[torch.arange(4), next_tokens])
    assert result.token_ids[:, 1:].tolist() == torch.topk(reference, 2).indices.tolist()
    chosen = reference[torch.arange(4), next_tokens].unsqueeze(1)
    assert result.ranks[:, 0].tolist() == ((reference > chosen).sum(dim=-1) + 1).tolist()
    with pytest.raises(ValueError, match="4 rows of prompt logits but 3 next tokens"):
        prompt_logprobs(logits, next_tokens[:3], 2)


@pytest.mark.parametrize("wide_head", [16, 16384])  # 16: most rows' nuclei exceed it and get sorted
def test_top_p_matches_reference(wide_head: int, monkeypatch):
    monkeypatch.setattr(truncation, "WIDE_HEAD_SIZE", wide_head)
    vocab = 300
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.cat([torch.randn(4, vocab, generator=gen) * 8, torch.randn(4, vocab, generator=gen) * 0.1])
    top_p = torch.tensor([0.5, 0.9, 0.99, 1.0] * 2)
    probs = torch.softmax(logits, dim=-1)
    ours = probs.clone()
    apply_top_p(ours, top_p)
    for i in range(probs.shape[0]):
        ordered, index = torch.sort(probs[i], descending=True)
        keep = vocab if top_p[i] == 1.0 else int(((ordered.cumsum(0) - ordered) < top_p[i]).sum().clamp_min(1))
        expected = torch.zeros(vocab)
        expected[index[:keep]] = ordered[:keep]
        torch.testing.assert_close(ours[i], expected)


def test_seen_tokens_follow_the_output_incrementally():
    row = SamplingRow.create(SamplingParams(repetition_penalty=1.2), [3, 1, 3, 2])
    assert sorted(row.seen_token_ids().tolist()) == [1, 2, 3]
    row.output_token_ids.extend([2, 9, 9])
    assert sorted(row.seen_token_ids().tolist()) == [1, 2, 3, 9]
    row.output_token_ids.append(11)
    assert sorted(row.seen_token_ids().tolist()) == [1, 2, 3, 9, 11]
    del row.output_token_ids[1:]  # output rewound (e.g. rejected draft tokens): rebuilt from scratch
    assert sorted(row.seen_token_ids().tolist()) == [1, 2, 3]
    # And the penalty uses the current set at every step.
    row.output_token_ids.append(20)
    out = processed(base_logits(), [row])
    assert out[0, 20] == pytest.approx(base_logits()[0, 20].item() / 1.2)
    assert out[0, 9] == base_logits()[0, 9]


@pytest.mark.parametrize("asking", [[0, 1, 2], [1]])
def test_logprobs_of_untouched_greedy_batch(asking: list[int]):
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(3))
    rows = [
        SamplingRow.create(SamplingParams(temperature=0.0, logprobs=2 if i in asking else None), [1]) for i in range(3)
    ]
    metadata = SamplingMetadata.build(rows, vocab_size=VOCAB)
    output = Sampler()(logits.clone(), metadata)
    reference = torch.log_softmax(logits, dim=-1)
    assert output.sampled_token_ids.tolist() == logits.argmax(dim=-1).tolist()
    for i, row_logprobs in enumerate(output.logprobs_per_row(metadata)):
        if i not in asking:
            assert row_logprobs is None
            continue
        top = torch.topk(reference[i], 2)
        assert row_logprobs.token_ids == [int(logits[i].argmax()), *top.indices.tolist()]
        assert row_logprobs.logprobs == pytest.approx([top.values[0].item(), *top.values.tolist()], abs=1e-5)
        assert row_logprobs.ranks == [1, 1, 2]
