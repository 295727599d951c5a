"""The model step's inputs in persistent buffers: filled on the host, copied to the device once per step.

Why persistent: a CUDA graph replays the kernels it captured on the tensors it captured, so the decode step's
inputs must live at fixed addresses; and allocating and copying a dozen small tensors per step costs more than
the decode itself on a small model. Every step writes its inputs into the host side of these buffers and copies
the used rows to the device with ``non_blocking`` copies, from pinned memory on a GPU.

Invariants:

- Each device buffer has a host twin of the same shape; on a CPU they are the same tensor (no copy at all).
- Block tables have a fixed width, ``max_blocks_per_req`` columns per request row, whatever the step's longest
  sequence. Kernels read them by row stride, so an eager step passes a narrower view (``[:rows, :blocks]``) and
  a captured graph the full width.
- Host buffers are not written while the previous step's copies may still read them: ``begin_step`` waits on
  the event recorded after the last copy (a step that samples synchronises anyway; a prefill-only one may not).
- Rows past a step's used rows are padding: padding tokens write nowhere (slot ``-1``) and padding sequences
  attend one key in block 0, which no request ever owns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from paged_engine.attention.backend import AttentionMetadata


@dataclass
class Staged:
    """One buffer: ``host`` is what the runner writes (numpy), ``device`` what the model reads."""

    host: np.ndarray
    device: torch.Tensor
    _host_tensor: torch.Tensor

    @classmethod
    def allocate(cls, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Staged:
        on_gpu = device.type == "cuda"
        host = torch.zeros(shape, dtype=dtype, pin_memory=on_gpu)
        return cls(host.numpy(), torch.zeros(shape, dtype=dtype, device=device) if on_gpu else host, host)

    def upload(self, rows: int) -> None:
        if self.device is not self._host_tensor:
            self.device[:rows].copy_(self._host_tensor[:rows], non_blocking=True)


class StepBuffers:
    def __init__(
        self, max_num_tokens: int, max_num_reqs: int, max_blocks_per_req: int, num_groups: int, device: torch.device
    ) -> None:
        self.device = device
        self.max_num_tokens = max_num_tokens
        self.max_num_reqs = max_num_reqs
        self.max_blocks_per_req = max_blocks_per_req
        self._copies_done: torch.cuda.Event | None = None
        tokens, reqs = max_num_tokens, max_num_reqs
        self.input_ids = Staged.allocate((tokens,), torch.int64, device)
        self.positions = Staged.allocate((tokens,), torch.int64, device)
        self.slot_mappings = [Staged.allocate((tokens,), torch.int64, device) for _ in range(num_groups)]
        self.query_start_loc = Staged.allocate((reqs + 1,), torch.int32, device)
        self.seq_lens = Staged.allocate((reqs,), torch.int32, device)
        self.logits_indices = Staged.allocate((reqs,), torch.int64, device)
        table_shape = (reqs, max_blocks_per_req)
        self.block_tables = [Staged.allocate(table_shape, torch.int32, device) for _ in range(num_groups)]

    def begin_step(self) -> None:
        """Wait until the previous step's host-to-device copies have read the host buffers."""
        if self._copies_done is not None:
            self._copies_done.synchronize()
            self._copies_done = None

    def upload(self, num_tokens: int, num_reqs: int, num_sampling: int) -> None:
        """Copy the rows this step uses to the device (nothing to do on a CPU, where both sides are one tensor)."""
        if self.device.type != "cuda":
            return
        for token_buffer in (self.input_ids, self.positions, *self.slot_mappings):
            token_buffer.upload(num_tokens)
        self.query_start_loc.upload(num_reqs + 1)
        self.seq_lens.upload(num_reqs)
        self.logits_indices.upload(num_sampling)
        for table in self.block_tables:
            table.upload(num_reqs)
        self._copies_done = torch.cuda.Event()
        self._copies_done.record()

    def metadata(
        self, num_tokens: int, num_reqs: int, max_query_len: int, max_seq_len: int, blocks: int
    ) -> AttentionMetadata:
        """Device views for one step, with ``blocks`` columns of each block table."""
        return AttentionMetadata(
            num_tokens=num_tokens,
            query_start_loc=self.query_start_loc.device[: num_reqs + 1],
            seq_lens=self.seq_lens.device[:num_reqs],
            max_query_len=max_query_len,
            max_seq_len=max_seq_len,
            block_tables=[table.device[:num_reqs, :blocks] for table in self.block_tables],
            slot_mappings=[slots.device[:num_tokens] for slots in self.slot_mappings],
        )
