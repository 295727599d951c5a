"""``paged::argmax_rows``: the same index as ``torch.argmax(dim=-1)``, ties and NaNs included, at every tail
size and on strided rows; torch.library checks; errors that name the argument."""

from __future__ import annotations

import pytest
import torch
from paged_engine.kernels import ops

pytestmark = pytest.mark.usefixtures("kernels")


@pytest.mark.parametrize(("rows", "n"), [(0, 5), (1, 1), (3, 7), (4, 8), (5, 9), (2, 37), (64, 262_144)])
def test_matches_torch(rows, n):
    x = torch.randn(rows, n, generator=torch.Generator().manual_seed(rows + n))
    assert torch.equal(ops.argmax_rows(x), x.argmax(dim=-1))


def test_ties_pick_the_first_index():
    x = torch.zeros(4, 40)
    x[0, [3, 11, 30]] = 5.0  # ties across vector lanes
    x[1, [9, 1]] = 2.0  # ties within the first vector and a later one
    x[2, [39, 38]] = 1.0  # ties in the scalar tail
    x[3].fill_(-float("inf"))  # all equal: index 0
    assert ops.argmax_rows(x).tolist() == x.argmax(dim=-1).tolist() == [3, 1, 38, 0]


def test_nan_and_infinities_follow_torch():
    x = torch.randn(5, 37)
    x[0, 20] = float("nan")
    x[1, [4, 30]] = float("nan")
    x[2, 36] = float("nan")  # in the tail
    x[3, 17] = float("inf")
    x[4, 2] = float("nan")
    x[4, 1] = float("inf")
    assert ops.argmax_rows(x).tolist() == x.argmax(dim=-1).tolist() == [20, 4, 36, 17, 2]


def test_strided_rows():
    wide = torch.randn(6, 50)
    x = wide[:, 3:43]
    assert torch.equal(ops.argmax_rows(x), x.argmax(dim=-1))


def test_opcheck():
    torch.library.opcheck(torch.ops.paged.argmax_rows.default, (torch.randn(3, 20),))


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (torch.randn(3, 8).double(), "input must be Float"),
        (torch.randn(8), r"input must be \[rows, n\]"),
        (torch.randn(3, 0), "input rows must not be empty"),
        (torch.randn(8, 3).T, "input must be contiguous in its last dimension"),
    ],
)
def test_bad_arguments_are_named(x, message):
    with pytest.raises(RuntimeError, match=message):
        ops.argmax_rows(x)
