"""Pre-packed linear layers: same numbers as ``F.linear``, chosen only where they run, and the same greedy tokens
end to end as the dense path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from paged_engine.models.cpu_gemm import (
    OneDNNLinear,
    PanelEmbedding,
    PanelLinear,
    cpu_kernels_available,
    pack_linear_layers,
    packed_linear,
    resolve_gemm_backend,
)
from paged_engine.sampling_params import SamplingParams
from paged_engine.worker.cpu_malloc import keep_freed_memory
from torch import nn

from tests.model.test_engine import GREEDY, make_llm, token_ids
from tests.model.test_runner_vs_hf import prompts
from tests.model.tiny_models import save_tiny_model, save_tiny_tokenizer

CPU = torch.device("cpu")


@pytest.fixture(autouse=True, scope="module")
def _cpu_kernels() -> None:
    """CI builds our CPU kernels (the panel GEMM among them); the engine loads them the same way."""
    assert cpu_kernels_available()


def test_auto_packs_on_this_machine():
    """CI runs torch's PyPI wheel on x86 Linux, built with oneDNN, and builds our kernels (the fixture above): there
    ``auto`` packs, fp32 weights into our panel kernel. The tests below rely on that instead of skipping without it;
    ``test_backend_choice_and_errors`` says when ``auto`` does not pack."""
    assert torch.backends.mkldnn.is_available(), f"torch {torch.__version__} was built without oneDNN"
    assert resolve_gemm_backend("auto", CPU, torch.float32) == "packed"
    assert isinstance(packed_linear(torch.randn(8, 4), None, kernels=cpu_kernels_available()), PanelLinear)


@pytest.mark.parametrize("rows", [0, 1, 7, 64, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_matches_dense(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 40, generator=gen)
    b = torch.randn(96, generator=gen) if bias else None
    x = torch.randn(rows, 40, generator=gen)
    for layer in (OneDNNLinear(weight, b), PanelLinear(weight, b)):
        out = layer(x)
        assert out.shape == (rows, 96)
        torch.testing.assert_close(out, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)
    x3 = x.view(1, rows, 40)  # leading dimensions are kept
    torch.testing.assert_close(PanelLinear(weight, b)(x3), F.linear(x3, weight, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("kernels", "kind"), [(True, PanelLinear), (False, OneDNNLinear)])
def test_pack_replaces_every_linear_and_keeps_results(kernels, kind):
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Sequential(nn.Linear(32, 8, bias=False)))
    x = torch.randn(5, 16)
    expected = model(x)
    assert pack_linear_layers(model, kernels) == 2
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert sum(type(m) is kind for m in model.modules()) == 2
    torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_backend_choice_and_errors(monkeypatch):
    assert resolve_gemm_backend("torch", CPU, torch.float32) == "torch"
    # Where packing cannot run, auto falls back quietly and an explicit request is refused with the reason:
    # fp16 (no packed CPU GEMM), a GPU, bf16 where oneDNN has no bf16 GEMM, a torch built without oneDNN.
    assert resolve_gemm_backend("auto", CPU, torch.float16) == "torch"
    with pytest.raises(ValueError, match="float16"):
        resolve_gemm_backend("packed", CPU, torch.float16)
    assert resolve_gemm_backend("auto", torch.device("cuda"), torch.float32) == "torch"
    with pytest.raises(ValueError, match="device is cuda"):
        resolve_gemm_backend("packed", torch.device("cuda"), torch.float32)
    with pytest.raises(ValueError, match="auto, packed, torch"):
        resolve_gemm_backend("mkl", CPU, torch.float32)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert resolve_gemm_backend("auto", CPU, torch.bfloat16) == "torch"
    assert resolve_gemm_backend("auto", CPU, torch.float32) == "packed"
    with pytest.raises(ValueError, match="oneDNN has no fast bfloat16 GEMM on this CPU"):
        resolve_gemm_backend("packed", CPU, torch.bfloat16)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert resolve_gemm_backend("auto", CPU, torch.float32) == "torch"
    with pytest.raises(ValueError, match="this torch build has no oneDNN"):
        resolve_gemm_backend("packed", CPU, torch.float32)


def test_engine_tokens_equal_with_and_without_packing(tmp_path):
    gemma_folder = save_tiny_model("gemma3", tmp_path)
    save_tiny_tokenizer(gemma_folder)
    dense = make_llm(gemma_folder, gemm_backend="torch")
    packed = make_llm(gemma_folder, gemm_backend="packed")
    assert dense.engine.core.report.gemm_backend == "torch" and packed.engine.core.report.gemm_backend == "packed"
    assert token_ids(packed.generate(prompts(), GREEDY)) == token_ids(dense.generate(prompts(), GREEDY))
    # Gemma ties its head: the packed head's panels serve the lookups, and the dense rows are gone.
    model = packed.engine.core.runner.model
    assert isinstance(model.embed_tokens, PanelEmbedding)
    assert "embed_tokens.weight" not in dict(model.named_parameters())


def test_rescored_greedy_head_gives_the_fp32_heads_tokens(tmp_path):
    """Greedy rows take the bf16-candidates head; rows that need the raw logits (logprobs, sampling) still get
    the fp32 head, and every token is the same as with ``greedy_head="fp32"``. Where oneDNN has no bf16 GEMM,
    ``auto`` keeps the fp32 head."""
    folder = save_tiny_model("gemma3", tmp_path)
    save_tiny_tokenizer(folder)
    rescored, full = make_llm(folder, greedy_head="auto"), make_llm(folder, greedy_head="fp32")
    assert full.engine.core.runner.model.greedy_head is None
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert rescored.engine.core.runner.model.greedy_head is None
        assert token_ids(rescored.generate(prompts(), GREEDY)) == token_ids(full.generate(prompts(), GREEDY))
        return
    assert rescored.engine.core.runner.model.greedy_head is not None
    calls = []
    head = rescored.engine.core.runner.model.greedy_head
    rescored.engine.core.runner.model.greedy_head = lambda hidden: calls.append(len(hidden)) or head(hidden)
    assert token_ids(rescored.generate(prompts(), GREEDY)) == token_ids(full.generate(prompts(), GREEDY))
    assert sum(calls) >= len(prompts()) * GREEDY.max_tokens
    with_logprobs = SamplingParams(temperature=0.0, max_tokens=4, logprobs=2)
    calls.clear()
    got, expected = rescored.generate(prompts(), with_logprobs), full.generate(prompts(), with_logprobs)
    assert not calls and token_ids(got) == token_ids(expected)


def test_panel_embedding_reads_the_rows_of_the_packed_head():
    weight = torch.randn(37, 24)  # a vocabulary that leaves the last panel partly empty
    embedding = PanelEmbedding(PanelLinear(weight))
    ids = torch.tensor([0, 15, 16, 36, 5, 5])
    assert torch.equal(embedding(ids), weight[ids])
    assert torch.equal(embedding(ids.view(2, 3)), weight[ids.view(2, 3)])


def test_fp32_weights_use_the_panel_kernel():
    """An fp32 weight gets the panel kernel where the kernels load; bf16 stays with oneDNN."""
    assert isinstance(packed_linear(torch.randn(50, 16), None, kernels=True), PanelLinear)
    assert isinstance(packed_linear(torch.randn(50, 16), None, kernels=False), OneDNNLinear)
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert isinstance(packed_linear(torch.randn(50, 16).bfloat16(), None, kernels=True), OneDNNLinear)


def test_malloc_setting_applies_on_glibc():
    import platform

    assert keep_freed_memory() == (platform.libc_ver()[0] == "glibc")
