"""Prefix caching on vs off: TTFT and throughput of ``paged-engine serve`` on the shared-prefix dataset.

The same server is started twice (``--enable-prefix-caching`` / ``--no-enable-prefix-caching``), one at a
time, and loaded with the same ``paged-ctl bench --dataset shared-prefix`` run: k system prompts of p tokens,
each shared by n/k requests, plus a distinct question. The hit rate is read from the server's own counters
(``paged_prefix_cache_hits_total / paged_prefix_cache_queries_total``) over the benchmark.

    python benchmarks/bench_prefix_cache.py
    python benchmarks/bench_prefix_cache.py -- --num-prompts 16 --prefix-len 256

Arguments after ``--`` go to ``paged-ctl bench`` (defaults: see BENCH_DEFAULTS).
"""

from __future__ import annotations

import argparse
import sys

import httpx
from bench_serving import (
    add_server_args,
    free_port,
    model_folder,
    paged_command,
    print_table,
    run_bench,
    running,
    server_env,
)

BENCH_DEFAULTS = [
    "--dataset", "shared-prefix", "--num-prompts", "32", "--num-prefixes", "4", "--prefix-len", "512",
    "--input-len", "32", "--output-len", "32", "--request-rate", "1", "--max-duration", "900",
]  # fmt: skip


def prefix_counters(url: str) -> tuple[float, float]:
    """(queries, hits) in tokens, summed over label sets."""
    queries = hits = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("paged_prefix_cache_queries_total"):
            queries += float(line.split()[-1])
        elif line.startswith("paged_prefix_cache_hits_total"):
            hits += float(line.split()[-1])
    return queries, hits


def main() -> None:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    own, bench_args = argv[:cut], BENCH_DEFAULTS + argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    args = parser.parse_args(own)
    folder = model_folder(args.model)
    env = server_env(args)
    results: dict[str, dict] = {}
    for name, flag in (("cache on", "--enable-prefix-caching"), ("cache off", "--no-enable-prefix-caching")):
        port = free_port()
        command = paged_command(folder, port, args, flag)
        print(f"== {name}: {' '.join(command)}", flush=True)
        with running(name.replace(" ", "-"), command, port, env, args.start_timeout) as (url, _):
            q0, h0 = prefix_counters(url)
            results[name] = run_bench(url, folder, bench_args)
            q1, h1 = prefix_counters(url)
            results[name]["prefix_hit_rate"] = (h1 - h0) / (q1 - q0) if q1 > q0 else 0.0
    print(f"\nworkload: paged-ctl bench {' '.join(bench_args)}")
    print_table(results, baseline="cache off")
    for name, data in results.items():
        print(f"prefix-cache hit rate ({name}): {data['prefix_hit_rate']:.1%}")


if __name__ == "__main__":
    main()
