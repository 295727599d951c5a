"""The kernel backends behind the AttentionBackend interface: registry names, and agreement with the engine's
torch reference backend, op by op and on whole greedy generations of tiny models. (Which backend serves a model:
test_attention_selection.py.)"""

from __future__ import annotations

import pytest
import torch
from paged_engine.attention import get_backend
from paged_engine.loader.hf import load_hf_model
from paged_engine.worker.kv_cache import plan_kv_cache
from paged_engine.worker.model_runner import ModelRunner

from tests.model.harness import run_manual
from tests.model.tiny_models import ARCHS, BLOCK_SIZE, VOCAB, save_tiny_model

from .batches import make_batch

pytestmark = pytest.mark.usefixtures("kernels")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on machines without a GPU")
def test_cuda_backend_without_a_gpu_says_why() -> None:
    with pytest.raises(RuntimeError, match=r"attention backend 'cuda' needs a visible GPU"):
        get_backend("cuda")


@pytest.mark.parametrize("window", [-1, 9])
def test_cpu_backend_agrees_with_the_engine_reference(window: int) -> None:
    batch = make_batch([(40, 40), (70, 1), (25, 6)], num_heads=4, num_kv_heads=1, head_dim=64, sliding_window=window)
    for cache in (batch.key_cache, batch.value_cache):
        cache.nan_to_num_(0.0)  # the reference backend gathers whole blocks, so it must not see poison
    outs = []
    for name in ("reference", "cpu"):
        out = torch.zeros_like(batch.query)
        get_backend(name).paged_attention(out, *batch.args())
        outs.append(out)
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module", params=ARCHS)
def tiny_folder(request, tmp_path_factory):
    return save_tiny_model(request.param, tmp_path_factory.mktemp(request.param))


def greedy(folder, backend: str, budget: int) -> list[list[int]]:
    model, _ = load_hf_model(folder)
    plan = plan_kv_cache(model, BLOCK_SIZE, torch.float32, 128, num_blocks=256)
    runner = ModelRunner(model, plan, get_backend(backend), max_num_reqs=8, max_model_len=128)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in (5, BLOCK_SIZE, 29)]
    return run_manual(runner, prompts, max_tokens=10, budget=budget)


def test_greedy_generation_matches_the_reference_backend(tiny_folder) -> None:
    """Every architecture (GQA, MQA, sliding-window layers, Gemma's mixed layers), with prompts chunked by a
    7-token budget and mixed with decode: the CPU kernels produce the reference backend's tokens exactly."""
    assert greedy(tiny_folder, "cpu", budget=7) == greedy(tiny_folder, "reference", budget=7)


def test_cuda_arch_flags() -> None:
    from paged_engine.kernels import build

    assert build.cuda_arch_flags("90") == ["-gencode=arch=compute_90,code=sm_90"]
    assert build.cuda_arch_flags("8.0;90a") == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=sm_90a",
    ]
    with pytest.raises(build.KernelBuildError, match=r"PAGED_CUDA_ARCH entry 'hopper' is not an SM version"):
        build.cuda_arch_flags("hopper")


def test_jit_build_without_a_compiler_is_a_clear_error(monkeypatch) -> None:
    from paged_engine.kernels import build

    monkeypatch.setenv("CXX", "no-such-compiler-for-paged")
    with pytest.raises(build.KernelBuildError, match=r"no C\+\+ compiler \(c\+\+ or \$CXX\) on PATH"):
        build._jit_build(with_cuda=False)


def test_jit_build_without_sources_is_a_clear_error(monkeypatch, tmp_path) -> None:
    from paged_engine.kernels import build

    monkeypatch.setattr(build, "CSRC", tmp_path)
    with pytest.raises(build.KernelBuildError, match=r"kernel sources not found under .* \(set PAGED_CSRC\)"):
        build._jit_build(with_cuda=False)
