"""Beam search through the whole engine on tiny random checkpoints: equal to transformers' ``generate(num_beams=W,
do_sample=False)``, beams sharing their blocks (fewer than W sequences' worth), and every block back in the pool
after pruning, finishing and aborting."""

from __future__ import annotations

import functools

import pytest
import torch
from paged_engine import LLM, SamplingParams
from paged_engine.sampling_params import SamplingParamsError

from tests.model.tiny_models import BLOCK_SIZE, save_tiny_model, save_tiny_tokenizer

EOS = 2
MAX_TOKENS = 10
CASES = [  # (width, length_penalty, early_stopping)
    (1, 1.0, False),
    (2, 1.0, False),
    (3, 0.5, True),
    (4, 2.0, "never"),
    (3, -0.5, "never"),
    (4, 1.0, True),
]


def make_llm(folder, **kwargs) -> LLM:
    settings = dict(block_size=BLOCK_SIZE, num_kv_blocks=256, max_model_len=64, max_num_seqs=16)
    settings.update(kwargs)
    return LLM(str(folder), **settings)


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    return [torch.randint(3, 128, (int(n),), generator=g).tolist() for n in (1, 5, 9, 14, 19)]


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    """A llama whose EOS logit is scaled up, so that beams end at EOS at varied lengths (tested both ways)."""
    import transformers as tf

    folder = save_tiny_model("llama", tmp_path_factory.mktemp("llama-eos"))
    model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 3.0
    model.save_pretrained(folder, safe_serialization=True)
    save_tiny_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def llama_llm(llama_folder):
    return make_llm(llama_folder, max_num_batched_tokens=16)  # prefill chunks mixed with the beams' decode tokens


@pytest.fixture(scope="module")
def gemma_folder(tmp_path_factory):
    folder = save_tiny_model("gemma3", tmp_path_factory.mktemp("gemma3"))  # sliding-window and full groups
    save_tiny_tokenizer(folder)
    return folder


@functools.cache
def hf_model(folder):
    import transformers as tf

    return tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def hf_beams(folder, prompt: list[int], width: int, length_penalty: float, early_stopping) -> list[list[int]]:
    """transformers' returned beams, best first, as generated tokens up to and including EOS."""
    out = hf_model(folder).generate(
        torch.tensor([prompt]),
        num_beams=width,
        num_return_sequences=width,
        do_sample=False,
        max_new_tokens=MAX_TOKENS,
        length_penalty=length_penalty,
        early_stopping=early_stopping,
        eos_token_id=EOS,
        pad_token_id=0,
    )
    beams = []
    for row in out[:, len(prompt) :].tolist():
        beams.append(row[: row.index(EOS) + 1] if EOS in row else row)
    return beams


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_beams_equal_transformers(arch, llama_folder, llama_llm, gemma_folder):
    folder = llama_folder if arch == "llama" else gemma_folder
    llm = llama_llm if arch == "llama" else make_llm(folder, max_num_batched_tokens=16)
    ended_at_eos = 0
    for i, (width, length_penalty, early_stopping) in enumerate(CASES):
        batch = prompts()[i % 2 :: 2]  # several searches at once in one batch
        outputs = llm.beam_search(batch, width, MAX_TOKENS, length_penalty, early_stopping)
        for prompt, output in zip(batch, outputs, strict=True):
            expected = hf_beams(folder, prompt, width, length_penalty, early_stopping)
            got = [c.token_ids for c in output.outputs]
            assert got == expected, (width, length_penalty, early_stopping, prompt)
            for completion in output.outputs:
                ends = completion.token_ids[-1] == EOS
                ended_at_eos += ends
                assert completion.finish_reason == ("stop" if ends else "length")
    if arch == "llama":
        assert ended_at_eos >= 5, "the EOS-heavy checkpoint should end some beams at EOS"


def test_generate_with_sampling_params_is_the_same_search(llama_llm):
    llm = llama_llm
    params = SamplingParams(n=3, temperature=0.0, max_tokens=MAX_TOKENS, use_beam_search=True, length_penalty=0.5)
    via_generate = llm.generate(prompts()[2], params)[0]
    via_method = llm.beam_search(prompts()[2], 3, MAX_TOKENS, length_penalty=0.5)[0]
    assert [c.token_ids for c in via_generate.outputs] == [c.token_ids for c in via_method.outputs]
    assert [c.index for c in via_generate.outputs] == [0, 1, 2]
    assert via_generate.outputs[0].text  # detokenised like any other output


def _used(llm: LLM) -> int:
    pool = llm.engine.core.scheduler.kv.pool
    return pool.num_usable_blocks - pool.num_free_blocks


def _held_by_requests(llm: LLM) -> int:
    kv = llm.engine.core.scheduler.kv
    return len({b.block_id for m in kv.groups for t in m.req_to_blocks.values() for b in t if not b.is_null})


def _run(llm: LLM, request_id: str, prompt: list[int], params: SamplingParams, check_each_step: bool = True) -> int:
    """Run one request to the end; returns the peak of KV blocks in use."""
    engine = llm.engine
    engine.add_request(request_id, prompt, params)
    peak = 0
    while engine.has_unfinished_requests():
        engine.step()
        peak = max(peak, _used(llm))
        if check_each_step:  # pruned beams gave their blocks back in the step that pruned them
            assert _used(llm) == _held_by_requests(llm)
    return peak


@pytest.mark.parametrize("width", [2, 4])
def test_beams_share_blocks_and_give_every_block_back(llama_llm, width):
    llm = llama_llm
    llm.engine.core.scheduler.reset_prefix_cache()  # the single sequence's peak counts all its blocks
    prompt = prompts()[4]  # 19 tokens: two full blocks every beam shares
    single = _run(llm, "single", prompt, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True))
    assert _used(llm) == 0
    beams = SamplingParams(
        n=width, temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, use_beam_search=True, early_stopping=True
    )
    peak = _run(llm, "beams", prompt, beams)
    assert peak < width * single
    llm.engine.step()  # the runner hears of the last retired beams
    assert _used(llm) == 0 and not llm.engine.core.scheduler.requests


def test_abort_mid_search_frees_every_block(llama_llm):
    llm = llama_llm
    engine = llm.engine
    params = SamplingParams(n=4, temperature=0.0, max_tokens=40, ignore_eos=True, use_beam_search=True)
    engine.add_request("doomed", prompts()[3], params)
    for _ in range(5):
        engine.step()
    scheduler = engine.core.scheduler
    assert sum(r.is_beam for r in scheduler.running) == 4 and _used(llm) > 0
    engine.abort_request("doomed")
    assert _used(llm) == 0 and not scheduler.requests and not scheduler._beams
    engine.step()
    assert not engine.has_unfinished_requests()


def test_beams_survive_preemption(llama_folder, llama_llm):
    # 16 usable blocks hold one search of four beams at its longest (4 blocks each) but not two searches and a
    # long greedy request at once: beams and the other requests are preempted and recomputed
    batch = prompts()[2:5]
    beams = SamplingParams(n=4, temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, use_beam_search=True)
    params = [beams, beams, SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)]
    expected = llama_llm.generate(batch, params)
    llm = make_llm(llama_folder, num_kv_blocks=17, enable_prefix_caching=False)
    got = llm.generate(batch, params)
    assert [[c.token_ids for c in o.outputs] for o in got] == [[c.token_ids for c in o.outputs] for o in expected]
    assert llm.engine.core.num_preemptions > 0
    assert _used(llm) == 0


@pytest.mark.parametrize(
    ("params", "param"),
    [
        (dict(temperature=0.7), "temperature"),
        (dict(top_p=0.9), "top_p"),
        (dict(stop=["t5"]), "stop"),
        (dict(logprobs=2), "logprobs"),
        (dict(n=65), "n"),
        (dict(early_stopping="sometimes"), "early_stopping"),
    ],
)
def test_bad_combinations_are_refused(params, param):
    settings = dict(n=2, temperature=0.0, use_beam_search=True)
    settings.update(params)
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(**settings)
    assert info.value.param == param
