"""The whole engine (scheduler + runner + front-end) on tiny random checkpoints: equality with transformers, and
invariance of greedy outputs under prefix caching, chunked prefill, preemption and batch size."""

from __future__ import annotations

import pytest
import torch
from paged_engine import LLM, SamplingParams
from paged_engine.core import RequestValidationError
from paged_engine.sampling_params import SamplingParamsError

from tests.model.test_runner_vs_hf import MAX_TOKENS, hf_greedy, prompts
from tests.model.tiny_models import ARCHS, BLOCK_SIZE, VOCAB, save_tiny_model, save_tiny_tokenizer

GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def make_llm(folder, **kwargs) -> LLM:
    settings = dict(block_size=BLOCK_SIZE, num_kv_blocks=256, max_model_len=96)
    settings.update(kwargs)
    # 64 running at once, or the token budget if smaller: every running sequence needs a token per step
    settings.setdefault("max_num_seqs", min(64, settings.get("max_num_batched_tokens", 64)))
    return LLM(str(folder), **settings)


def token_ids(outputs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outputs]


@pytest.fixture(scope="module")
def gemma_folder(tmp_path_factory):
    folder = save_tiny_model("gemma3", tmp_path_factory.mktemp("gemma3"))
    save_tiny_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def gemma_expected(gemma_folder):
    return token_ids(make_llm(gemma_folder).generate(prompts(), GREEDY))


@pytest.mark.parametrize("arch", ARCHS)
def test_engine_matches_transformers(arch, tmp_path):
    folder = save_tiny_model(arch, tmp_path)
    save_tiny_tokenizer(folder)
    # a small chunk budget mixes prefill chunks with decode tokens in one step
    got = token_ids(make_llm(folder, max_num_batched_tokens=16).generate(prompts(), GREEDY))
    assert got == hf_greedy(folder, prompts(), MAX_TOKENS)


@pytest.mark.parametrize("prefix_caching", [False, True])
@pytest.mark.parametrize("budget", [5, 2048])
def test_invariant_under_prefix_caching_and_chunk_budget(gemma_folder, gemma_expected, prefix_caching, budget):
    llm = make_llm(gemma_folder, enable_prefix_caching=prefix_caching, max_num_batched_tokens=budget)
    assert token_ids(llm.generate(prompts(), GREEDY)) == gemma_expected
    # a second pass hits the prefix cache (when on) and must not change anything
    assert token_ids(llm.generate(prompts(), GREEDY)) == gemma_expected


def test_invariant_under_preemption(gemma_folder, gemma_expected):
    # 4 groups (2 sliding, 2 full): the longest request (37 tokens) holds up to 2 * 5 + 2 * 3 blocks; 19 usable
    # blocks cannot hold all four requests to the end at once
    llm = make_llm(gemma_folder, num_kv_blocks=20, max_model_len=40)
    assert token_ids(llm.generate(prompts(), GREEDY)) == gemma_expected
    assert llm.engine.core.num_preemptions > 0


def test_invariant_under_batch_size(gemma_folder):
    g = torch.Generator().manual_seed(7)
    many = [torch.randint(3, VOCAB, (int(n),), generator=g).tolist() for n in torch.randint(1, 30, (64,), generator=g)]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    llm = make_llm(gemma_folder, num_kv_blocks=1024)
    batched = token_ids(llm.generate(many, params))
    single = [token_ids(llm.generate([p], params))[0] for p in many[:8]]
    assert batched[:8] == single
    solo_llm = make_llm(gemma_folder, num_kv_blocks=1024, max_num_seqs=1)
    assert token_ids(solo_llm.generate(many[8:16], params)) == batched[8:16]


def _peak_blocks(llm: LLM, prompt: list[int], params: SamplingParams, copies: int) -> int:
    engine = llm.engine
    for i in range(copies):
        engine.add_request(f"peak-{copies}-{i}", prompt, params)
    pool = engine.core.scheduler.kv.pool
    peak = 0
    while engine.has_unfinished_requests():
        engine.step()
        peak = max(peak, pool.num_usable_blocks - pool.num_free_blocks)
    return peak


def test_parallel_sampling_shares_prompt_blocks(gemma_folder):
    prompt = prompts()[3]  # 25 tokens: 3 full blocks shared by the samples
    llm = make_llm(gemma_folder, enable_prefix_caching=False)
    params = SamplingParams(temperature=1.0, max_tokens=4, seed=0, ignore_eos=True)
    forked = _peak_blocks(llm, prompt, SamplingParams(temperature=1.0, n=4, max_tokens=4, seed=0, ignore_eos=True), 1)
    independent = _peak_blocks(llm, prompt, params, 4)
    assert forked < independent
    out = llm.generate(prompt, SamplingParams(temperature=1.0, n=4, max_tokens=5, seed=1, ignore_eos=True))[0]
    assert [c.index for c in out.outputs] == [0, 1, 2, 3]
    assert all(len(c.token_ids) == 5 and c.finish_reason == "length" for c in out.outputs)


def test_text_logprobs_and_stop_strings(gemma_folder, gemma_expected):
    llm = make_llm(gemma_folder)
    text_prompt = " ".join(f"t{t}" for t in prompts()[1])
    out = llm.generate(text_prompt, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=3))
    completion = out[0].outputs[0]
    assert completion.token_ids == gemma_expected[1]
    assert completion.text.split() == [f"t{t}" for t in gemma_expected[1]]
    assert len(completion.logprobs) == MAX_TOKENS
    first = completion.logprobs[0]
    assert first.token_ids[0] == completion.token_ids[0] and first.ranks[0] == 1 and len(first.token_ids) == 4
    stop = f"t{gemma_expected[1][2]}"
    stopped = llm.generate(text_prompt, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, stop=[stop]))[0]
    assert stopped.outputs[0].finish_reason == "stop" and stopped.outputs[0].stop_reason == stop
    assert stop not in stopped.outputs[0].text


def test_bad_input_is_refused_and_others_unaffected(gemma_folder, gemma_expected):
    llm = make_llm(gemma_folder)
    engine = llm.engine
    engine.add_request("good", prompts()[0], GREEDY)
    with pytest.raises(RequestValidationError, match="prompt has 97 tokens, but the context is 96"):
        engine.add_request("too-long", [5] * 97, GREEDY)
    with pytest.raises(RequestValidationError, match=rf"token id {VOCAB}, outside the vocabulary \[0, {VOCAB}\)"):
        engine.add_request("bad-token", [5, VOCAB], GREEDY)
    with pytest.raises(SamplingParamsError, match="top_p"):
        engine.add_request("bad-param", [5, 6], SamplingParams(top_p=1.5))
    finished = []
    while engine.has_unfinished_requests():
        finished += engine.step()
    assert [o.request_id for o in finished] == ["good"]
    assert finished[0].outputs[0].token_ids == gemma_expected[0]
    with pytest.raises(RequestValidationError, match="context is 96"):
        llm.generate([prompts()[0], [5] * 200], GREEDY)
    assert not engine.has_unfinished_requests()


@pytest.mark.parametrize(
    ("params", "param"),
    [
        (SamplingParams(stop_token_ids=[3, VOCAB]), "stop_token_ids"),
        (SamplingParams(logit_bias={VOCAB + 5: 1.0}), "logit_bias"),
        (SamplingParams(allowed_token_ids=[-1]), "allowed_token_ids"),
        (SamplingParams(logprobs=21), "logprobs"),
        (SamplingParams(prompt_logprobs=21), "prompt_logprobs"),
        (SamplingParams(max_tokens=200), "max_tokens"),
    ],
)
def test_model_dependent_fields_are_refused_before_scheduling(gemma_folder, params, param):
    """The fields that used to reach the step unchecked (one of them killed the server's engine core)."""
    llm = make_llm(gemma_folder)
    with pytest.raises(RequestValidationError) as info:
        llm.generate(prompts()[0], params)
    assert info.value.param == param
    assert not llm.engine.has_unfinished_requests() and not llm.engine.core.has_unfinished_requests()


def test_prompt_logprobs_match_transformers(gemma_folder):
    from transformers import AutoModelForCausalLM

    prompt = prompts()[3]
    llm = make_llm(gemma_folder, enable_prefix_caching=False, max_num_batched_tokens=7)
    params = SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=2)
    out = llm.generate(prompt, params)[0]
    assert len(out.prompt_logprobs) == len(prompt) and out.prompt_logprobs[0] is None
    hf = AutoModelForCausalLM.from_pretrained(gemma_folder, dtype=torch.float32).eval()
    with torch.no_grad():
        reference = torch.log_softmax(hf(torch.tensor([prompt])).logits[0], dim=-1)
    for j, entry in enumerate(out.prompt_logprobs[1:], start=1):
        assert entry.token_ids[0] == prompt[j] and len(entry.token_ids) == 3
        torch.testing.assert_close(torch.tensor(entry.logprobs), reference[j - 1, entry.token_ids], atol=1e-4, rtol=0)


def test_parallel_samples_each_carry_the_prompt_logprobs(gemma_folder):
    prompt = prompts()[3]
    llm = make_llm(gemma_folder, max_num_batched_tokens=7)  # the shared prompt is computed over several steps
    single = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=2))[0]
    parallel = llm.generate(prompt, SamplingParams(temperature=1.0, seed=0, n=3, max_tokens=2, prompt_logprobs=2))[0]
    assert len(parallel.prompt_logprobs) == len(prompt) and parallel.prompt_logprobs[0] is None
    for ours, reference in zip(parallel.prompt_logprobs[1:], single.prompt_logprobs[1:], strict=True):
        assert ours.token_ids == reference.token_ids
        torch.testing.assert_close(torch.tensor(ours.logprobs), torch.tensor(reference.logprobs))


def test_prompt_forms_and_per_prompt_params(gemma_folder, gemma_expected):
    llm = make_llm(gemma_folder)
    p0, p1 = prompts()[0], prompts()[1]
    outs = llm.generate(
        [{"prompt_token_ids": p0}, {"prompt": " ".join(f"t{t}" for t in p1)}],
        [GREEDY, SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)],
    )
    assert outs[0].outputs[0].token_ids == gemma_expected[0]
    assert outs[1].prompt_token_ids == p1 and outs[1].outputs[0].token_ids == gemma_expected[1][:3]
    assert token_ids(llm.generate(p0, GREEDY)) == [gemma_expected[0]]  # one prompt as a bare token list
    with pytest.raises(ValueError, match="got 1 sampling params for 2 prompts"):
        llm.generate([p0, p1], [GREEDY])
    with pytest.raises(ValueError, match="needs 'prompt' or 'prompt_token_ids'"):
        llm.generate([{"text": "t5"}])


def test_abort_frees_blocks_and_leaves_others(gemma_folder, gemma_expected):
    llm = make_llm(gemma_folder)
    engine = llm.engine
    pool = engine.core.scheduler.kv.pool
    free_before = pool.num_free_blocks
    engine.add_request("keep", prompts()[2], GREEDY)
    engine.add_request("drop", prompts()[3], SamplingParams(temperature=0.0, n=2, max_tokens=50, ignore_eos=True))
    engine.step()
    engine.abort_request("drop")
    finished = []
    while engine.has_unfinished_requests():
        finished += engine.step()
    assert [o.request_id for o in finished] == ["keep"]
    assert finished[0].outputs[0].token_ids == gemma_expected[2]
    engine.step()  # the runner hears of the last finished request
    assert pool.num_free_blocks == free_before
