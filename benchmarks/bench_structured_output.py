"""Structured output's cost per engine step at batch 32, on the default model's 262,144-token vocabulary.

Times the sampler (metadata build + logit processing + selection) over ``[32, vocab]`` fp32 logits twice: every
row constrained by a JSON schema, each matcher mid-document at a different point of a real JSON answer, and the
same rows unconstrained. The difference is the overhead; its parts are the batched bitmask fill (xgrammar, C++
threads) and the mask's application. Times are the best of ``--repeats`` runs. For scale, the plain decode step
of the real model at batch 32 is timed through ``LLM`` (``--skip-engine`` leaves it out).

    python benchmarks/bench_structured_output.py
    python benchmarks/bench_structured_output.py --batch 8 --skip-engine
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
from paged_engine.loader.default_model import resolve_model
from paged_engine.sample import Sampler, SamplingMetadata, SamplingRow, StructuredOutput
from paged_engine.sampling_params import SamplingParams, StructuredOutputParams
from paged_engine.structured_output.grammar import GrammarCompiler
from paged_engine.tokenizer import load_tokenizer
from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "languages": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
            "required": ["city", "country"],
        },
    },
    "required": ["name", "age", "languages", "address"],
}
DOCUMENT = {
    "name": "Ada Lovelace",
    "age": 36,
    "languages": ["English", "French", "Mathematics"],
    "address": {"city": "London", "country": "United Kingdom"},
}


def best_ms(run, repeats: int) -> float:
    """Best of ``repeats`` wall times: on a shared machine the neighbours only ever add time."""
    run()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2, help="torch threads and xgrammar fill threads")
    parser.add_argument("--skip-engine", action="store_true", help="do not time the real model's decode step")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    folder = resolve_model(None, write_tokenizer=write_gguf_tokenizer_folder)
    tokenizer = load_tokenizer(folder)
    vocab = 262144
    eos = sorted(tokenizer.eos_token_ids)
    start = time.perf_counter()
    compiler = GrammarCompiler(lambda: tokenizer, vocab, eos, max_threads=args.threads)
    spec = StructuredOutputParams(json=SCHEMA)
    compiler.compile(spec)
    first_compile_s = time.perf_counter() - start
    start = time.perf_counter()
    compiler.compile(StructuredOutputParams(json={**SCHEMA, "required": ["name"]}))
    compile_ms = (time.perf_counter() - start) * 1000

    document = tokenizer.encode(json.dumps(DOCUMENT), add_special_tokens=False)
    constrained, plain = [], []
    for i in range(args.batch):
        prefix = document[: i * len(document) // args.batch]
        for rows, s in ((constrained, spec), (plain, None)):
            row = SamplingRow.create(SamplingParams(temperature=0.0, structured_output=s), [2])
            row.output_token_ids.extend(prefix)
            rows.append(row)
    structured = StructuredOutput(compiler)
    sampler = Sampler()
    logits = torch.randn(args.batch, vocab)

    def step(rows: list[SamplingRow]) -> None:
        metadata = SamplingMetadata.build(rows, vocab, eos, structured_output=structured)
        sampler(logits.clone(), metadata)

    def copy_only() -> None:
        logits.clone()

    mask = structured.mask(constrained)
    assert mask is not None

    def fill() -> None:
        structured.mask(constrained)

    def apply() -> None:
        mask.apply(logits.clone())

    with torch.inference_mode():
        plain_ms = best_ms(lambda: step(plain), args.repeats)
        constrained_ms = best_ms(lambda: step(constrained), args.repeats)
        fill_ms = best_ms(fill, args.repeats)
        apply_ms = best_ms(apply, args.repeats) - best_ms(copy_only, args.repeats)

    print(f"cpu: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    print(f"tokenizer info + first JSON-schema compile: {first_compile_s:.2f} s; a further schema: {compile_ms:.1f} ms")
    print(f"sampler step, batch {args.batch}, vocab {vocab}: plain {plain_ms:.2f} ms, all rows JSON-constrained "
          f"{constrained_ms:.2f} ms")  # fmt: skip
    overhead = constrained_ms - plain_ms
    print(f"overhead per step: {overhead:.2f} ms (bitmask fill {fill_ms:.2f} ms, mask application {apply_ms:.2f} ms)")
    if args.skip_engine:
        return

    from paged_engine import LLM

    llm = LLM(kv_cache_memory=512 << 20, max_model_len=512, num_threads=args.threads, max_num_seqs=args.batch)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    for i in range(args.batch):
        llm.engine.add_request(f"r{i}", f"Request {i}: tell me about the number {i}.", params)
    steps = []
    while llm.engine.has_unfinished_requests():
        start = time.perf_counter()
        llm.engine.step()
        steps.append(time.perf_counter() - start)
    decode_ms = min(steps[2:]) * 1000  # the decode steps (after the prefill ones), best of
    print(f"real model decode step at batch {args.batch}: {decode_ms:.1f} ms; structured-output overhead "
          f"{overhead / decode_ms:.1%} of it")  # fmt: skip


if __name__ == "__main__":
    main()
