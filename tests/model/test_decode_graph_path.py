"""The GPU runner's decode path, exercised on the CPU: persistent buffers, fixed-width block tables, and decode
steps padded to a CUDA-graph size (what a captured graph computes, run eagerly). Greedy tokens must be those of
the plain eager path, for every architecture switch the padded rows could disturb (GQA, MQA, sliding windows)."""

from __future__ import annotations

import pytest
import torch
from paged_engine.attention import get_backend
from paged_engine.loader.hf import load_hf_model
from paged_engine.worker.cuda_graphs import PaddedDecode, capture_sizes, graphs_off_reason, padded_size
from paged_engine.worker.kv_cache import plan_kv_cache
from paged_engine.worker.model_runner import ModelRunner

from .harness import run_manual
from .tiny_models import save_tiny_model

MAX_MODEL_LEN = 128


def test_capture_sizes_cover_every_batch_up_to_max_num_seqs() -> None:
    assert capture_sizes(1) == [1]
    assert capture_sizes(8) == [1, 2, 4, 8]
    assert capture_sizes(32) == [1, 2, 4, 8, 16, 24, 32]
    assert capture_sizes(20) == [1, 2, 4, 8, 16, 20]
    for max_num_seqs in range(1, 300):
        sizes = capture_sizes(max_num_seqs)
        assert sizes == sorted(set(sizes)) and sizes[-1] == max_num_seqs
        for n in range(1, max_num_seqs + 1):
            size = padded_size(n, sizes)
            assert size is not None and size >= n and size - n < 8, (max_num_seqs, n, size)
        assert padded_size(max_num_seqs + 1, sizes) is None


def test_graphs_are_off_for_what_cannot_replay_them() -> None:
    assert graphs_off_reason("cuda", "cuda", enforce_eager=False) is None
    assert graphs_off_reason("cuda", "cuda", enforce_eager=True) == "--enforce-eager"
    assert "cpu" in graphs_off_reason("cpu", "cpu", enforce_eager=False)
    assert "reference" in graphs_off_reason("cuda", "reference", enforce_eager=False)


def make_runner(folder, backend: str, decode_mode: str, max_graph_batch: int | None = None) -> ModelRunner:
    model, _ = load_hf_model(folder)
    plan = plan_kv_cache(model, 8, torch.float32, MAX_MODEL_LEN, num_blocks=512)
    return ModelRunner(
        model, plan, get_backend(backend), 16, MAX_MODEL_LEN, decode_mode=decode_mode, max_graph_batch=max_graph_batch
    )


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_padded_decode_matches_eager(arch: str, backend: str, tmp_path, monkeypatch) -> None:
    folder = save_tiny_model(arch, tmp_path)
    gen = torch.Generator().manual_seed(5)
    # five prompts: decode batches of 5 pad to 8; one long enough to slide out of gemma3's 12-token window
    prompts = [torch.randint(3, 128, (n,), generator=gen).tolist() for n in (3, 9, 17, 40, 5)]
    eager = run_manual(make_runner(folder, backend, "eager"), prompts, max_tokens=12, budget=32)
    padded_steps: list[tuple[int, int]] = []
    run = PaddedDecode.run

    def recording_run(self, size):
        hidden = run(self, size)
        padded_steps.append((size, int(self.buffers.seq_lens.host[:size].astype(bool).sum())))
        return hidden

    monkeypatch.setattr(PaddedDecode, "run", recording_run)
    runner = make_runner(folder, backend, "padded")
    assert run_manual(runner, prompts, max_tokens=12, budget=32) == eager
    assert padded_steps and any(size == 8 for size, _ in padded_steps), padded_steps


def test_batches_larger_than_the_largest_graph_run_eagerly(tmp_path, monkeypatch) -> None:
    folder = save_tiny_model("llama", tmp_path)
    prompts = [[5, 6, 7, 8 + i] for i in range(6)]
    eager = run_manual(make_runner(folder, "cpu", "eager"), prompts, max_tokens=6)
    sizes: list[int] = []
    run = PaddedDecode.run
    monkeypatch.setattr(PaddedDecode, "run", lambda self, size: sizes.append(size) or run(self, size))
    assert run_manual(make_runner(folder, "cpu", "padded", max_graph_batch=4), prompts, max_tokens=6) == eager
    assert sizes == [], "six sequences do not fit the largest graph (4): every decode step runs eagerly"


def test_eager_steps_read_fixed_width_block_tables(tmp_path, monkeypatch) -> None:
    """The eager step hands attention a narrow view of the persistent table, not a fresh tensor per step."""
    folder = save_tiny_model("llama", tmp_path)
    runner = make_runner(folder, "cpu", "eager")
    seen = []
    forward = runner.model.forward

    def seeing(ids, pos, meta, hidden=None):
        seen.append(meta.block_tables[0])
        return forward(ids, pos, meta, hidden)

    monkeypatch.setattr(runner.model, "forward", seeing)
    run_manual(runner, [[5, 6, 7, 8, 9, 10, 11, 12, 13]], max_tokens=3)
    width = runner.batch.max_blocks_per_req
    persistent = runner.buffers.block_tables[0].device
    assert seen and all(t.stride(0) == width and t.data_ptr() == persistent.data_ptr() for t in seen)
