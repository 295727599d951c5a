"""Turns a :class:`SchedulerOutput` into one forward pass and sampled tokens.

Per step: forget finished/preempted requests, add new ones and append new block ids to the persistent
:class:`InputBatch`, perform copy-on-write block copies, build flat inputs (token ids, positions, per-group slot
mappings and block tables, query start locations, sequence lengths) with vectorised numpy, run the model,
compute logits only for the last row of each request that reaches the end of its known tokens, sample, and
append the sampled tokens to the batch. A failure in one request's own work fails only that request
(:mod:`paged_engine.worker.request_faults`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from paged_engine.attention import ops
from paged_engine.attention.backend import AttentionBackend, AttentionMetadata
from paged_engine.core.outputs import Logprobs, ModelRunnerOutput, SchedulerOutput
from paged_engine.models.decoder import DecoderForCausalLM
from paged_engine.sample import Sampler, SamplingMetadata, StructuredOutput, prompt_logprobs
from paged_engine.worker.input_batch import InputBatch
from paged_engine.worker.kv_cache import KVCachePlan, allocate_kv_caches
from paged_engine.worker.request_faults import report, run_isolated


@dataclass
class StepInputs:
    input_ids: torch.Tensor
    positions: torch.Tensor
    metadata: AttentionMetadata
    req_ids: list[str]
    logits_indices: torch.Tensor  # flat token rows whose logits are needed
    sample_rows: np.ndarray  # batch rows of the requests that sample this step
    query_start_loc: np.ndarray
    positions_np: np.ndarray


# Rows of prompt logits materialised at once for prompt logprobs (each row is a vocabulary-wide softmax).
PROMPT_LOGPROBS_CHUNK = 256


class ModelRunner:
    def __init__(
        self,
        model: DecoderForCausalLM,
        plan: KVCachePlan,
        backend: AttentionBackend,
        max_num_reqs: int,
        max_model_len: int,
        eos_token_ids: list[int] | tuple[int, ...] = (),
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        structured_output: StructuredOutput | None = None,
    ) -> None:
        self.model = model
        self.structured_output = structured_output  # grammars of constrained requests (None: none served)
        self.plan = plan
        self.backend = backend
        self.eos_token_ids = tuple(eos_token_ids)
        self.device = torch.device(device)
        self.sampler = Sampler(ops.argmax_rows) if self.device.type == "cpu" and ops.loaded() else Sampler()
        self.block_size = plan.config.block_size
        self.kv_caches = allocate_kv_caches(model, plan, dtype, self.device)
        for layer in model.attention_layers:
            layer.backend = backend
        # req_id -> prompt positions whose logprobs were reported; survives preemption so recompute does not
        # report them twice
        self._prompt_logprobs_done: dict[str, int] = {}
        self.batch = InputBatch(max_num_reqs, max_model_len, self.block_size, len(plan.config.groups), str(device))

    # --- state updates ------------------------------------------------------------------------------------

    def _update_states(self, out: SchedulerOutput, failed: dict[str, str]) -> None:
        for req_id in out.finished_req_ids:
            self._prompt_logprobs_done.pop(req_id, None)
        for req_id in (*out.finished_req_ids, *out.preempted_req_ids):
            self.batch.remove_request(req_id)
        for new in out.new_requests:
            self.batch.remove_request(new.req_id)  # resumed after preemption: its old state is gone
            try:
                self.batch.add_request(new)
            except Exception as exc:
                self.batch.remove_request(new.req_id)
                report(new.req_id, exc, failed)
        for cached in out.cached_requests:
            row = self.batch.rows.get(cached.req_id)
            if row is None:
                raise KeyError(f"scheduler refers to unknown request {cached.req_id!r}")
            self.batch.append_block_ids(row, cached.new_block_ids)
            self.batch.num_computed_tokens[row] = cached.num_computed_tokens
        if out.copy_on_write:
            mapping = torch.tensor(out.copy_on_write, dtype=torch.int64, device=self.device)
            self.backend.copy_blocks([k for k, _ in self.kv_caches], [v for _, v in self.kv_caches], mapping)

    def _prepare_inputs(self, num_scheduled_tokens: dict[str, int]) -> StepInputs:
        batch = self.batch
        req_ids = list(num_scheduled_tokens)
        rows = np.fromiter((batch.rows[r] for r in req_ids), dtype=np.int64, count=len(req_ids))
        q_lens = np.fromiter((num_scheduled_tokens[r] for r in req_ids), dtype=np.int64, count=len(req_ids))
        query_start_loc = np.zeros(len(req_ids) + 1, dtype=np.int64)
        np.cumsum(q_lens, out=query_start_loc[1:])
        num_tokens = int(query_start_loc[-1])
        starts = batch.num_computed_tokens[rows]
        seq_lens = starts + q_lens
        if np.any(seq_lens > batch.num_tokens[rows]):
            bad = req_ids[int(np.argmax(seq_lens > batch.num_tokens[rows]))]
            raise ValueError(f"request {bad!r} is scheduled past its known tokens")
        token_rows = np.repeat(rows, q_lens)
        positions = np.repeat(starts - query_start_loc[:-1], q_lens) + np.arange(num_tokens)
        input_ids = batch.token_ids[token_rows, positions]
        max_seq_len = int(seq_lens.max())
        blocks_needed = -(-max_seq_len // self.block_size)
        block_index, offset = positions // self.block_size, positions % self.block_size
        slot_mappings, block_tables = [], []
        for table in batch.block_tables:
            block_ids = table[token_rows, block_index].astype(np.int64)
            slots = np.where(block_ids > 0, block_ids * self.block_size + offset, -1)
            slot_mappings.append(torch.from_numpy(slots).to(self.device))
            block_tables.append(torch.from_numpy(table[rows, :blocks_needed]).to(self.device))
        sampling = seq_lens >= batch.num_tokens[rows]
        metadata = AttentionMetadata(
            num_tokens=num_tokens,
            query_start_loc=torch.from_numpy(query_start_loc.astype(np.int32)).to(self.device),
            seq_lens=torch.from_numpy(seq_lens.astype(np.int32)).to(self.device),
            max_query_len=int(q_lens.max()),
            max_seq_len=max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
        )
        return StepInputs(
            input_ids=torch.from_numpy(input_ids).to(self.device),
            positions=torch.from_numpy(positions).to(self.device),
            metadata=metadata,
            req_ids=req_ids,
            logits_indices=torch.from_numpy(query_start_loc[1:][sampling] - 1).to(self.device),
            sample_rows=rows[sampling],
            query_start_loc=query_start_loc,
            positions_np=positions,
        )

    # --- the step -----------------------------------------------------------------------------------------

    @torch.inference_mode()
    def execute_model(self, out: SchedulerOutput) -> ModelRunnerOutput:
        result = ModelRunnerOutput()
        self._update_states(out, result.failed)
        scheduled = out.num_scheduled_tokens
        if result.failed:
            scheduled = {r: n for r, n in scheduled.items() if r not in result.failed}
        if not scheduled:
            return result
        inputs = self._prepare_inputs(scheduled)
        hidden = self.model(inputs.input_ids, inputs.positions, inputs.metadata)
        for req_id in inputs.req_ids:
            result.sampled_token_ids[req_id] = []
        self._prompt_logprobs(inputs, hidden, result)
        states = [self.batch.states[int(row)] for row in inputs.sample_rows]
        live = [i for i, state in enumerate(states) if state is not None and state.req_id not in result.failed]
        if not live:
            return result

        def sample(positions: Sequence[int]) -> list[tuple[int, Logprobs | None]]:
            # Logits are computed here, not reused from a failed attempt: the sampler edits them in place.
            rows_needed = (
                inputs.logits_indices if len(positions) == len(states) else inputs.logits_indices[list(positions)]
            )
            logits = self.model.compute_logits(hidden[rows_needed])
            rows = [states[i].sampling for i in positions]  # type: ignore[union-attr]
            metadata = SamplingMetadata.build(
                rows, self.model.spec.vocab_size, self.eos_token_ids, self.device, self.structured_output
            )
            sampled = self.sampler(logits, metadata)
            return list(zip(sampled.sampled_token_ids.tolist(), sampled.logprobs_per_row(metadata), strict=True))

        samples, errors = run_isolated(sample, live)
        for i, exc in errors.items():
            req_id = states[i].req_id  # type: ignore[union-attr]
            report(req_id, exc, result.failed)
            del result.sampled_token_ids[req_id]
        for i, (token, row_logprobs) in samples.items():
            state = states[i]
            assert state is not None
            self.batch.append_token(int(inputs.sample_rows[i]), token)
            result.sampled_token_ids[state.req_id] = [token]
            if row_logprobs is not None:
                result.logprobs[state.req_id] = [row_logprobs]
        return result

    def _prompt_logprobs(self, inputs: StepInputs, hidden: torch.Tensor, result: ModelRunnerOutput) -> None:
        """Logprobs of the prompt tokens this step's chunks predict, for requests that asked. Entry ``j`` of a
        request's list is token ``j``'s logprob given the tokens before it; token 0 has none (``None``)."""
        for i, req_id in enumerate(inputs.req_ids):
            try:
                self._request_prompt_logprobs(i, req_id, inputs, hidden, result)
            except Exception as exc:
                report(req_id, exc, result.failed)

    def _request_prompt_logprobs(
        self, i: int, req_id: str, inputs: StepInputs, hidden: torch.Tensor, result: ModelRunnerOutput
    ) -> None:
        batch = self.batch
        row = batch.rows[req_id]
        state = batch.states[row]
        assert state is not None
        num = state.sampling.params.prompt_logprobs
        if num is None:
            return
        first = int(inputs.positions_np[inputs.query_start_loc[i]])
        last = int(inputs.positions_np[inputs.query_start_loc[i + 1] - 1])
        done = self._prompt_logprobs_done.get(req_id, 0)
        start, end = max(first, done), min(last + 1, state.num_prompt_tokens - 1)  # positions predicting p + 1
        entries: list[Logprobs | None] = [None] if first == 0 and done == 0 else []
        for chunk in range(start, end, PROMPT_LOGPROBS_CHUNK):
            positions = np.arange(chunk, min(chunk + PROMPT_LOGPROBS_CHUNK, end))
            flat = torch.from_numpy(inputs.query_start_loc[i] + positions - first).to(self.device)
            targets = torch.from_numpy(batch.token_ids[row, positions + 1]).to(self.device)
            tensors = prompt_logprobs(self.model.compute_logits(hidden[flat]), targets, num)
            entries.extend(tensors.row(j, num) for j in range(len(positions)))
        if entries:
            result.prompt_logprobs[req_id] = entries
        self._prompt_logprobs_done[req_id] = max(done, end, 1 if first == 0 else 0)
