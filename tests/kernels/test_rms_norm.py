"""``paged::rms_norm``: equal to the torch RMSNorm the models use (plain and Gemma's ``1 + w``, fp32 and bf16), on
rows and on per-head views of a fused QKV output, in every instruction-set variant the machine supports;
torch.library checks; errors that name the argument."""

from __future__ import annotations

import pytest
import torch
from paged_engine.kernels import ops
from paged_engine.models.layers import RMSNorm

pytestmark = pytest.mark.usefixtures("cpu_isa")


def torch_norm(dim: int, offset: float, seed: int) -> RMSNorm:
    norm = RMSNorm(dim, 1e-6, offset)
    norm.weight.copy_(torch.randn(dim, generator=torch.Generator().manual_seed(seed)) * 0.5)
    return norm


@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize(("rows", "dim"), [(0, 8), (1, 3), (5, 8), (7, 13), (3, 24), (64, 640), (300, 256)])
def test_matches_torch(offset, rows, dim):
    norm = torch_norm(dim, offset, rows + dim)
    x = torch.randn(rows, dim, generator=torch.Generator().manual_seed(rows)) * 3
    torch.testing.assert_close(ops.rms_norm(x, norm.weight, norm.eps, offset), norm(x))


@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize(("rows", "dim"), [(1, 3), (7, 13), (64, 640), (300, 256)])
def test_bf16_rounds_as_torch_does(offset, rows, dim):
    """In bf16 the module rounds where transformers does (Gemma once after the ``1 + w`` scale, Llama before the
    weight and after it); the kernel rounds at the same places, so only fp32 summation order can tip a value."""
    norm = torch_norm(dim, offset, rows + dim).to(torch.bfloat16)
    x = (torch.randn(rows, dim, generator=torch.Generator().manual_seed(rows)) * 3).bfloat16()
    got, expected = ops.rms_norm(x, norm.weight, norm.eps, offset), norm(x)
    assert got.dtype == torch.bfloat16
    differ = got != expected
    assert differ.float().mean() <= 0.001
    torch.testing.assert_close(got[differ].float(), expected[differ].float(), rtol=2**-7, atol=0)


def test_per_head_views_of_a_fused_projection():
    """Gemma's q/k norms run on [tokens, heads, head_dim] views whose rows are a fused QKV row apart."""
    tokens, heads, head_dim = 9, 4, 32
    qkv = torch.randn(tokens, (heads + 2) * head_dim)
    q = qkv[:, : heads * head_dim].view(tokens, heads, head_dim)
    norm = torch_norm(head_dim, 1.0, 0)
    got = ops.rms_norm(q, norm.weight, norm.eps, 1.0)
    assert got.is_contiguous() and got.shape == q.shape
    torch.testing.assert_close(got, norm(q))


def test_tiny_and_huge_rows_stay_finite():
    x = torch.tensor([[0.0] * 16, [1e-20] * 16, [1e18] * 16])
    norm = torch_norm(16, 0.0, 1)
    got = ops.rms_norm(x, norm.weight, norm.eps, 0.0)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, norm(x))


def test_module_uses_the_kernel_when_fused():
    norm = torch_norm(40, 1.0, 2)
    x = torch.randn(6, 40)
    expected = norm(x)
    norm.fused = True
    torch.testing.assert_close(norm(x), expected)


def test_opcheck():
    args = (torch.empty(3, 8), torch.randn(3, 8), torch.randn(8), 1e-6, 1.0)
    torch.library.opcheck(torch.ops.paged.rms_norm.default, args)


@pytest.mark.parametrize(
    ("out", "x", "weight", "message"),
    [
        (torch.empty(3, 8), torch.randn(3, 8).double(), torch.randn(8), "input must be float32 or bfloat16"),
        (torch.empty(3, 8), torch.randn(3, 8), torch.randn(8).double(), "weight must be Float"),
        (torch.empty(3, 8), torch.randn(3, 8).bfloat16(), torch.randn(8).bfloat16(), "out must be BFloat16"),
        (torch.empty(8), torch.randn(8), torch.randn(8), r"input must be \[rows, d\] or \[tokens, heads, d\]"),
        (torch.empty(3, 8), torch.randn(3, 8), torch.randn(7), r"weight must have shape \[d\]"),
        (torch.empty(3, 7), torch.randn(3, 8), torch.randn(8), "out must be a contiguous tensor shaped like input"),
        (torch.empty(8, 3).T, torch.randn(8, 3).T, torch.randn(8), "input must be contiguous in its last dimension"),
    ],
)
def test_bad_arguments_are_named(out, x, weight, message):
    with pytest.raises(RuntimeError, match=message):
        torch.ops.paged.rms_norm(out, x, weight, 1e-6, 0.0)
