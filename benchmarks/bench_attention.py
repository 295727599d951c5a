"""Paged attention on the CPU: the C++ kernel (``paged::paged_attention``) against the torch reference backend.

Prints µs per call for decode shapes (batch 1/16/64 x context 256/1024/4096) and a prefill shape, for each
instruction-set variant of the kernel the CPU supports (AVX2, AVX-512), and the speed-up of the best over the
reference. The shape is Gemma 3 270M's attention (4 query heads, 1 KV head, head_dim 256,
block size 16) unless overridden. Both run in the same process on the same inputs, alternating, so load from
other processes affects them alike.

    python benchmarks/bench_attention.py [--dtype bfloat16] [--threads 2] [--quick]
    python benchmarks/bench_attention.py --gpu --heads 32 --kv-heads 8 --head-dim 128 --dtype bfloat16
        # the CUDA decode kernel's achieved GB/s against the device's peak (a Llama-3-8B layer)
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import torch
from paged_engine.attention.reference import TorchReferenceBackend
from paged_engine.kernels import ops
from paged_engine.kernels.cpu_isa import cap_cpu_isa, describe_cpu


def make_inputs(num_seqs: int, context: int, q_len: int, args: argparse.Namespace) -> tuple:
    """Sequences of `context` tokens whose last `q_len` are queries, their blocks shuffled over the cache."""
    blocks_per_seq = math.ceil(context / args.block_size)
    num_blocks = num_seqs * blocks_per_seq + 1
    shape = (num_blocks, args.block_size, args.kv_heads, args.head_dim)
    key_cache = torch.randn(shape, dtype=args.dtype)
    value_cache = torch.randn(shape, dtype=args.dtype)
    block_tables = (torch.randperm(num_blocks - 1)[: num_seqs * blocks_per_seq] + 1).view(num_seqs, -1).int()
    query_start_loc = torch.arange(num_seqs + 1, dtype=torch.int32) * q_len
    seq_lens = torch.full((num_seqs,), context, dtype=torch.int32)
    query = torch.randn(num_seqs * q_len, args.heads, args.head_dim, dtype=args.dtype)
    return query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, args.head_dim**-0.5


def time_call(fn: Callable[[], None], budget_s: float) -> float:
    """Best µs per call over as many calls as fit in the budget (at least 5), after one warm-up call.

    The best, not the median: on a shared machine a call that loses its core mid-way measures the neighbours,
    and the kernel and the reference suffer that alike. Both get the same budget, so the ratio stays fair."""
    fn()
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < 5 or time.perf_counter() < deadline:
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples) * 1e6


def bench(name: str, inputs: tuple, budget_s: float) -> tuple[float, float]:
    """Times the kernel in every instruction-set variant this CPU supports, then the reference; returns the best
    variant's µs and the reference's."""
    query, key_cache, value_cache, block_tables, qsl, seq_lens, scale = inputs
    out_kernel = torch.empty_like(query)
    out_ref = torch.empty_like(query)
    reference = TorchReferenceBackend()

    def kernel() -> None:
        ops.paged_attention(out_kernel, query, key_cache, value_cache, block_tables, qsl, seq_lens, scale)

    def ref() -> None:
        reference.paged_attention(out_ref, query, key_cache, value_cache, block_tables, qsl, seq_lens, scale)

    isas = ops.supported_cpu_isas()
    variant_us = {}
    for isa in isas:
        ops.set_cpu_isa(isa)
        variant_us[isa] = time_call(kernel, budget_s)
    ref_us = time_call(ref, budget_s)
    tol = 1e-3 if query.dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out_kernel.float(), out_ref.float(), atol=tol, rtol=tol)
    kernel_us = min(variant_us.values())
    cells = " | ".join(f"{variant_us[isa]:,.0f}" for isa in isas)
    versus_avx2 = "".join(f" | {variant_us['avx2'] / variant_us[isa]:.2f}x" for isa in isas[1:])
    print(f"| {name} | {cells} | {ref_us:,.0f} | {ref_us / kernel_us:.1f}x{versus_avx2} |", flush=True)
    return kernel_us, ref_us


def bench_gpu(args: argparse.Namespace, peak_gbs: float) -> None:
    """Decode on the GPU: bytes of K/V the kernel must read per call over its time (CUDA events, mean of 50)."""
    print(f"decode on {torch.cuda.get_device_name()}, {args.dtype}, heads {args.heads}/{args.kv_heads}, "
          f"head_dim {args.head_dim}, block {args.block_size}; peak {peak_gbs:,.0f} GB/s\n")  # fmt: skip
    print("| batch | context | µs | GB/s | of peak |\n|---:|---:|---:|---:|---:|")
    for batch in (1, 32, 256):
        for context in (1024, 8192):
            query, key_cache, value_cache, tables, qsl, seq_lens, scale = (
                t.cuda() if isinstance(t, torch.Tensor) else t for t in make_inputs(batch, context, 1, args)
            )
            out = torch.empty_like(query)

            def call(out=out, q=query, k=key_cache, v=value_cache, bt=tables, qs=qsl, sl=seq_lens, sc=scale):
                ops.paged_attention(out, q, k, v, bt, qs, sl, sc)

            for _ in range(5):
                call()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                call()
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1e3 / 50
            kv_bytes = 2 * batch * context * args.kv_heads * args.head_dim * key_cache.element_size()
            gbs = kv_bytes / seconds / 1e9
            print(f"| {batch} | {context} | {seconds * 1e6:,.1f} | {gbs:,.0f} | {gbs / peak_gbs:.0%} |", flush=True)
            del query, key_cache, value_cache, out
            torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=1)
    parser.add_argument("--head-dim", type=int, default=256)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="smallest shapes only, short timing budget")
    parser.add_argument("--gpu", action="store_true", help="CUDA decode bandwidth instead of the CPU comparison")
    parser.add_argument("--peak-gbs", type=float, default=4800.0, help="device memory bandwidth (H200: 4.8 TB/s)")
    args = parser.parse_args()
    args.dtype = getattr(torch, args.dtype)
    if args.gpu:
        ops.load()
        bench_gpu(args, args.peak_gbs)
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cap_cpu_isa("auto", args.dtype)  # the variants serving would pick, for the header line
    machine = describe_cpu()

    budget = 0.2 if args.quick else 1.0
    batches, contexts = ([1, 16], [256, 1024]) if args.quick else ([1, 16, 64], [256, 1024, 4096])
    print(
        f"paged_attention, {args.dtype}, {args.threads} threads, heads {args.heads}/{args.kv_heads}, "
        f"head_dim {args.head_dim}, block {args.block_size}, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}\n{machine}\n"
    )
    isas = ops.supported_cpu_isas()
    columns = "".join(f" {isa} µs |" for isa in isas) + " reference µs | speed-up (best) |"
    columns += "".join(f" {isa} vs avx2 |" for isa in isas[1:])
    print(f"| shape |{columns}\n|---|" + "---:|" * (2 * len(isas) + 1))
    decode_ratios = []
    for batch in batches:
        for context in contexts:
            kernel_us, ref_us = bench(f"decode b={batch} ctx={context}", make_inputs(batch, context, 1, args), budget)
            decode_ratios.append(ref_us / kernel_us)
    bench("prefill 1 x 512 tokens", make_inputs(1, 512, 512, args), budget)
    bench("chunked prefill 4 x 256 of 1024", make_inputs(4, 1024, 256, args), budget)
    geo = math.exp(sum(map(math.log, decode_ratios)) / len(decode_ratios))
    print(f"\ndecode speed-up: geometric mean {geo:.1f}x, min {min(decode_ratios):.1f}x, max {max(decode_ratios):.1f}x")


if __name__ == "__main__":
    main()
