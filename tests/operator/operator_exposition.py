"""Hand-written engine exposition text in the shape ``prometheus_client`` produces, with the DESIGN names, and the
admin API's budget answer in the engine contract's shape, for the operator tests' stand-in engines."""

from __future__ import annotations

import json
from typing import Any

from paged_platform.engine_contract.admin import BudgetsReport
from paged_platform.engine_contract.budgets import BudgetLimits, Budgets, live_limits

TTFT_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def exposition(
    *,
    kv: float = 0.5,
    running: int = 8,
    waiting: int = 0,
    preemptions: float = 0.0,
    prefix_queries: float = 1000.0,
    prefix_hits: float = 250.0,
    ttft_counts: tuple[int, ...] = (1, 3, 6, 8, 9, 10, 10, 10),
    max_num_seqs: int = 64,
    max_num_batched_tokens: int = 2048,
    limits: BudgetLimits | None = None,
    model: str = "gemma-3-270m",
) -> str:
    """Metrics page of one engine; ``ttft_counts`` are cumulative counts per bound of ``TTFT_BOUNDS`` plus +Inf;
    ``limits``: the live limits it reports (None: an engine that reports none)."""
    assert len(ttft_counts) == len(TTFT_BOUNDS) + 1
    m = f'model_name="{model}"'
    buckets = "\n".join(
        f'paged_time_to_first_token_seconds_bucket{{le="{b}",{m}}} {c:.1f}'
        for b, c in zip([*map(str, TTFT_BOUNDS), "+Inf"], ttft_counts, strict=True)
    )
    itl = "\n".join(
        f'paged_inter_token_latency_seconds_bucket{{le="{b}",{m}}} {c:.1f}'
        for b, c in (("0.01", 50), ("0.025", 90), ("0.05", 99), ("+Inf", 100))
    )
    return f"""\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{{generation="0"}} 1234.0
# HELP paged_kv_cache_usage_ratio Used KV blocks / total blocks.
# TYPE paged_kv_cache_usage_ratio gauge
paged_kv_cache_usage_ratio{{{m}}} {kv}
# HELP paged_requests_running Requests in the running queue.
# TYPE paged_requests_running gauge
paged_requests_running{{{m}}} {running:.1f}
# HELP paged_requests_waiting Requests in the waiting queue.
# TYPE paged_requests_waiting gauge
paged_requests_waiting{{{m}}} {waiting:.1f}
# HELP paged_preemptions_total Recompute preemptions.
# TYPE paged_preemptions_total counter
paged_preemptions_total{{{m}}} {preemptions:.1f}
# HELP paged_preemptions_created Recompute preemptions.
# TYPE paged_preemptions_created gauge
paged_preemptions_created{{{m}}} 1.764e+09
# HELP paged_prefix_cache_queries_total Prefix cache queries, in tokens.
# TYPE paged_prefix_cache_queries_total counter
paged_prefix_cache_queries_total{{{m}}} {prefix_queries:.1f}
# HELP paged_prefix_cache_hits_total Prefix cache hits, in tokens.
# TYPE paged_prefix_cache_hits_total counter
paged_prefix_cache_hits_total{{{m}}} {prefix_hits:.1f}
# HELP paged_prompt_tokens_total Prompt tokens processed.
# TYPE paged_prompt_tokens_total counter
paged_prompt_tokens_total{{{m}}} 52000.0
# HELP paged_generation_tokens_total Generated tokens.
# TYPE paged_generation_tokens_total counter
paged_generation_tokens_total{{{m}}} 16000.0
# HELP paged_request_success_total Finished requests.
# TYPE paged_request_success_total counter
paged_request_success_total{{finished_reason="stop",{m}}} 90.0
paged_request_success_total{{finished_reason="length",{m}}} 10.0
paged_request_success_total{{finished_reason="abort",{m}}} 7.0
# HELP paged_time_to_first_token_seconds Time to first token.
# TYPE paged_time_to_first_token_seconds histogram
{buckets}
paged_time_to_first_token_seconds_count{{{m}}} {ttft_counts[-1]:.1f}
paged_time_to_first_token_seconds_sum{{{m}}} 4.2
# HELP paged_inter_token_latency_seconds Inter-token latency.
# TYPE paged_inter_token_latency_seconds histogram
{itl}
paged_inter_token_latency_seconds_count{{{m}}} 100.0
paged_inter_token_latency_seconds_sum{{{m}}} 1.5
# HELP paged_scheduler_max_num_seqs Current max_num_seqs budget.
# TYPE paged_scheduler_max_num_seqs gauge
paged_scheduler_max_num_seqs{{{m}}} {max_num_seqs:.1f}
# HELP paged_scheduler_max_num_batched_tokens Current max_num_batched_tokens budget.
# TYPE paged_scheduler_max_num_batched_tokens gauge
paged_scheduler_max_num_batched_tokens{{{m}}} {max_num_batched_tokens:.1f}
""" + (_limits(limits, m) if limits is not None else "")


def _limits(limits: BudgetLimits, m: str) -> str:
    return f"""\
# HELP paged_scheduler_max_num_seqs_limit Highest max_num_seqs the admin API accepts.
# TYPE paged_scheduler_max_num_seqs_limit gauge
paged_scheduler_max_num_seqs_limit{{{m}}} {limits.max_num_seqs:.1f}
# HELP paged_scheduler_max_num_batched_tokens_limit Highest max_num_batched_tokens the admin API accepts.
# TYPE paged_scheduler_max_num_batched_tokens_limit gauge
paged_scheduler_max_num_batched_tokens_limit{{{m}}} {limits.max_num_batched_tokens:.1f}
"""


def budgets_answer(put_body: bytes | str, limits: BudgetLimits | None = None) -> dict[str, Any]:
    """What an engine's ``PUT /admin/budgets`` answers when it takes ``put_body`` (within its live limits)."""
    body = json.loads(put_body)
    budgets = Budgets(body["max_num_seqs"], body["max_num_batched_tokens"])
    return BudgetsReport.of(budgets, limits or live_limits(budgets)).model_dump()
