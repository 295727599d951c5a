"""``paged::silu_and_mul`` / ``paged::gelu_tanh_and_mul``: equal to torch's ``act(gate) * up`` (Gemma's GELU is
the tanh approximation), in fp32 and bf16, including vector tails, extreme inputs and strided rows, in every
instruction-set variant the machine supports; torch.library checks; errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from paged_engine.kernels import ops

pytestmark = pytest.mark.usefixtures("cpu_isa")

TORCH_ACTIVATIONS = {"silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


def reference(activation: str, gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return TORCH_ACTIVATIONS[activation](gate) * up


@pytest.mark.parametrize("activation", sorted(ops.GATED_ACTIVATIONS))
@pytest.mark.parametrize(("rows", "d"), [(0, 8), (1, 3), (5, 8), (7, 13), (64, 2048)])
def test_matches_torch(activation, rows, d):
    gate_up = torch.randn(rows, 2 * d, generator=torch.Generator().manual_seed(rows + d)) * 4
    torch.testing.assert_close(ops.gated_activation(activation, gate_up), reference(activation, gate_up))


@pytest.mark.parametrize("activation", sorted(ops.GATED_ACTIVATIONS))
@pytest.mark.parametrize(("rows", "d"), [(1, 3), (7, 13), (64, 2048)])
def test_bf16_rounds_as_torch_does(activation, rows, d):
    """torch rounds ``act(gate)`` to bf16, then the product: the kernel rounds at the same two places, so almost
    every output is torch's exactly and the rest are one bf16 step away, or within 1e-5 of 0 where torch's tanh
    saturates to -1 a little earlier than ours (GELU of x < -5)."""
    gate_up = (torch.randn(rows, 2 * d, generator=torch.Generator().manual_seed(rows + d)) * 4).bfloat16()
    got, expected = ops.gated_activation(activation, gate_up), reference(activation, gate_up)
    assert got.dtype == torch.bfloat16
    assert (got == expected).float().mean() >= 0.99
    torch.testing.assert_close(got.float(), expected.float(), rtol=2**-7, atol=1e-5)


@pytest.mark.parametrize("activation", sorted(ops.GATED_ACTIVATIONS))
def test_extreme_inputs_stay_finite(activation):
    gate = torch.tensor([-1e4, -100.0, -20.0, -1e-30, 0.0, 1e-30, 20.0, 100.0, 1e4] * 2)
    gate_up = torch.cat([gate, torch.ones_like(gate)])[None, :]
    got = ops.gated_activation(activation, gate_up)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, reference(activation, gate_up))


def test_strided_rows():
    wide = torch.randn(6, 40)
    gate_up = wide[:, 4:36]
    out = torch.empty(6, 16)
    torch.ops.paged.silu_and_mul(out, gate_up)
    torch.testing.assert_close(out, reference("silu", gate_up))


@pytest.mark.parametrize("name", sorted(ops.GATED_ACTIVATIONS.values()))
def test_opcheck(name):
    torch.library.opcheck(getattr(torch.ops.paged, name).default, (torch.empty(3, 8), torch.randn(3, 16)))


@pytest.mark.parametrize(
    ("out", "gate_up", "message"),
    [
        (torch.empty(3, 8), torch.randn(3, 16).double(), "input must be float32 or bfloat16, got Double"),
        (torch.empty(3, 8), torch.randn(3, 16).bfloat16(), "out must be BFloat16"),
        (torch.empty(3, 8), torch.randn(3, 15), r"input must be \[rows, 2 \* d\]"),
        (torch.empty(3, 7), torch.randn(3, 16), r"out must have shape \[rows, d\]"),
        (torch.empty(8, 3).T, torch.randn(3, 16), "out must be contiguous in its last dimension"),
    ],
)
def test_bad_arguments_are_named(out, gate_up, message):
    with pytest.raises(RuntimeError, match=message):
        torch.ops.paged.silu_and_mul(out, gate_up)
