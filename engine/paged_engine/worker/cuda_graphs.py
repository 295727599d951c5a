"""Decode steps replayed from CUDA graphs, one graph per padded batch size.

A decode step of a small model is dominated by kernel launches (hundreds per step), not by the GPU's work;
replaying a captured graph launches them all at once. A graph is captured per batch size in ``capture_sizes``
(1, 2, 4, 8, then every 8 up to ``max_num_seqs``); a step of ``n`` sequences is padded to the next captured size.

Invariants:

- Only steps where every sequence has exactly one query token are replayed; prefill and mixed steps, and
  batches larger than the largest captured size, run eagerly.
- A graph reads its inputs from the runner's persistent :class:`StepBuffers` (full-width block tables, upper
  bound ``max_model_len`` on sequence length) and writes its hidden states into one output tensor it owns; the
  runner fills the buffers, pads them (see ``step_buffers``), replays, and reads the first ``n`` rows.
- Capture runs with every slot at ``-1``: the warm-up and captured launches write nothing into the KV cache.
- Graphs share one memory pool, captured largest first so smaller ones reuse its blocks.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable

import numpy as np
import torch

from paged_engine.attention.backend import AttentionMetadata
from paged_engine.worker.step_buffers import StepBuffers

log = logging.getLogger(__name__)

Forward = Callable[[torch.Tensor, torch.Tensor, AttentionMetadata], torch.Tensor]


def graphs_off_reason(device_type: str, attention_backend: str, enforce_eager: bool) -> str | None:
    """Why decode steps run eagerly on this engine, or None when they replay CUDA graphs."""
    if enforce_eager:
        return "--enforce-eager"
    if device_type != "cuda":
        return f"the engine runs on {device_type}"
    if attention_backend != "cuda":
        return f"the {attention_backend} attention backend reads lengths on the host, which a graph cannot replay"
    return None


def capture_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every 8 up to ``max_num_seqs`` (which is itself included, so every batch fits)."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_num_seqs]
    sizes += list(range(16, max_num_seqs + 1, 8))
    if sizes[-1] != max_num_seqs:
        sizes.append(max_num_seqs)
    return sizes


def padded_size(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest captured size holding ``num_seqs`` sequences, or None when the batch runs eagerly."""
    i = bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


def pad_decode_inputs(buffers: StepBuffers, num_seqs: int, size: int) -> None:
    """Make rows ``num_seqs..size`` harmless padding: one query token each, writing nowhere, attending one key
    of block 0 (never a request's)."""
    if size == num_seqs:
        return
    buffers.input_ids.host[num_seqs:size] = 0
    buffers.positions.host[num_seqs:size] = 0
    for slots in buffers.slot_mappings:
        slots.host[num_seqs:size] = -1
    for table in buffers.block_tables:
        table.host[num_seqs:size] = 0
    last = buffers.query_start_loc.host[num_seqs]
    buffers.query_start_loc.host[num_seqs + 1 : size + 1] = last + np.arange(1, size - num_seqs + 1)
    buffers.seq_lens.host[num_seqs:size] = 1


def decode_metadata(buffers: StepBuffers, size: int, max_model_len: int) -> AttentionMetadata:
    return buffers.metadata(size, size, 1, max_model_len, buffers.max_blocks_per_req)


class PaddedDecode:
    """Decode steps padded to a captured size and run on the full-width buffers: what a graph computes, run
    eagerly. The CUDA graphs below replay the same thing; on a CPU this is how the padded path is tested."""

    def __init__(self, forward: Forward, buffers: StepBuffers, sizes: list[int], max_model_len: int) -> None:
        self.forward = forward
        self.buffers = buffers
        self.sizes = sizes
        self.max_model_len = max_model_len

    def size_for(self, num_seqs: int) -> int | None:
        return padded_size(num_seqs, self.sizes)

    def run(self, size: int) -> torch.Tensor:
        b, meta = self.buffers, decode_metadata(self.buffers, size, self.max_model_len)
        return self.forward(b.input_ids.device[:size], b.positions.device[:size], meta)


class CudaGraphDecode(PaddedDecode):
    """The padded decode step captured once per size and replayed."""

    def __init__(self, forward: Forward, buffers: StepBuffers, sizes: list[int], max_model_len: int) -> None:
        super().__init__(forward, buffers, sizes, max_model_len)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def capture(self) -> None:
        b = self.buffers
        largest = self.sizes[-1]
        b.query_start_loc.device[: largest + 1].copy_(torch.arange(largest + 1, dtype=torch.int32))
        b.seq_lens.device[:largest].fill_(1)
        for slots in b.slot_mappings:
            slots.device[:largest].fill_(-1)
        for table in b.block_tables:
            table.device[:largest].zero_()
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        start = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        warmup = torch.cuda.Stream()
        for size in reversed(self.sizes):
            warmup.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warmup):
                super().run(size)
            torch.cuda.current_stream().wait_stream(warmup)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                hidden = super().run(size)
            self._graphs[size] = (graph, hidden)
        torch.cuda.synchronize()
        log.info(
            "CUDA graphs: captured %d decode sizes (%s) in %.1f s, %.0f MiB", len(self.sizes),
            ", ".join(map(str, self.sizes)), time.perf_counter() - start,
            (free_before - torch.cuda.mem_get_info()[0]) / 2**20,
        )  # fmt: skip

    def run(self, size: int) -> torch.Tensor:
        graph, hidden = self._graphs[size]
        graph.replay()
        return hidden
