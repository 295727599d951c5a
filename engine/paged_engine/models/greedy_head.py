"""Exact greedy tokens from a bf16 pass over the LM head, rescoring in fp32 only the tokens that could win.

At decode batch sizes the LM head dominates a CPU step: Gemma 3 270M's head is a [262,144 x 640] matrix, 640 MiB
in fp32, read whole every step (60 % of a 16-row decode step's GEMM time). A bf16 copy read instead halves
the bytes, and the CPU's bf16 dot products halve the work. Its logits are approximate, so they only pick
*candidates*, which the fp32 panels score exactly.

Invariant: the returned token is the argmax of fp32 logits (lowest index on ties), the token the full fp32
head would give up to its own summation order. With ``u = 2^-9`` (bf16 rounding), the approximate logit
``a_v`` of hidden row ``x`` and token ``v`` differs from the exact ``l_v`` by at most
``E = (2u + u^2 + 4 K 2^-24) * ||x|| * max_v ||w_v||`` (operand rounding, both accumulations, by Cauchy-Schwarz)
plus ``2u * |a_v|`` (the bf16 output's rounding). Every token whose interval ``a_v ± err`` reaches the
approximate winner's lower end is a candidate, so the true winner always is one. A token that is not a
candidate of its row has an exact logit strictly below the approximate winner's, so the rescoring scores every
row on the union of all rows' candidate panels and takes each row's plain argmax there: the extra tokens can
neither win nor tie. Rows whose candidates are too many to be worth rescoring (a degenerate hidden state), or
with non-finite values, take the full fp32 head.
"""

from __future__ import annotations

import torch

from paged_engine.kernels import ops
from paged_engine.models.cpu_gemm import OneDNNLinear, PanelLinear

_U = 2.0**-9  # unit roundoff of bf16 (8 significant bits, round to nearest)
#: Above this many candidate panels (of 16 tokens) per row, the full fp32 head is cheaper.
MAX_PANELS_PER_ROW = 256


class RescoredGreedyHead:
    """Greedy tokens for an fp32 head packed in panels; holds a bf16 copy of it (half the head's memory)."""

    def __init__(self, head: PanelLinear) -> None:
        self.head = head
        self.vocab_size = head.out_features
        panels = head.packed_weight  # [P, K, 16]; a padding column only makes max_norm larger (safe)
        k = head.in_features
        max_norm = float(torch.linalg.vector_norm(panels, dim=1).max())
        self._bound_per_norm = (2 * _U + _U * _U + 4 * k * 2.0**-24) * max_norm
        self.approx = OneDNNLinear(_dense_bf16(panels, self.vocab_size), None)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """int64 token ids ``[rows]`` for fp32 ``hidden`` ``[rows, K]``."""
        approx = self.approx(hidden.to(torch.bfloat16)).float()
        best = approx.gather(1, ops.argmax_rows(approx)[:, None])[:, 0]  # NaN where the row has one
        bound = hidden.norm(dim=1) * self._bound_per_norm
        lower = best - 2 * _U * best.abs() - 2 * bound  # the approximate winner's exact value is at least this
        # a_v + 2u|a_v| >= lower  <=>  a_v >= threshold (the left side grows with a_v).
        threshold = torch.where(lower >= 0, lower / (1 + 2 * _U), lower / (1 - 2 * _U))
        if not bool(torch.isfinite(threshold).all()):
            return self._full(hidden)
        panel_ids = ops.candidate_panels(approx, threshold)
        if panel_ids.numel() > MAX_PANELS_PER_ROW * hidden.shape[0]:
            return self._full(hidden)
        sub = self.head.packed_weight.index_select(0, panel_ids)
        exact = ops.panel_linear(hidden, sub, panel_ids.numel() * ops.PANEL_COLS)
        padding = ops.PANEL_COLS - (self.vocab_size - int(panel_ids[-1]) * ops.PANEL_COLS)
        if padding > 0:  # the last panel's columns past the vocabulary score 0, which must not win
            exact[:, exact.shape[1] - padding :] = float("-inf")
        winner = ops.argmax_rows(exact)  # first maximum: panels are in vocabulary order
        return panel_ids[winner // ops.PANEL_COLS] * ops.PANEL_COLS + winner % ops.PANEL_COLS

    def _full(self, hidden: torch.Tensor) -> torch.Tensor:
        return ops.argmax_rows(self.head(hidden))


def _dense_bf16(panels: torch.Tensor, rows: int, chunk: int = 1024) -> torch.Tensor:
    """The ``[rows, K]`` bf16 matrix the panels hold, converted a chunk of panels at a time, so loading never
    holds a second fp32 copy of the head (640 MiB for Gemma 3 270M)."""
    dense = torch.empty(panels.shape[0] * ops.PANEL_COLS, panels.shape[1], dtype=torch.bfloat16)
    for start in range(0, panels.shape[0], chunk):
        part = panels[start : start + chunk]
        dense[start * ops.PANEL_COLS : (start + part.shape[0]) * ops.PANEL_COLS] = part.transpose(1, 2).reshape(
            -1, panels.shape[1]
        )
    return dense[:rows]


def rescored_greedy_unavailable_reason(head: torch.nn.Module, final_logit_softcap: float) -> str | None:
    """Why a head cannot take the bf16 pass, or None when it can."""
    if not isinstance(head, PanelLinear):
        return "the head is not in fp32 panels (bf16 weights, or the CPU kernels are not loaded)"
    if final_logit_softcap > 0.0:
        return "the model caps its logits (tanh ties at the cap would change the winner)"
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "this CPU has no fast bf16 GEMM"
    return None
