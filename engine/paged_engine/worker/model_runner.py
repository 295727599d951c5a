"""Turns a :class:`SchedulerOutput` into one forward pass and sampled tokens.

Per step: forget finished/preempted requests, add new ones and append new block ids to the persistent
:class:`InputBatch`, perform copy-on-write block copies, write flat inputs (token ids, positions, per-group slot
mappings and fixed-width block tables, query start locations, sequence lengths) with vectorised numpy into the
persistent :class:`StepBuffers` and copy them to the device, run the model (a decode step from a CUDA graph
where they are captured, see :mod:`paged_engine.worker.cuda_graphs`), compute logits only for the last row of
each request that reaches the end of its known tokens, sample, and append the sampled tokens to the batch.
A failure in one request's own work fails only that request (:mod:`paged_engine.worker.request_faults`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from paged_engine.attention.backend import AttentionBackend, AttentionMetadata
from paged_engine.core.scheduler_output import Logprobs, ModelRunnerOutput, NewRequestData, SchedulerOutput
from paged_engine.kernels import ops
from paged_engine.lora.layers import LoraSlots
from paged_engine.models.decoder import DecoderForCausalLM
from paged_engine.parallel.collectives import PipelineParallel
from paged_engine.sample import Sampler, SamplingMetadata, StructuredOutput, prompt_logprobs
from paged_engine.worker.cuda_graphs import CudaGraphDecode, PaddedDecode, capture_sizes, pad_decode_inputs
from paged_engine.worker.input_batch import InputBatch
from paged_engine.worker.kv_cache import KVCachePlan, allocate_kv_caches
from paged_engine.worker.request_faults import report, run_isolated
from paged_engine.worker.step_buffers import StepBuffers
from paged_engine.worker.step_timing import StepClock, TimedAttention


@dataclass
class StepInputs:
    metadata: AttentionMetadata | None  # None when the step replays a decode graph
    graph_size: int | None  # the padded batch size of a decode graph, or None for an eager step
    num_tokens: int
    req_ids: list[str]
    logits_indices: torch.Tensor  # flat token rows whose logits are needed
    sample_rows: np.ndarray  # batch rows of the requests that sample this step
    query_start_loc: np.ndarray
    positions_np: np.ndarray


# Rows of prompt logits materialised at once for prompt logprobs (each row is a vocabulary-wide softmax).
PROMPT_LOGPROBS_CHUNK = 256


# How decode steps run: eagerly, padded to a graph size but eager (how CPU tests cover the graph path), or
# replayed from captured CUDA graphs.
DECODE_MODES = ("eager", "padded", "cuda_graphs")


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
        max_num_tokens: int = 8192,
        decode_mode: str = "eager",
        max_graph_batch: int | None = None,
        structured_output: StructuredOutput | None = None,
        lora: LoraSlots | None = None,
    ) -> None:
        if decode_mode not in DECODE_MODES:
            raise ValueError(f"decode_mode must be one of {DECODE_MODES}, got {decode_mode!r}")
        self.model = model
        self.structured_output = structured_output  # grammars of constrained requests (None: none served)
        self.lora = lora  # LoRA weight slots, already installed in the model (None: LoRA off)
        self.plan = plan
        # attention timed separately where kernels are synchronous (step_timing); a graph replays untimed
        self.timed_attention = TimedAttention(backend) if torch.device(device).type == "cpu" else None
        self.backend = self.timed_attention or backend
        self.last_phases: dict[str, float] = {}
        self.eos_token_ids = tuple(eos_token_ids)
        self.device, self.dtype = torch.device(device), dtype
        self.max_model_len = max_model_len
        self.sampler = Sampler(ops.argmax_rows) if self.device.type == "cpu" and ops.loaded() else Sampler()
        self.block_size = plan.config.block_size
        self.kv_caches = allocate_kv_caches(model, plan, dtype, self.device)
        for layer in model.attention_layers:
            layer.backend = self.backend
        # req_id -> prompt positions whose logprobs were reported; survives preemption so recompute does not
        # report them twice
        self._prompt_logprobs_done: dict[str, int] = {}
        num_groups = len(plan.config.groups)
        self.batch = InputBatch(max_num_reqs, max_model_len, self.block_size, num_groups, str(device))
        self.buffers = StepBuffers(
            max(max_num_tokens, max_num_reqs), max_num_reqs, self.batch.max_blocks_per_req, num_groups, self.device
        )
        self.decode: PaddedDecode | None = None
        if decode_mode != "eager":
            sizes = capture_sizes(min(max_graph_batch or max_num_reqs, max_num_reqs))
            graphs = CudaGraphDecode if decode_mode == "cuda_graphs" else PaddedDecode
            self.decode = graphs(self.model, self.buffers, sizes, max_model_len)

    def capture_graphs(self) -> None:
        """Capture the decode graphs (after the KV cache is allocated; a no-op unless they are on)."""
        if isinstance(self.decode, CudaGraphDecode):
            with torch.inference_mode():
                self.decode.capture()

    # --- state updates ------------------------------------------------------------------------------------

    def _update_states(self, out: SchedulerOutput, failed: dict[str, str]) -> None:
        for req_id in out.finished_req_ids:
            self._prompt_logprobs_done.pop(req_id, None)
        for req_id in (*out.finished_req_ids, *out.preempted_req_ids):
            self.batch.remove_request(req_id)
        for new in out.new_requests:
            self.batch.remove_request(new.req_id)  # resumed after preemption: its old state is gone
            try:
                self.batch.add_request(new, self._lora_slot(new))
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

    def _lora_slot(self, new: NewRequestData) -> int:
        if new.adapter_id is None:
            return -1
        slot = None if self.lora is None else self.lora.slot_of.get(new.adapter_id)
        if slot is None:
            raise ValueError(f"request {new.req_id!r} asks for LoRA adapter {new.adapter_id!r}, which is not loaded")
        return slot

    def _prepare_inputs(self, num_scheduled_tokens: dict[str, int]) -> StepInputs:
        batch, buffers = self.batch, self.buffers
        buffers.begin_step()
        req_ids = list(num_scheduled_tokens)
        num_reqs = len(req_ids)
        rows = np.fromiter((batch.rows[r] for r in req_ids), dtype=np.int64, count=num_reqs)
        q_lens = np.fromiter((num_scheduled_tokens[r] for r in req_ids), dtype=np.int64, count=num_reqs)
        query_start_loc = np.zeros(num_reqs + 1, dtype=np.int64)
        np.cumsum(q_lens, out=query_start_loc[1:])
        num_tokens = int(query_start_loc[-1])
        if num_tokens > buffers.max_num_tokens:
            raise ValueError(f"step schedules {num_tokens} tokens, the runner holds at most {buffers.max_num_tokens}")
        starts = batch.num_computed_tokens[rows]
        seq_lens = starts + q_lens
        if np.any(seq_lens > batch.num_tokens[rows]):
            bad = req_ids[int(np.argmax(seq_lens > batch.num_tokens[rows]))]
            raise ValueError(f"request {bad!r} is scheduled past its known tokens")
        token_rows = np.repeat(rows, q_lens)
        positions = buffers.positions.host[:num_tokens]
        positions[:] = np.repeat(starts - query_start_loc[:-1], q_lens) + np.arange(num_tokens)
        buffers.input_ids.host[:num_tokens] = batch.token_ids[token_rows, positions]
        max_seq_len = int(seq_lens.max())
        blocks_needed = -(-max_seq_len // self.block_size)
        block_index, offset = positions // self.block_size, positions % self.block_size
        groups = zip(batch.block_tables, buffers.slot_mappings, buffers.block_tables, strict=True)
        for table, slots, step_table in groups:
            block_ids = table[token_rows, block_index].astype(np.int64)
            slots.host[:num_tokens] = np.where(block_ids > 0, block_ids * self.block_size + offset, -1)
            step_table.host[:num_reqs, :blocks_needed] = table[rows, :blocks_needed]
        buffers.query_start_loc.host[: num_reqs + 1] = query_start_loc
        buffers.seq_lens.host[:num_reqs] = seq_lens
        sampling = seq_lens >= batch.num_tokens[rows]
        num_sampling = int(sampling.sum())
        buffers.logits_indices.host[:num_sampling] = query_start_loc[1:][sampling] - 1
        max_query_len = int(q_lens.max())
        # a step with adapter tokens runs eagerly: the captured graphs hold no LoRA segments
        adapted = self.lora is not None and self.lora.begin_step(batch.lora_slots[token_rows])
        graphed = max_query_len == 1 and not adapted
        graph_size = self.decode.size_for(num_reqs) if self.decode is not None and graphed else None
        metadata = None
        if graph_size is not None:
            pad_decode_inputs(buffers, num_reqs, graph_size)
            buffers.upload(graph_size, graph_size, num_sampling)
        else:
            buffers.upload(num_tokens, num_reqs, num_sampling)
            metadata = buffers.metadata(num_tokens, num_reqs, max_query_len, max_seq_len, blocks_needed)
        return StepInputs(
            metadata=metadata,
            graph_size=graph_size,
            num_tokens=num_tokens,
            req_ids=req_ids,
            logits_indices=buffers.logits_indices.device[:num_sampling],
            sample_rows=rows[sampling],
            query_start_loc=query_start_loc,
            positions_np=positions,
        )

    def _forward(self, inputs: StepInputs) -> torch.Tensor:
        if inputs.graph_size is not None:
            assert self.decode is not None
            return self.decode.run(inputs.graph_size)
        assert inputs.metadata is not None
        n, buffers, pp = inputs.num_tokens, self.buffers, self.model.pp
        before = None
        if pp is not None and not pp.stage.is_first:
            before = pp.receive_hidden(n, self.model.spec.hidden_size, self.dtype)
        hidden = self.model(buffers.input_ids.device[:n], buffers.positions.device[:n], inputs.metadata, before)
        if pp is not None and not pp.stage.is_last:
            pp.send_hidden(hidden)
        return hidden

    # --- the step -----------------------------------------------------------------------------------------

    @torch.inference_mode()
    def execute_model(self, out: SchedulerOutput) -> ModelRunnerOutput:
        clock = StepClock()
        self.last_phases = clock.phases
        result = ModelRunnerOutput()
        self._update_states(out, result.failed)
        scheduled = out.num_scheduled_tokens
        if result.failed:
            scheduled = {r: n for r, n in scheduled.items() if r not in result.failed}
        if not scheduled:
            return result
        inputs = self._prepare_inputs(scheduled)
        clock.lap("prepare")
        if self.timed_attention is not None:
            self.timed_attention.seconds = 0.0
        links = [x for x in (self.model.tp, self.model.pp) if x is not None]
        for link in links:
            link.seconds = 0.0
        hidden = self._forward(inputs)
        clock.lap("model")
        if self.timed_attention is not None:
            clock.phases["model"] -= self.timed_attention.seconds
            clock.phases["attention"] = self.timed_attention.seconds
        forward_collectives = sum(link.seconds for link in links)
        clock.phases["model"] -= forward_collectives
        for link in links:
            link.seconds = 0.0
        pp = self.model.pp
        try:
            if pp is None or pp.stage.is_last:
                self._sample(inputs, hidden, result)
            if pp is not None:
                self._share_tokens(pp, inputs, result)
        finally:
            clock.lap("sample")
        if links:  # the forward pass's sums and hand-overs, and sampling's gathers and token broadcast
            sampling_collectives = sum(link.seconds for link in links)
            clock.phases["sample"] -= sampling_collectives
            clock.phases["all_reduce"] = forward_collectives + sampling_collectives
        return result

    def _share_tokens(self, pp: PipelineParallel, inputs: StepInputs, result: ModelRunnerOutput) -> None:
        """The last stage's sampled tokens to every stage (-1 for a row that sampled none), which append them to
        their batches as the last stage did."""
        rows = [int(row) for row in inputs.sample_rows]
        if not rows:  # every stage knows the batch alike: none of them broadcasts
            return
        states = [self.batch.states[row] for row in rows]
        mine = [(result.sampled_token_ids.get(s.req_id) or [-1])[0] if s is not None else -1 for s in states]
        tokens = pp.share_tokens(mine)
        if not pp.stage.is_last:
            for row, token in zip(rows, tokens, strict=True):
                if token >= 0:
                    self.batch.append_token(row, token)

    def _sample(self, inputs: StepInputs, hidden: torch.Tensor, result: ModelRunnerOutput) -> None:
        for req_id in inputs.req_ids:
            result.sampled_token_ids[req_id] = []
        self._prompt_logprobs(inputs, hidden, result)
        states = [self.batch.states[int(row)] for row in inputs.sample_rows]
        live = [i for i, state in enumerate(states) if state is not None and state.req_id not in result.failed]
        if not live:
            return

        def sample(positions: Sequence[int]) -> list[tuple[int, Logprobs | None]]:
            # Logits are computed here, not reused from a failed attempt: the sampler edits them in place.
            rows_needed = (
                inputs.logits_indices if len(positions) == len(states) else inputs.logits_indices[list(positions)]
            )
            rows = [states[i].sampling for i in positions]  # type: ignore[union-attr]
            metadata = SamplingMetadata.build(
                rows, self.model.spec.vocab_size, self.eos_token_ids, self.device, self.structured_output
            )
            greedy_head = self.model.greedy_head
            if greedy_head is not None and metadata.plain_greedy:
                tokens = greedy_head(hidden[rows_needed]).tolist()
                return [(token, None) for token in tokens]
            logits = self.model.compute_logits(hidden[rows_needed])
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
