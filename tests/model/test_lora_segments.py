"""How a step's tokens are grouped into LoRA segments, and that a segment's delta lands on its rows only."""

from __future__ import annotations

import numpy as np
import torch
from paged_engine.loader.hf import load_hf_model
from paged_engine.lora.layers import LoraSlots

from tests.model.tiny_models import save_tiny_model


def test_segments(tmp_path):
    model, _ = load_hf_model(save_tiny_model("llama", tmp_path))
    slots = LoraSlots(model, max_loras=3, max_rank=4, dtype=torch.float32, device=torch.device("cpu"))
    assert slots.begin_step(np.array([-1, -1])) is False and slots.segments == []
    assert slots.begin_step(np.array([2, 2, 2])) is True and slots.segments == [(2, None)]
    slots.begin_step(np.array([1, -1, 0, 1]))
    assert [(s, rows.tolist()) for s, rows in slots.segments] == [(0, [2]), (1, [0, 3])]
    # a delta in slot 1 of layer 0's o_proj changes rows 0 and 3 only
    linear = slots.linears[(0, "o_proj")]
    linear.lora_a[1].fill_(0.1)
    linear.lora_b[1].fill_(0.1)
    x = torch.randn(4, linear.lora_a.shape[1])
    delta = linear(x) - linear.base(x)
    assert delta[[1, 2]].abs().max() == 0 and delta[[0, 3]].abs().min() > 0
