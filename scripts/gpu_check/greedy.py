"""Stage 3: greedy tokens on the GPU in fp32 equal the CPU's, on Gemma 3 270M's config with prompts longer than
its 512-token window (CUDA graphs on for the GPU, as served)."""

from __future__ import annotations

import gc

from common import GEMMA_270M, SMOKE, device, ensure_model, parser, peak_gpu_mib, random_prompts, write_result


def generate(folder, dev: str, prompts, max_tokens: int) -> list[list[int]]:
    from paged_engine import LLM, SamplingParams

    llm = LLM(str(folder), device=dev, dtype="float32", max_model_len=2048, kv_cache_memory="2GiB", max_num_seqs=8)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    tokens = [out.outputs[0].token_ids for out in llm.generate(prompts, params)]
    del llm
    gc.collect()
    return tokens


def main() -> None:
    args = parser(__doc__.split("\n\n")[0]).parse_args()
    config = SMOKE if args.smoke else GEMMA_270M
    folder = ensure_model(args.out, args.smoke)
    window = config["sliding_window"]
    prompts = random_prompts(4, window + 150, config["vocab_size"], seed=3)
    max_tokens = 8 if args.smoke else 48
    on_cpu = generate(folder, "cpu", prompts, max_tokens)
    on_device = generate(folder, device(args.smoke), prompts, max_tokens)
    same = sum(a == b for a, b in zip(on_cpu, on_device, strict=True))
    first_diff = [next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
                  for a, b in zip(on_cpu, on_device, strict=True)]  # fmt: skip
    write_result(
        args.out, "03-greedy", "pass" if same == len(prompts) else "fail",
        f"{same}/{len(prompts)} prompts identical over {max_tokens} tokens (prompts of {len(prompts[0])}+ tokens, "
        f"window {window})",
        identical=same, prompts=len(prompts), first_divergence=first_diff, peak_gpu_mib=peak_gpu_mib(),
    )  # fmt: skip


if __name__ == "__main__":
    main()
