"""Stage 1: build the CPU+CUDA kernels (``PAGED_CUDA_ARCH``, default 90) and load them; build the random-weight
model the later stages share."""

from __future__ import annotations

import os
import time

from common import ensure_model, parser, write_result


def main() -> None:
    args = parser(__doc__.split("\n\n")[0]).parse_args()
    from paged_engine.kernels import ops

    start = time.perf_counter()
    ext = ops.load()
    seconds = time.perf_counter() - start
    ensure_model(args.out, args.smoke)
    ok = ext.with_cuda or args.smoke
    write_result(
        args.out, "01-build", "pass" if ok else "fail",
        f"{'with' if ext.with_cuda else 'WITHOUT'} CUDA, sm_{os.environ.get('PAGED_CUDA_ARCH', '?')}, {seconds:.0f} s",
        seconds=round(seconds, 1), with_cuda=ext.with_cuda,
    )  # fmt: skip


if __name__ == "__main__":
    main()
