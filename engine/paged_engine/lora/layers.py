"""Batched LoRA matmuls over a mixed batch: per-slot stacked weights, applied per segment of same-adapter tokens.

Each adapted linear (``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj`` of every layer) keeps, for every
slot, ``A [in, k * max_rank]`` and ``B [k * max_rank, out]``, where ``k`` is the number of Hugging Face
projections fused into it: the sub-projections' ``A`` side by side and their ``B`` block-diagonal, so one pair of
matmuls computes all of them. Lower ranks and untargeted projections are zero padding.

Per step the runner hands :meth:`LoraSlots.begin_step` the slot of every token (``-1``: base model). Tokens are
grouped by slot once (index tensors shared by every layer), and each linear then adds ``x[rows] @ A @ B`` per
adapter *present in the batch* (a segmented, SGMV-style computation: the loop is over distinct adapters, never
over requests). Base-model tokens cost nothing; a batch with no adapter token runs the base linears alone.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from paged_engine.lora.adapter import FUSED_PROJECTIONS, LoraAdapter, load_adapter, projection_shapes
from paged_engine.models.decoder import DecoderForCausalLM

# One segment: the slot and the token rows it covers (None: every token of the step).
Segment = tuple[int, torch.Tensor | None]


class LoraLinear(nn.Module):
    """``base(x)`` plus, for each segment of this step, that slot's ``x @ A @ B`` on its rows."""

    def __init__(self, base: nn.Module, in_features: int, sub_sizes: list[int], slots: LoraSlots) -> None:
        super().__init__()
        self.base = base
        self.slots = slots
        width = len(sub_sizes) * slots.max_rank
        shape = (slots.max_loras,)
        self.sub_sizes = sub_sizes
        self.lora_a = torch.zeros(*shape, in_features, width, dtype=slots.dtype, device=slots.device)
        self.lora_b = torch.zeros(*shape, width, sum(sub_sizes), dtype=slots.dtype, device=slots.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        for slot, rows in self.slots.segments:
            a, b = self.lora_a[slot], self.lora_b[slot]
            if rows is None:
                y.addmm_(x @ a, b)
            else:
                y.index_add_(0, rows, (x.index_select(0, rows) @ a) @ b)
        return y

    def load(self, slot: int, subs: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Write an adapter's sub-projections into ``slot`` (zeroing whatever it held)."""
        self.lora_a[slot].zero_()
        self.lora_b[slot].zero_()
        rank = self.slots.max_rank
        out_start = [sum(self.sub_sizes[:i]) for i in range(len(self.sub_sizes))]
        for sub, (a, b) in subs.items():
            r = a.shape[0]
            self.lora_a[slot, :, sub * rank : sub * rank + r] = a.T
            self.lora_b[slot, sub * rank : sub * rank + r, out_start[sub] : out_start[sub] + self.sub_sizes[sub]] = b.T


class LoraSlots:
    """Every adapted linear of one model, its ``max_loras`` weight slots, and the current step's segments."""

    def __init__(
        self, model: DecoderForCausalLM, max_loras: int, max_rank: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.max_loras, self.max_rank, self.dtype, self.device = max_loras, max_rank, dtype, torch.device(device)
        self.segments: list[Segment] = []
        self.slot_of: dict[str, int] = {}  # cache id of a loaded adapter -> its slot
        self.spec, self.shard = model.spec, model.tp.shard if model.tp is not None else None
        shapes = projection_shapes(self.spec, self.shard)
        self.linears: dict[tuple[int, str], LoraLinear] = {}
        for index, layer in zip(model.layer_range, model.layers, strict=True):  # global indices, as adapters name them
            for fused, subs in FUSED_PROJECTIONS.items():
                parent = layer.mlp if fused in ("gate_up_proj", "down_proj") else layer
                sub_sizes = [shapes[s][1] for s in subs]
                wrapped = LoraLinear(getattr(parent, fused), shapes[subs[0]][0], sub_sizes, self)
                setattr(parent, fused, wrapped)
                self.linears[(index, fused)] = wrapped

    @property
    def nbytes(self) -> int:
        return sum(m.lora_a.nbytes + m.lora_b.nbytes for m in self.linears.values())

    def load(self, slot: int, cache_id: str, adapter: LoraAdapter) -> None:
        if adapter.rank > self.max_rank:
            raise ValueError(f"adapter rank {adapter.rank} is above max_lora_rank={self.max_rank}")
        for key, linear in self.linears.items():
            linear.load(slot, adapter.weights.get(key, {}))
        self.slot_of = {k: v for k, v in self.slot_of.items() if v != slot}
        self.slot_of[cache_id] = slot

    def load_folder(self, slot: int, cache_id: str, path: str) -> int:
        """Read the PEFT adapter at ``path`` (this rank's share of it) into ``slot``; returns its rank. A
        :class:`LoraError` names what is wrong with it and changes nothing."""
        adapter = load_adapter(path, self.spec, self.dtype, self.shard)
        self.load(slot, cache_id, adapter)
        return adapter.rank

    def unload(self, cache_id: str) -> None:
        """Forget ``cache_id`` (its slot's weights are overwritten by the next load into it)."""
        self.slot_of.pop(cache_id, None)

    def begin_step(self, token_slots: np.ndarray) -> bool:
        """Group this step's tokens by slot; returns whether any token uses an adapter."""
        adapted = token_slots[token_slots >= 0]
        if adapted.size == 0:
            self.segments = []
            return False
        present = np.unique(adapted)
        if present.size == 1 and adapted.size == token_slots.size:
            self.segments = [(int(present[0]), None)]
            return True
        self.segments = [
            (int(slot), torch.from_numpy(np.flatnonzero(token_slots == slot)).to(self.device)) for slot in present
        ]
        return True
