"""Per-step scheduler figures; the metrics layer turns them into the ``paged_*`` Prometheus series."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SchedulerStats:
    """State after a step (gauges) and what happened during it (counter increments, in tokens or events)."""

    num_running: int  # paged_requests_running
    num_waiting: int  # paged_requests_waiting
    kv_cache_usage: float  # paged_kv_cache_usage_ratio
    num_preemptions: int  # increment of paged_preemptions_total
    prefix_cache_queries: int  # increment of paged_prefix_cache_queries_total (tokens)
    prefix_cache_hits: int  # increment of paged_prefix_cache_hits_total (tokens)
    num_scheduled_tokens: int  # paged_iteration_tokens observation
    num_prompt_tokens: int  # increment of paged_prompt_tokens_total
    num_generation_tokens: int  # increment of paged_generation_tokens_total
    max_num_seqs: int  # paged_scheduler_max_num_seqs
    max_num_batched_tokens: int  # paged_scheduler_max_num_batched_tokens
    # seconds of this step per phase (schedule, prepare, model, attention, sample, update; paged_step_phase_seconds)
    step_phases: dict[str, float] = field(default_factory=dict)
