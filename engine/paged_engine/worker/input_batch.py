"""The model runner's persistent per-request state, kept across steps in preallocated numpy arrays.

A request gets a row when it first arrives and keeps it until it finishes or is preempted; each step only
appends new block ids and sampled tokens, so building the step's inputs is a handful of vectorised gathers
instead of a rebuild of every request's token list and block table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paged_engine.core.scheduler_output import BlockIds, NewRequestData
from paged_engine.sample import SamplingRow


@dataclass
class RowState:
    req_id: str
    num_prompt_tokens: int
    sampling: SamplingRow  # params, token history and seeded generator, as the sampler wants them


class InputBatch:
    def __init__(
        self, max_num_reqs: int, max_model_len: int, block_size: int, num_groups: int, device: str = "cpu"
    ) -> None:
        self.device = device
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.max_blocks_per_req = -(-max_model_len // block_size)
        self.token_ids = np.zeros((max_num_reqs, max_model_len), dtype=np.int64)
        self.num_tokens = np.zeros(max_num_reqs, dtype=np.int64)
        self.num_computed_tokens = np.zeros(max_num_reqs, dtype=np.int64)
        self.block_tables = [
            np.zeros((max_num_reqs, self.max_blocks_per_req), dtype=np.int32) for _ in range(num_groups)
        ]
        self.num_blocks = np.zeros((num_groups, max_num_reqs), dtype=np.int64)
        self.lora_slots = np.full(max_num_reqs, -1, dtype=np.int64)  # per row: LoRA weight slot, -1 for none
        self.rows: dict[str, int] = {}
        self.states: list[RowState | None] = [None] * max_num_reqs
        self._free_rows = list(range(max_num_reqs - 1, -1, -1))

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, req_id: str) -> bool:
        return req_id in self.rows

    def add_request(self, new: NewRequestData, lora_slot: int = -1) -> int:
        if new.req_id in self.rows:
            raise ValueError(f"request {new.req_id!r} is already in the batch")
        if not self._free_rows:
            raise RuntimeError(f"more than max_num_reqs={self.max_num_reqs} requests in the model runner")
        tokens = [*new.prompt_token_ids, *new.output_token_ids]
        if len(tokens) > self.max_model_len:
            raise ValueError(f"request {new.req_id!r} has {len(tokens)} tokens, max_model_len is {self.max_model_len}")
        row = self._free_rows.pop()
        self.rows[new.req_id] = row
        sampling = SamplingRow.create(new.sampling_params, list(new.prompt_token_ids), self.device)
        sampling.output_token_ids.extend(new.output_token_ids)
        self.states[row] = RowState(new.req_id, len(new.prompt_token_ids), sampling)
        self.token_ids[row, : len(tokens)] = tokens
        self.num_tokens[row] = len(tokens)
        self.num_computed_tokens[row] = new.num_computed_tokens
        self.num_blocks[:, row] = 0
        self.lora_slots[row] = lora_slot
        self.append_block_ids(row, new.block_ids)
        return row

    def remove_request(self, req_id: str) -> None:
        row = self.rows.pop(req_id, None)
        if row is None:
            return
        self.states[row] = None
        self._free_rows.append(row)

    def append_block_ids(self, row: int, block_ids: BlockIds) -> None:
        if len(block_ids) != len(self.block_tables):
            raise ValueError(
                f"got block ids for {len(block_ids)} KV-cache groups, the model has {len(self.block_tables)}"
            )
        for group, ids in enumerate(block_ids):
            if not ids:
                continue
            start = int(self.num_blocks[group, row])
            end = start + len(ids)
            if end > self.max_blocks_per_req:
                raise ValueError(f"request holds {end} blocks in group {group}; at most {self.max_blocks_per_req} fit")
            self.block_tables[group][row, start:end] = ids
            self.num_blocks[group, row] = end

    def append_token(self, row: int, token_id: int) -> None:
        n = int(self.num_tokens[row])
        if n >= self.max_model_len:
            raise ValueError(f"request would exceed max_model_len={self.max_model_len}")
        self.token_ids[row, n] = token_id
        self.num_tokens[row] = n + 1
        state = self.states[row]
        assert state is not None
        state.sampling.output_token_ids.append(token_id)
