"""Stage 6: offline throughput on a W1-like batch (256 requests x 256 prompt / 128 output tokens, greedy, EOS
ignored) on Gemma 3 270M's config, eager against CUDA graphs (target: graphs >= 2x eager decode throughput at
batch <= 16, measured with a 16-request batch), and the peak GPU memory of each (stage 7)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time

from common import GEMMA_270M, SMOKE, device, ensure_model, parser, random_prompts, write_result

TARGET_SMALL_BATCH = 2.0


def run_one(folder: str, dev: str, eager: bool, count: int, prompt_len: int, out_len: int, vocab: int) -> dict:
    """One engine in this process: output tokens per second for the batch, and for decode alone."""
    import torch
    from paged_engine import LLM, SamplingParams

    start = time.perf_counter()
    llm = LLM(folder, device=dev, enforce_eager=eager, max_model_len=1024, max_num_seqs=count,
              max_num_batched_tokens=8192)  # fmt: skip
    ready = time.perf_counter() - start
    prompts = [p[:prompt_len] for p in random_prompts(count, prompt_len, vocab, seed=6)]
    params = SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))  # warm-up
    prefill_only = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    t0 = time.perf_counter()
    llm.generate(prompts, prefill_only)
    t1 = time.perf_counter()
    outputs = llm.generate(prompts, params)
    t2 = time.perf_counter()
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    # the prompts are cached by the second run; decode time is the second run less a prefill-only run's
    result = {
        "startup_s": round(ready, 1), "output_tok_s": round(tokens / (t2 - t1), 1),
        "decode_tok_s": round((tokens - count) / max(t2 - t1 - (t1 - t0), 1e-9), 1),
        "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20) if torch.cuda.is_available() else None,
    }  # fmt: skip
    del llm
    gc.collect()
    return result


def main() -> None:
    args = parser(__doc__.split("\n\n")[0]).parse_args()
    config = SMOKE if args.smoke else GEMMA_270M
    folder = str(ensure_model(args.out, args.smoke))
    dev = device(args.smoke)
    count, small, prompt_len, out_len = (8, 2, 32, 8) if args.smoke else (256, 16, 256, 128)
    figures: dict[str, dict] = {}
    for label, batch in (("w1", count), ("small", small)):
        for eager in (True, False):
            key = f"{label}_{'eager' if eager else 'graphs'}"
            # each engine in a fresh process, so peak memory and graph pools are its own
            cmd = [sys.executable, __file__, "--one", json.dumps([folder, dev, eager, batch, prompt_len, out_len,
                                                                 config["vocab_size"]])]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            sys.stderr.write(proc.stderr[-4000:])
            ok = proc.returncode == 0
            figures[key] = json.loads(proc.stdout.strip().splitlines()[-1]) if ok else {"exit": proc.returncode}
            print(key, figures[key], flush=True)
    try:
        ratio = figures["small_graphs"]["decode_tok_s"] / figures["small_eager"]["decode_tok_s"]
        w1 = figures["w1_graphs"]["output_tok_s"] / figures["w1_eager"]["output_tok_s"]
    except (KeyError, ZeroDivisionError):
        write_result(args.out, "06-throughput", "fail", "a run failed", **figures)
        return
    status = "pass" if ratio >= TARGET_SMALL_BATCH or args.smoke else "fail"
    write_result(
        args.out, "06-throughput", status,
        f"W1 {figures['w1_graphs']['output_tok_s']:,.0f} tok/s with graphs, {w1:.2f}x eager; "
        f"decode at batch {small}: graphs {ratio:.2f}x eager (target {TARGET_SMALL_BATCH}x)",
        graphs_over_eager_small=round(ratio, 2), graphs_over_eager_w1=round(w1, 2), **figures,
    )  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(run_one(*json.loads(sys.argv[2]))))
    else:
        main()
