"""Stage 4: bf16 on the GPU against transformers in bf16 on the GPU: teacher-forced top-1 agreement (target
>= 99 %): at every prompt position, does our engine's most likely next token equal transformers'?"""

from __future__ import annotations

from common import GEMMA_270M, SMOKE, device, ensure_model, parser, peak_gpu_mib, random_prompts, write_result

TARGET = 0.99


def top1(entry) -> int:
    """The most likely token at a prompt position (entry 0 is the prompt's own token, then the top-N by rank)."""
    return next(t for t, r in zip(entry.token_ids[1:], entry.ranks[1:], strict=True) if r == 1)


def main() -> None:
    import torch
    import transformers as tf
    from paged_engine import LLM, SamplingParams

    args = parser(__doc__.split("\n\n")[0]).parse_args()
    config = SMOKE if args.smoke else GEMMA_270M
    folder = ensure_model(args.out, args.smoke)
    dev = device(args.smoke)
    prompts = random_prompts(4, 2 * config["sliding_window"], config["vocab_size"], seed=4)
    llm = LLM(str(folder), device=dev, dtype="bfloat16", max_model_len=4096, kv_cache_memory="1GiB")
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1))
    ours = [[top1(entry) for entry in out.prompt_logprobs[1:]] for out in outputs]
    del llm
    hf = tf.Gemma3ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(dev).eval()
    agree = total = 0
    with torch.inference_mode():
        for prompt, predicted in zip(prompts, ours, strict=True):
            logits = hf(torch.tensor([prompt], device=dev)).logits[0, :-1].float()
            theirs = logits.argmax(-1).tolist()
            agree += sum(a == b for a, b in zip(predicted, theirs, strict=True))
            total += len(theirs)
    rate = agree / total
    write_result(
        args.out, "04-bf16-quality", "pass" if rate >= TARGET else "fail",
        f"top-1 agreement {rate:.2%} over {total} positions (target {TARGET:.0%}; random weights)",
        agreement=round(rate, 4), positions=total, peak_gpu_mib=peak_gpu_mib(),
    )  # fmt: skip


if __name__ == "__main__":
    main()
