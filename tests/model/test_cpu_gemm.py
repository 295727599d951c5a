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
    lm_head_for_cpu,
    pack_linear_layers,
    resolve_gemm_backend,
)
from paged_engine.worker.cpu_malloc import keep_freed_memory
from torch import nn

from tests.model.test_engine import GREEDY, make_llm, token_ids
from tests.model.test_runner_vs_hf import prompts
from tests.model.tiny_models import save_tiny_model, save_tiny_tokenizer

onednn = pytest.mark.skipif(
    resolve_gemm_backend("auto", torch.device("cpu"), torch.float32) != "packed", reason="torch built without oneDNN"
)


@onednn
@pytest.mark.parametrize("rows", [0, 1, 7, 64, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_matches_dense(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 40, generator=gen)
    b = torch.randn(96, generator=gen) if bias else None
    x = torch.randn(rows, 40, generator=gen)
    out = OneDNNLinear(weight, b)(x)
    assert out.shape == (rows, 96)
    torch.testing.assert_close(out, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)


@onednn
def test_pack_replaces_every_linear_and_keeps_results():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Sequential(nn.Linear(32, 8, bias=False)))
    x = torch.randn(5, 16)
    expected = model(x)
    assert pack_linear_layers(model) == 2
    assert not any(type(m) is nn.Linear for m in model.modules())
    torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_backend_choice_and_errors():
    cpu = torch.device("cpu")
    assert resolve_gemm_backend("torch", cpu, torch.float32) == "torch"
    # fp16 has no packed CPU GEMM: auto falls back quietly, an explicit request is refused with the reason
    assert resolve_gemm_backend("auto", cpu, torch.float16) == "torch"
    with pytest.raises(ValueError, match="float16"):
        resolve_gemm_backend("packed", cpu, torch.float16)
    with pytest.raises(ValueError, match="device is cuda"):
        resolve_gemm_backend("packed", torch.device("cuda"), torch.float32)
    with pytest.raises(ValueError, match="auto, packed, torch"):
        resolve_gemm_backend("mkl", cpu, torch.float32)


@onednn
def test_engine_tokens_equal_with_and_without_packing(tmp_path):
    gemma_folder = save_tiny_model("gemma3", tmp_path)
    save_tiny_tokenizer(gemma_folder)
    dense = make_llm(gemma_folder, gemm_backend="torch")
    packed = make_llm(gemma_folder, gemm_backend="packed")
    assert dense.engine.core.gemm_backend == "torch" and packed.engine.core.gemm_backend == "packed"
    assert token_ids(packed.generate(prompts(), GREEDY)) == token_ids(dense.generate(prompts(), GREEDY))
    # Gemma ties its head: the packed head's panels serve the lookups, and the dense rows are gone.
    model = packed.engine.core.model
    assert isinstance(model.embed_tokens, PanelEmbedding)
    assert "embed_tokens.weight" not in dict(model.named_parameters())


def test_panel_embedding_reads_the_rows_of_the_packed_head():
    assert cpu_kernels_available()
    weight = torch.randn(37, 24)  # a vocabulary that leaves the last panel partly empty
    embedding = PanelEmbedding(PanelLinear(weight))
    ids = torch.tensor([0, 15, 16, 36, 5, 5])
    assert torch.equal(embedding(ids), weight[ids])
    assert torch.equal(embedding(ids.view(2, 3)), weight[ids.view(2, 3)])


def test_lm_head_uses_the_panel_kernel_for_fp32():
    """CI builds the CPU kernels, so an fp32 head must get the panel kernel; bf16 stays with oneDNN."""
    assert cpu_kernels_available()
    assert isinstance(lm_head_for_cpu(torch.randn(50, 16), kernels=True), PanelLinear)
    assert isinstance(lm_head_for_cpu(torch.randn(50, 16), kernels=False), OneDNNLinear)
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert isinstance(lm_head_for_cpu(torch.randn(50, 16).bfloat16(), kernels=True), OneDNNLinear)


def test_malloc_setting_applies_on_glibc():
    import platform

    assert keep_freed_memory() == (platform.libc_ver()[0] == "glibc")
