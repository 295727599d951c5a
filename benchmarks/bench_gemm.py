"""CPU GEMMs on Gemma 3 270M's shapes: torch's dense ``F.linear`` vs weights pre-packed for oneDNN vs our panel
kernel (``paged::panel_linear``, which the engine uses for fp32) in each instruction-set variant this CPU supports
(AVX2, AVX-512), in GFLOP/s with the ratios. The first line names the CPU, its SIMD flags and the variant the
engine would choose.

Shapes: the LM head (262,144 x 640) at the row counts that sample in one step, and the layers' fused QKV, output,
gate-up and down projections at one-sequence decode (1 row), batched decode (64) and prefill-chunk (2048) sizes.
Calls alternate between the variants and the median of each is printed, so a busy neighbour slows all of them
alike. The engine's malloc setting (``cpu_malloc.keep_freed_memory``) is applied first, as in the engine.

    python benchmarks/bench_gemm.py
    python benchmarks/bench_gemm.py --threads 1 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from paged_engine.kernels import ops
from paged_engine.kernels.cpu_isa import cap_cpu_isa, describe_cpu
from paged_engine.models.cpu_gemm import OneDNNLinear, PanelLinear
from paged_engine.worker.cpu_malloc import keep_freed_memory

# name -> (out_features, in_features, row counts)
SHAPES = {
    "lm_head": (262_144, 640, (1, 16, 64, 256, 1024)),
    "qkv": (1536, 640, (1, 16, 64, 512, 2048)),
    "o": (640, 1024, (1, 16, 64, 512, 2048)),
    "gate_up": (4096, 640, (1, 16, 64, 512, 2048)),
    "down": (640, 2048, (1, 16, 64, 512, 2048)),
}


def median_seconds(fns: dict[str, Callable[[torch.Tensor], object]], x: torch.Tensor, repeats: int) -> dict[str, float]:
    for fn in fns.values():
        fn(x)  # warm-up: first-touch allocations
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(x)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def panel_with(isa: str, panel: PanelLinear, x: torch.Tensor) -> torch.Tensor:
    ops.set_cpu_isa(isa)
    return panel(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    cap_cpu_isa("auto")  # the variants serving would pick, for the header line
    isas = ops.supported_cpu_isas()
    print(describe_cpu())
    print(f"GFLOP/s, median of {args.repeats} alternating calls, {args.threads} threads, fp32; the panel kernel in "
          f"each instruction-set variant this CPU supports")  # fmt: skip
    header = f"{'shape':<10}{'rows':>6}{'dense':>9}{'oneDNN':>9}" + "".join(f"{'panel-' + i:>14}" for i in isas)
    print(header + f"{'oneDNN/dense':>14}{'best panel/oneDNN':>19}" + ("   avx512/avx2" if len(isas) > 1 else ""))
    for name, (out_features, in_features, row_counts) in SHAPES.items():
        weight = torch.randn(out_features, in_features)
        panel = PanelLinear(weight)
        fns: dict[str, Callable[[torch.Tensor], object]] = {
            "dense": partial(F.linear, weight=weight),
            "onednn": OneDNNLinear(weight, None),
            **{f"panel-{isa}": partial(panel_with, isa, panel) for isa in isas},
        }
        for rows in row_counts:
            t = median_seconds(fns, torch.randn(rows, in_features), args.repeats)
            gflops = {k: 2 * rows * in_features * out_features / v / 1e9 for k, v in t.items()}
            best_panel = min(t[f"panel-{isa}"] for isa in isas)
            line = f"{name:<10}{rows:>6}{gflops['dense']:>9.1f}{gflops['onednn']:>9.1f}"
            line += "".join(f"{gflops['panel-' + isa]:>14.1f}" for isa in isas)
            line += f"{t['dense'] / t['onednn']:>13.2f}x{t['onednn'] / best_panel:>18.2f}x"
            if len(isas) > 1:
                line += f"{t['panel-avx2'] / t['panel-avx512']:>13.2f}x"
            print(line)


if __name__ == "__main__":
    main()
