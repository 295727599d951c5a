"""Tensor and pipeline parallelism (a worker process per rank, over gloo) against one device, on tiny random
checkpoints: the same greedy tokens and, within fp32 rounding of the summed partial products, the same logprobs;
also under chunked prefill, prefix-cache hits, preemption, structured output and beam search.

Tolerance: the row-parallel sums add the two ranks' partial dot products in another order than one device does,
so logprobs differ by float32 rounding only; 1e-4 is far below the gaps between tokens of these models.
"""

from __future__ import annotations

import pytest
from paged_engine import LLM, SamplingParams
from paged_engine.sampling_params import StructuredOutputParams

from tests.model.test_runner_vs_hf import MAX_TOKENS, prompts
from tests.model.tiny_models import BLOCK_SIZE, save_tiny_model, save_tiny_tokenizer

LOGPROB_TOLERANCE = 1e-4
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=3)
PLAIN_GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
# llama: 2 KV heads split one per rank; qwen3 and gemma3: a single KV head, replicated; llama with 131 tokens:
# a vocabulary that does not divide by two (the last rank's rows are padded)
CASES = {"llama": ("llama", 128), "qwen3": ("qwen3", 128), "gemma3": ("gemma3", 128), "llama-odd-vocab": ("llama", 131)}


# (tensor, pipeline) layouts per model: TP=2 on all four, PP=2 and TP=2 x PP=2 on a part each (CI time)
LAYOUTS = {
    "llama": [(2, 1), (1, 2)],
    "qwen3": [(2, 1), (2, 2)],
    "gemma3": [(2, 1), (1, 2)],
    "llama-odd-vocab": [(2, 1), (2, 2)],
}


def make_llm(folder, layout: tuple[int, int] = (1, 1), **kwargs) -> LLM:
    settings = dict(block_size=BLOCK_SIZE, num_kv_blocks=256, max_model_len=96, max_num_seqs=16, num_threads=1)
    tp, pp = layout
    return LLM(str(folder), tensor_parallel_size=tp, pipeline_parallel_size=pp, **{**settings, **kwargs})


def generate_both(folder, prompts_, params, layout=(2, 1), **kwargs):
    """The outputs of one device, then of the ranks of ``layout``, on the same settings."""
    one = make_llm(folder, **kwargs).generate(prompts_, params)
    parallel = make_llm(folder, layout, **kwargs)
    try:
        return one, parallel.generate(prompts_, params), parallel
    finally:
        parallel.shutdown()


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    arch, vocab = CASES[request.param]
    folder = save_tiny_model(arch, tmp_path_factory.mktemp(request.param), vocab_size=vocab)
    save_tiny_tokenizer(folder)
    return request.param, folder


def test_greedy_tokens_equal_and_logprobs_within_tolerance(case):
    name, folder = case
    one = make_llm(folder).generate(prompts(), GREEDY)
    for tp, pp in LAYOUTS[name]:
        parallel = make_llm(folder, (tp, pp))
        try:
            two, info = parallel.generate(prompts(), GREEDY), parallel.engine.core.info()
            plain = parallel.generate(prompts(), PLAIN_GREEDY)  # no logprobs: each rank's best token gathered
        finally:
            parallel.shutdown()
        assert [o.outputs[0].token_ids for o in plain] == [o.outputs[0].token_ids for o in one], (tp, pp)
        assert (info.tensor_parallel_size, info.pipeline_parallel_size) == (tp, pp)
        assert (info.world_size, info.collective_backend) == (tp * pp, "gloo")
        for a, b in zip(one, two, strict=True):
            assert b.outputs[0].token_ids == a.outputs[0].token_ids, (tp, pp)
            for pa, pb in zip(a.outputs[0].logprobs, b.outputs[0].logprobs, strict=True):
                assert pb.token_ids == pa.token_ids
                assert pb.logprobs == pytest.approx(pa.logprobs, abs=LOGPROB_TOLERANCE)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    folder = save_tiny_model("gemma3", tmp_path_factory.mktemp("gemma3-features"))
    save_tiny_tokenizer(folder)
    return folder


@pytest.mark.parametrize("layout", [(2, 1), (1, 2)], ids=["tp2", "pp2"])
def test_chunked_prefill_prefix_hits_and_preemption_keep_the_tokens(gemma, layout):
    # 20 blocks cannot hold all four requests to the end at once (see test_engine's preemption case); a 16-token
    # budget cuts prompts into chunks; the second pass hits the prefix cache
    settings = dict(num_kv_blocks=20, max_model_len=40, max_num_batched_tokens=16, enable_prefix_caching=True)
    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    one = make_llm(gemma, **settings).generate(prompts(), greedy)
    tp = make_llm(gemma, layout, **settings)
    try:
        first, second = tp.generate(prompts(), greedy), tp.generate(prompts(), greedy)
        assert tp.engine.core.num_preemptions > 0
        assert tp.engine.core.scheduler.kv.usage == 0.0
    finally:
        tp.shutdown()
    expected = [o.outputs[0].token_ids for o in one]
    assert [o.outputs[0].token_ids for o in first] == expected
    assert [o.outputs[0].token_ids for o in second] == expected
    assert max(o.num_cached_tokens for o in second) > 0


@pytest.mark.parametrize("layout", [(2, 1), (1, 2)], ids=["tp2", "pp2"])
def test_structured_output_and_sampling_with_a_seed(gemma, layout):
    choices = ["t10t11t12", "t20t21", "t30"]
    params = [
        SamplingParams(temperature=0.0, max_tokens=8, structured_output=StructuredOutputParams(choice=choices)),
        SamplingParams(temperature=0.8, top_p=0.9, max_tokens=8, seed=3, ignore_eos=True),
    ]
    one, two, _ = generate_both(gemma, [prompts()[0], prompts()[1]], params, layout)
    assert [o.outputs[0].token_ids for o in two] == [o.outputs[0].token_ids for o in one]
    assert two[0].outputs[0].text.replace(" ", "") in choices


def test_beam_search(gemma):
    one = make_llm(gemma).beam_search(prompts()[:2], beam_width=3, max_tokens=6)
    tp = make_llm(gemma, (2, 1))
    try:
        two = tp.beam_search(prompts()[:2], beam_width=3, max_tokens=6)
    finally:
        tp.shutdown()
    assert [[c.token_ids for c in o.outputs] for o in two] == [[c.token_ids for c in o.outputs] for o in one]
