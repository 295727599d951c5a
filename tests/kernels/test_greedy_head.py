"""The bf16-candidates greedy head: the same token as the argmax of the full fp32 head, for random heads, near-ties
bf16 cannot separate, exact ties (the lowest index wins), and degenerate or non-finite hidden states."""

from __future__ import annotations

import pytest
import torch
from paged_engine.kernels import ops
from paged_engine.models.cpu_gemm import PanelLinear
from paged_engine.models.greedy_head import RescoredGreedyHead, rescored_greedy_unavailable_reason

pytestmark = [
    pytest.mark.usefixtures("kernels"),
    pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no bf16 GEMM on this CPU"),
]


def full_argmax(head: PanelLinear, hidden: torch.Tensor) -> torch.Tensor:
    return ops.argmax_rows(head(hidden))


def make_head(weight: torch.Tensor) -> tuple[PanelLinear, RescoredGreedyHead]:
    head = PanelLinear(weight.contiguous())
    assert rescored_greedy_unavailable_reason(head, 0.0) is None
    return head, RescoredGreedyHead(head)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("vocab", "hidden", "rows"), [(1000, 64, 1), (1000, 64, 37), (4099, 96, 16), (17, 8, 5)])
def test_same_tokens_as_the_fp32_head(seed, vocab, hidden, rows):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, hidden, generator=generator) * 0.05
    x = torch.randn(rows, hidden, generator=generator) * 20
    head, greedy = make_head(weight)
    assert torch.equal(greedy(x), full_argmax(head, x))


def test_near_ties_bf16_orders_wrongly_go_to_the_exact_winner():
    """Every token points almost the same way, so logits differ by less than bf16's error: the bf16 pass alone
    picks the wrong token on most rows (checked, so this test has teeth); the rescored tokens are fp32's."""
    generator = torch.Generator().manual_seed(11)
    hidden, vocab, rows = 64, 512, 64
    weight = torch.randn(hidden, generator=generator) + torch.randn(vocab, hidden, generator=generator) * 1e-3
    x = torch.randn(rows, hidden, generator=generator) * 30
    head, greedy = make_head(weight)
    expected = full_argmax(head, x)
    bf16_only = greedy.approx(x.to(torch.bfloat16)).float().argmax(dim=1)
    assert int((bf16_only != expected).sum()) > rows // 2
    assert torch.equal(greedy(x), expected)


def test_exact_ties_pick_the_lowest_index():
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(256, 32, generator=generator) * 0.01
    x = torch.randn(4, 32, generator=generator)
    weight[200] = weight[40] = x[0] / x[0].norm() * 3  # the same, largest logit twice for row 0
    head, greedy = make_head(weight)
    assert torch.equal(greedy(x), full_argmax(head, x))
    assert int(greedy(x)[0]) == 40


def test_degenerate_and_non_finite_rows_match_the_fp32_head():
    generator = torch.Generator().manual_seed(5)
    weight = torch.randn(300, 16, generator=generator)
    head, greedy = make_head(weight)
    x = torch.randn(4, 16, generator=generator)
    x[1] = 0.0  # every logit 0: all 300 tokens tie
    x[2, 3] = float("nan")
    x[3, 0] = float("inf")
    assert torch.equal(greedy(x), full_argmax(head, x))


def test_capped_logits_and_non_panel_heads_are_refused():
    weight = torch.randn(64, 16)
    assert "caps its logits" in rescored_greedy_unavailable_reason(PanelLinear(weight), 30.0)
    assert "panels" in rescored_greedy_unavailable_reason(torch.nn.Linear(16, 64), 0.0)


def test_a_padding_column_never_wins_when_every_logit_is_negative():
    """The last panel of a 17-token head holds 15 zero-weight padding columns, whose exact score 0 would beat
    logits that are all negative."""
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(3, 8, generator=generator)
    weight = -x[0] / x[0].norm() * 2 + torch.randn(17, 8, generator=generator) * 0.01  # all logits of row 0 < 0
    head, greedy = make_head(weight)
    assert bool((head(x[:1]) < 0).all())
    assert torch.equal(greedy(x), full_argmax(head, x)) and int(greedy(x)[0]) < 17


@pytest.mark.parametrize(("rows", "vocab", "threads"), [(1, 16, 1), (5, 1000, 1), (16, 40_000, 2), (3, 17, 2)])
def test_candidate_panels_are_the_union_of_every_rows_candidates(rows, vocab, threads):
    generator = torch.Generator().manual_seed(rows + vocab)
    scores = torch.randn(rows, vocab, generator=generator)
    scores[0, 5] = float("nan")  # compares false: never a candidate by itself
    threshold = torch.randn(rows, generator=generator).abs() + 2.5  # a few candidates per row
    padded = torch.nn.functional.pad(scores, (0, -vocab % ops.PANEL_COLS), value=float("-inf"))
    expected = (padded >= threshold[:, None]).view(rows, -1, ops.PANEL_COLS).any(dim=2).any(dim=0).nonzero()[:, 0]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert torch.equal(ops.candidate_panels(scores, threshold), expected)
        strided = torch.randn(rows, vocab + 7, generator=generator)[:, :vocab]  # rows not back to back
        strided.copy_(scores)
        assert torch.equal(ops.candidate_panels(strided, threshold), expected)
    finally:
        torch.set_num_threads(before)


def test_candidate_panels_refuse_mismatched_thresholds():
    with pytest.raises(RuntimeError, match=r"threshold must be a contiguous \[rows\] = \[4\]"):
        ops.candidate_panels(torch.zeros(4, 32), torch.zeros(3))
    with pytest.raises(RuntimeError, match="scores"):
        ops.candidate_panels(torch.zeros(4, 32, dtype=torch.float64), torch.zeros(4))
