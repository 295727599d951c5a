"""The CUDA kernels against the reference on a GPU; runs only where one is visible (scripts/gpu_check.sh).

CI has no GPU, so there these tests are skipped and test_cuda_compile.py keeps the kernels building.
"""

from __future__ import annotations

import pytest
import torch
from paged_engine.attention import get_backend
from paged_engine.kernels import ops
from paged_engine.loader.hf import load_hf_model
from paged_engine.worker.kv_cache import plan_kv_cache
from paged_engine.worker.model_runner import ModelRunner

from tests.model.harness import run_manual

from . import reference
from .batches import PagedBatch, make_batch

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (run scripts/gpu_check.sh on one)"),
    pytest.mark.usefixtures("kernels"),
]

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def to_cuda(batch: PagedBatch) -> PagedBatch:
    for field in ("query", "key_cache", "value_cache", "block_tables", "query_start_loc", "seq_lens"):
        setattr(batch, field, getattr(batch, field).cuda())
    return batch


def check(batch: PagedBatch) -> None:
    expected = reference.paged_attention(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in batch.args()])
    gpu = to_cuda(batch)
    out = torch.zeros_like(gpu.query)
    ops.paged_attention(out, *gpu.args())
    tol = TOLERANCE[gpu.query.dtype]
    torch.testing.assert_close(out.cpu().float(), expected.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("seqs", "window"),
    [
        ([(1, 1)], -1),
        ([(16, 16)], -1),
        ([(17, 2), (40, 0), (33, 1)], -1),
        ([(20, 5), (3, 1)], 1000),
        ([(700, 3), (900, 1)], 100),  # null blocks before the window; several partitions
        ([(3000, 1), (1500, 20), (513, 1)], -1),  # split-K over 512-key partitions, merged
        ([(64, 64), (81, 1), (200, 1)], -1),
    ],
)
def test_attention_matches_reference(seqs, window: int, dtype: torch.dtype) -> None:
    check(make_batch(seqs, sliding_window=window, dtype=dtype))


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 4), (8, 2), (8, 1), (6, 2), (32, 8)])
def test_head_layouts(head_dim: int, num_heads: int, num_kv_heads: int) -> None:
    check(make_batch([(37, 37), (600, 1), (21, 5)], num_heads=num_heads, num_kv_heads=num_kv_heads,
                     head_dim=head_dim, dtype=torch.bfloat16))  # fmt: skip


def test_soft_cap() -> None:
    batch = make_batch([(45, 12), (700, 1)], logits_soft_cap=5.0, seed=3)
    batch.scale = 1.0
    check(batch)


def test_decode_replays_in_a_cuda_graph() -> None:
    """No host sync inside the op: a captured decode step replays with new metadata and matches eager."""
    batch = to_cuda(make_batch([(300, 1), (90, 1), (1200, 1)], dtype=torch.bfloat16))
    out = torch.zeros_like(batch.query)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        ops.paged_attention(out, *batch.args())  # warm-up allocations outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.paged_attention(out, *batch.args())
    batch.seq_lens.copy_(torch.tensor([250, 91, 1000], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    eager = torch.zeros_like(out)
    ops.paged_attention(eager, *batch.args())
    torch.testing.assert_close(out, eager)


def test_reshape_and_cache_and_copy_blocks() -> None:
    key_cache = torch.zeros(6, 4, 2, 64, device="cuda", dtype=torch.bfloat16)
    value_cache = torch.zeros_like(key_cache)
    qkv = torch.randn(5, 3, 2, 64, device="cuda", dtype=torch.bfloat16)
    slots = torch.tensor([3, -1, 4, 23, 0], device="cuda")
    ops.reshape_and_cache(qkv[:, 1], qkv[:, 2], key_cache, value_cache, slots)
    expected_k, expected_v = torch.zeros_like(key_cache).cpu(), torch.zeros_like(value_cache).cpu()
    reference.reshape_and_cache(qkv[:, 1].cpu(), qkv[:, 2].cpu(), expected_k, expected_v, slots.cpu())
    assert torch.equal(key_cache.cpu(), expected_k) and torch.equal(value_cache.cpu(), expected_v)
    mapping = torch.tensor([[0, 5], [1, 2]], device="cuda")
    ops.copy_blocks([key_cache], [value_cache], mapping)
    reference.copy_blocks([expected_k], [expected_v], mapping.cpu())
    assert torch.equal(key_cache.cpu(), expected_k) and torch.equal(value_cache.cpu(), expected_v)


def save_model(folder, arch: str):
    """A tiny random model with head_dim 64 (the CUDA kernel's smallest), saved as a HF folder."""
    import transformers as tf

    common = dict(vocab_size=128, hidden_size=128, intermediate_size=192, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
    if arch == "gemma3":
        config = tf.Gemma3TextConfig(**common, sliding_window=24, query_pre_attn_scalar=64,
                                     layer_types=["sliding_attention", "full_attention"] * 2)  # fmt: skip
        cls = tf.Gemma3ForCausalLM
    else:
        config = tf.LlamaConfig(**common)
        cls = tf.LlamaForCausalLM
    torch.manual_seed(0)
    model = cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.normal_(0.0 if "norm" in name and arch == "gemma3" else (1.0 if "norm" in name else 0.0), 0.15)
    model.config.architectures = [cls.__name__]
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def greedy(folder, device: str, backend: str) -> list[list[int]]:
    model, _ = load_hf_model(folder, device=device)
    plan = plan_kv_cache(model, 16, torch.float32, 512, num_blocks=256)
    runner = ModelRunner(model, plan, get_backend(backend), max_num_reqs=8, max_model_len=512, device=device)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 128, (n,), generator=gen).tolist() for n in (5, 16, 61, 300)]
    return run_manual(runner, prompts, max_tokens=16, budget=64)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_greedy_generation_on_gpu_matches_cpu(arch: str, tmp_path) -> None:
    folder = save_model(tmp_path, arch)
    assert greedy(folder, "cuda", "cuda") == greedy(folder, "cpu", "cpu")


def test_wide_block_table_runs_in_token_slices() -> None:
    """A block table covering 2M keys makes 4096 partitions per token; the partials budget then forces the
    launch into slices of tokens sharing one buffer, which must not disturb each other."""
    batch = make_batch([(100, 100), (50, 1), (700, 3)], num_heads=8, num_kv_heads=2, head_dim=64)
    wide = torch.zeros(batch.block_tables.shape[0], (1 << 21) // 16, dtype=torch.int32)
    wide[:, : batch.block_tables.shape[1]] = batch.block_tables
    batch.block_tables = wide
    check(batch)


def _flash_or_skip():
    from paged_engine.attention.flash import load_flash_attention
    from paged_engine.attention.selection import flash_gap

    flash = load_flash_attention()
    if isinstance(flash, str):
        pytest.skip(flash)
    gap = flash_gap(torch.cuda.get_device_capability(), "bfloat16", 128)
    if gap is not None:
        pytest.skip(gap)
    return flash


@pytest.mark.parametrize(
    ("seqs", "window", "cap"),
    [([(40, 40), (700, 90), (9, 1)], -1, 0.0), ([(1000, 300), (33, 33)], 256, 0.0), ([(64, 64), (130, 7)], -1, 30.0)],
)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_flash_attention_4_prefill_matches_reference(seqs, window: int, cap: float, head_dim: int) -> None:
    from paged_engine.attention.flash import flash_prefill

    flash = _flash_or_skip()
    batch = make_batch(seqs, num_heads=8, num_kv_heads=2, head_dim=head_dim, dtype=torch.bfloat16,
                       sliding_window=window, logits_soft_cap=cap)  # fmt: skip
    # the engine's cache holds no NaN (block 0 is zeros); FlashAttention may read whole pages
    batch.key_cache, batch.value_cache = batch.key_cache.nan_to_num(0.0), batch.value_cache.nan_to_num(0.0)
    expected = reference.paged_attention(*batch.args())
    gpu = to_cuda(batch)
    out = torch.zeros_like(gpu.query)
    flash_prefill(flash.varlen, out, *gpu.args())
    torch.testing.assert_close(out.cpu().float(), expected.float(), atol=2e-2, rtol=2e-2)


def _runner(folder, decode_mode: str) -> ModelRunner:
    model, _ = load_hf_model(folder, device="cuda")
    plan = plan_kv_cache(model, 16, torch.float32, 512, num_blocks=256)
    runner = ModelRunner(model, plan, get_backend("cuda"), max_num_reqs=8, max_model_len=512, device="cuda",
                         decode_mode=decode_mode)  # fmt: skip
    runner.capture_graphs()
    return runner


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_cuda_graph_decode_matches_eager(arch: str, tmp_path) -> None:
    folder = save_model(tmp_path, arch)
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 128, (n,), generator=gen).tolist() for n in (5, 16, 61, 300, 2)]  # pads 5 -> 8
    eager = run_manual(_runner(folder, "eager"), prompts, max_tokens=24, budget=64)
    graphed = _runner(folder, "cuda_graphs")
    assert graphed.decode is not None and len(graphed.decode._graphs) == len(graphed.decode.sizes)
    assert run_manual(graphed, prompts, max_tokens=24, budget=64) == eager


def test_forward_never_synchronises_with_the_host(tmp_path, monkeypatch) -> None:
    """Prefill, mixed and decode forward passes run under CUDA's sync debug mode set to error."""
    runner = _runner(save_model(tmp_path, "gemma3"), "eager")
    forward = runner._forward

    def checked(inputs):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return forward(inputs)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(runner, "_forward", checked)
    run_manual(runner, [[5] * 40, [7] * 3, [9] * 100], max_tokens=8, budget=48)
