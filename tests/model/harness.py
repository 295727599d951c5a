"""A hand-driven scheduler for testing the model runner without the engine core.

It gives every request fresh blocks in every KV-cache group (no sharing, no eviction), hands out a token budget
per step in request order (so prompts are chunked and mixed with decode tokens), and runs to completion.
"""

from __future__ import annotations

import torch
from paged_engine.attention import get_backend
from paged_engine.core.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
from paged_engine.loader.hf import load_hf_model
from paged_engine.sampling_params import SamplingParams
from paged_engine.worker.kv_cache import plan_kv_cache
from paged_engine.worker.model_runner import ModelRunner


def make_runner(folder, block_size: int = 8, num_blocks: int = 512, max_model_len: int = 128, max_num_reqs: int = 16):
    model, _ = load_hf_model(folder)
    plan = plan_kv_cache(model, block_size, torch.float32, max_model_len, num_blocks=num_blocks)
    return ModelRunner(model, plan, get_backend("reference"), max_num_reqs, max_model_len)


def run_manual(
    runner: ModelRunner,
    prompts: list[list[int]],
    max_tokens: int,
    budget: int = 1000,
    adapter_ids: list[str | None] | None = None,
) -> list[list[int]]:
    """Greedy-generate ``max_tokens`` for every prompt (under ``adapter_ids[i]``'s LoRA where given); returns the
    output token ids."""
    groups = len(runner.plan.config.groups)
    bs = runner.block_size
    next_block = [1]
    ids = [f"r{i}" for i in range(len(prompts))]
    tokens = {r: list(p) for r, p in zip(ids, prompts, strict=True)}
    outputs: dict[str, list[int]] = {r: [] for r in ids}
    computed = dict.fromkeys(ids, 0)
    blocks: dict[str, list[list[int]]] = {r: [[] for _ in range(groups)] for r in ids}
    seen: set[str] = set()
    finished: set[str] = set()
    while len(finished) < len(ids):
        out = SchedulerOutput()
        left = budget
        for r in ids:
            if r in finished or left == 0:
                continue
            n = min(len(tokens[r]) - computed[r], left)
            left -= n
            need = -(-(computed[r] + n) // bs)
            new_ids = []
            for g in range(groups):
                extra = list(range(next_block[0], next_block[0] + need - len(blocks[r][g])))
                next_block[0] += len(extra)
                blocks[r][g] += extra
                new_ids.append(extra)
            if r not in seen:
                seen.add(r)
                out.new_requests.append(
                    NewRequestData(
                        r,
                        list(prompts[ids.index(r)]),
                        [],
                        SamplingParams(temperature=0.0),
                        tuple(new_ids),
                        0,
                        None if adapter_ids is None else adapter_ids[ids.index(r)],
                    )
                )
            else:
                out.cached_requests.append(CachedRequestData(r, tuple(new_ids), computed[r]))
            out.num_scheduled_tokens[r] = n
            out.total_num_scheduled_tokens += n
        result = runner.execute_model(out)
        for r, n in out.num_scheduled_tokens.items():
            computed[r] += n
            for t in result.sampled_token_ids.get(r, []):
                tokens[r].append(t)
                outputs[r].append(t)
            if len(outputs[r]) >= max_tokens:
                finished.add(r)
        # finished requests are forgotten by the runner at the next step
    return [outputs[r] for r in ids]
