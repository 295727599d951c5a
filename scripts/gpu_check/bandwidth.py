"""Stage 5: the decode kernel's achieved bandwidth against the device-to-device copy rate measured in the same run
(target >= 80 % at batch >= 32, context >= 4k), for Gemma 3 270M's attention shape and Llama-3-8B's, on buffers
far larger than L2. FlashAttention 4's decode on the same inputs is timed alongside where it is installed."""

from __future__ import annotations

import math

from common import parser, write_result

SHAPES = {"gemma3-270m": (4, 1, 256), "llama3-8b": (32, 8, 128)}  # query heads, KV heads, head size
TARGET = 0.80
BLOCK = 16


def timed(call, repeats: int = 30) -> float:
    import torch

    for _ in range(3):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def copy_rate_gbs() -> float:
    """Device-to-device copy of 2 GiB (read + write counted), far beyond any L2."""
    import torch

    src = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    seconds = timed(lambda: dst.copy_(src), repeats=10)
    return 2 * src.numel() * src.element_size() / seconds / 1e9


def measure(shape: tuple[int, int, int], batch: int, context: int, flash_varlen) -> tuple[float, float | None]:
    """GB/s of K/V read by one decode call: our kernel, and FlashAttention 4 when given."""
    import torch
    from paged_engine.attention.flash import flash_prefill
    from paged_engine.kernels import ops

    heads, kv_heads, head_dim = shape
    blocks = math.ceil(context / BLOCK)
    key_cache = torch.randn((batch * blocks + 1, BLOCK, kv_heads, head_dim), dtype=torch.bfloat16, device="cuda")
    value_cache = torch.randn_like(key_cache)
    tables = (torch.randperm(batch * blocks, device="cuda") + 1).view(batch, blocks).int()
    qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    query = torch.randn(batch, heads, head_dim, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(query)
    args = (out, query, key_cache, value_cache, tables, qsl, seq_lens, head_dim**-0.5)
    gigabytes = 2 * batch * context * kv_heads * head_dim * key_cache.element_size() / 1e9
    ours = gigabytes / timed(lambda: ops.paged_attention(*args))
    theirs = None if flash_varlen is None else gigabytes / timed(lambda: flash_prefill(flash_varlen, *args, -1, 0.0))
    return ours, theirs


def main() -> None:
    import torch
    from paged_engine.attention.flash import load_flash_attention

    args = parser(__doc__.split("\n\n")[0]).parse_args()
    if not torch.cuda.is_available():
        write_result(args.out, "05-bandwidth", "skip", "needs a GPU")
        return
    flash = load_flash_attention()
    copy = copy_rate_gbs()
    rows, worst = [], 1.0
    for name, shape in SHAPES.items():
        for batch, context in ((1, 4096), (32, 4096), (64, 8192), (256, 4096)):
            ours, theirs = measure(shape, batch, context, None if isinstance(flash, str) else flash.varlen)
            if batch >= 32 and context >= 4096:
                worst = min(worst, ours / copy)
            rows.append({"shape": name, "batch": batch, "context": context, "ours_gbs": round(ours),
                         "of_copy": round(ours / copy, 3), "flash4_gbs": theirs and round(theirs)})  # fmt: skip
            print(rows[-1], flush=True)
    write_result(
        args.out, "05-bandwidth", "pass" if worst >= TARGET else "fail",
        f"copy {copy:,.0f} GB/s; worst decode at batch>=32, ctx>=4k: {worst:.0%} of it (target {TARGET:.0%})"
        + ("" if not isinstance(flash, str) else f"; FlashAttention 4 not timed: {flash}"),
        copy_gbs=round(copy), worst_of_copy=round(worst, 3), rows=rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
