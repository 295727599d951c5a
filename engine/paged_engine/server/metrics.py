"""Prometheus metrics of one engine, named as in the design's metric contract.

The operator, the dashboards and the alerts read exactly these names; renaming one breaks them. Everything is
labelled with ``model_name``. Step-level figures come from the engine core's per-step stats, request-level
latencies from the API server's own timestamps of each request's life.
"""

from __future__ import annotations

from paged_platform import metric_names as names
from paged_platform.engine_contract.budgets import BudgetLimits
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    gc_collector,
    platform_collector,
    process_collector,
)

from paged_engine.core.stats import SchedulerStats

disable_created_metrics()  # the *_created series only double the scrape size

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                    20.0, 40.0, 80.0, 160.0, 640.0)  # fmt: skip
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_PHASE_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
FINISH_REASONS = ("stop", "length", "abort", "error")  # error: failed inside a step (see worker/request_faults.py)


class EngineMetrics:
    def __init__(self, model_name: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        process_collector.ProcessCollector(registry=r)
        platform_collector.PlatformCollector(registry=r)
        gc_collector.GCCollector(registry=r)
        labels = ["model_name"]
        self.model_name = model_name

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r).labels(model_name)

        def counter(name: str, doc: str) -> Counter:  # ``name`` as exposed, with its _total suffix
            return Counter(name.removesuffix("_total"), doc, labels, registry=r).labels(model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(model_name)

        self.kv_cache_usage = gauge(names.KV_USAGE, "Used KV-cache blocks / total blocks (0-1).")
        self.running = gauge(names.RUNNING, "Requests in the scheduler's running queue.")
        self.waiting = gauge(names.WAITING, "Requests waiting to be scheduled.")
        self.max_num_seqs = gauge(names.MAX_NUM_SEQS, "Current scheduler budget: sequences per step.")
        self.max_num_batched_tokens = gauge(names.MAX_NUM_BATCHED_TOKENS, "Current scheduler budget: tokens per step.")
        self.max_num_seqs_limit = gauge(names.MAX_NUM_SEQS_LIMIT, "Highest max_num_seqs the admin API accepts.")
        self.max_num_batched_tokens_limit = gauge(
            names.MAX_NUM_BATCHED_TOKENS_LIMIT, "Highest max_num_batched_tokens the admin API accepts."
        )
        self.preemptions = counter(names.PREEMPTIONS, "Requests preempted by recompute.")
        self.prefix_queries = counter(names.PREFIX_QUERIES, "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter(names.PREFIX_HITS, "Prompt tokens found in the prefix cache.")
        self.prompt_tokens = counter(names.PROMPT_TOKENS, "Prompt tokens processed.")
        self.generation_tokens = counter(names.GENERATION_TOKENS, "Tokens generated.")
        success = Counter(
            names.FINISHED.removesuffix("_total"), "Finished requests by finish reason.",
            ["model_name", "finished_reason"], registry=r,
        )  # fmt: skip
        self.request_success = {reason: success.labels(model_name, reason) for reason in FINISH_REASONS}
        self.ttft = histogram(names.TTFT, "Time to first token.", _LATENCY_BUCKETS)
        self.itl = histogram(names.ITL, "Time between output tokens.", _ITL_BUCKETS)
        self.e2e = histogram("paged_e2e_request_latency_seconds", "End-to-end request latency.", _LATENCY_BUCKETS)
        self.queue_time = histogram(
            "paged_request_queue_time_seconds", "Time a request waited before first scheduled.", _LATENCY_BUCKETS
        )
        self.iteration_tokens = histogram("paged_iteration_tokens", "Tokens computed per engine step.", _TOKEN_BUCKETS)
        self.step_phase = Histogram(
            names.STEP_PHASE, "Time per engine step (or, for server phases, per call) by phase: schedule, "
            "prepare, model, attention, sample, update in the engine core; ipc_decode, detokenize and http (writing a "
            "streamed chunk) in the server.",
            ["model_name", "phase"], buckets=_PHASE_BUCKETS, registry=r,
        )  # fmt: skip
        self.lora_requests = Counter(
            "paged_lora_requests", "API requests served by each LoRA adapter (base-model requests are not counted).",
            ["model_name", "lora_name"], registry=r,
        )  # fmt: skip
        per_core = ["model_name", names.CORE_LABEL]
        self.core_kv_cache_usage = Gauge(names.CORE_KV_USAGE, "One engine core's used KV blocks / its blocks.",
                                         per_core, registry=r)  # fmt: skip
        self.core_running = Gauge(names.CORE_RUNNING, "One engine core's running requests.", per_core, registry=r)
        self.core_waiting = Gauge(names.CORE_WAITING, "One engine core's waiting requests.", per_core, registry=r)
        self.core_generation_tokens = Counter(names.CORE_GENERATION_TOKENS.removesuffix("_total"),
                                              "Tokens one engine core generated.", per_core, registry=r)  # fmt: skip
        self.core_max_num_seqs = Gauge(names.CORE_MAX_NUM_SEQS, "One engine core's sequences-per-step budget.",
                                       per_core, registry=r)  # fmt: skip
        self.info = Info(names.ENGINE_INFO.removesuffix("_info"), "Static facts about this engine.", registry=r)
        self.served_models = Gauge(
            names.SERVED_MODEL_INFO, "1 per model name this engine serves now: the base model and each loaded LoRA "
            "adapter (the router routes adapter names by it).",
            ["model_name", names.SERVED_MODEL_LABEL], registry=r,
        )  # fmt: skip

    def set_info(self, **facts: str) -> None:
        self.info.info({"model_name": self.model_name, **facts})

    def observe_step(self, stats: SchedulerStats) -> None:
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.kv_cache_usage.set(stats.kv_cache_usage)
        self.observe_budgets(stats.max_num_seqs, stats.max_num_batched_tokens)
        for counter, increment in (
            (self.preemptions, stats.num_preemptions),
            (self.prefix_queries, stats.prefix_cache_queries),
            (self.prefix_hits, stats.prefix_cache_hits),
            (self.prompt_tokens, stats.num_prompt_tokens),
            (self.generation_tokens, stats.num_generation_tokens),
        ):
            if increment:
                counter.inc(increment)
        if stats.num_scheduled_tokens:
            self.iteration_tokens.observe(stats.num_scheduled_tokens)
        for phase, seconds in stats.step_phases.items():
            self.observe_phase(phase, seconds)

    def observe_core(self, engine: str, stats: SchedulerStats) -> None:
        """One engine core's own figures (``observe_step`` takes the figures of all of them)."""
        self.core_kv_cache_usage.labels(self.model_name, engine).set(stats.kv_cache_usage)
        self.core_running.labels(self.model_name, engine).set(stats.num_running)
        self.core_waiting.labels(self.model_name, engine).set(stats.num_waiting)
        self.core_max_num_seqs.labels(self.model_name, engine).set(stats.max_num_seqs)
        if stats.num_generation_tokens:
            self.core_generation_tokens.labels(self.model_name, engine).inc(stats.num_generation_tokens)

    def set_served_models(self, adapters: list[str]) -> None:
        """The base model and ``adapters`` (the LoRA adapters loaded now) as ``paged_served_model_info`` series;
        an adapter unloaded since the last call loses its series."""
        self.served_models.clear()
        for name in dict.fromkeys([self.model_name, *adapters]):
            self.served_models.labels(self.model_name, name).set(1)

    def observe_lora_request(self, lora_name: str) -> None:
        self.lora_requests.labels(self.model_name, lora_name).inc()

    def observe_phase(self, phase: str, seconds: float) -> None:
        self.step_phase.labels(self.model_name, phase).observe(seconds)

    def observe_budgets(self, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.max_num_seqs.set(max_num_seqs)
        self.max_num_batched_tokens.set(max_num_batched_tokens)

    def observe_limits(self, limits: BudgetLimits) -> None:
        self.max_num_seqs_limit.set(limits.max_num_seqs)
        self.max_num_batched_tokens_limit.set(limits.max_num_batched_tokens)

    def observe_finished(self, *, finish_reason: str, e2e_seconds: float, queue_seconds: float | None) -> None:
        self.request_success[finish_reason if finish_reason in self.request_success else "abort"].inc()
        self.e2e.observe(e2e_seconds)
        if queue_seconds is not None:
            self.queue_time.observe(queue_seconds)
