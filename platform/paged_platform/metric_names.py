"""The Prometheus series that paged's readers use: the operator, the router, `paged-ctl` and the benchmarks (the
metric contract in docs/design.md), written once: the writers register them under these names too (the engine's
``server/metrics.py``, the router's ``router/metrics.py`` for the ``paged_router_*`` series).

Counters are named with their ``_total`` suffix, as they are exposed (prometheus_client adds it on registration).
"""

KV_USAGE = "paged_kv_cache_usage_ratio"
RUNNING = "paged_requests_running"
WAITING = "paged_requests_waiting"
PREEMPTIONS = "paged_preemptions_total"
PREFIX_QUERIES = "paged_prefix_cache_queries_total"
PREFIX_HITS = "paged_prefix_cache_hits_total"
PROMPT_TOKENS = "paged_prompt_tokens_total"
GENERATION_TOKENS = "paged_generation_tokens_total"
FINISHED = "paged_request_success_total"
TTFT = "paged_time_to_first_token_seconds"
ITL = "paged_inter_token_latency_seconds"
MAX_NUM_SEQS = "paged_scheduler_max_num_seqs"
MAX_NUM_BATCHED_TOKENS = "paged_scheduler_max_num_batched_tokens"
#: The live budgets' limits: the highest budgets the engine's admin API accepts (fixed at start-up).
MAX_NUM_SEQS_LIMIT = "paged_scheduler_max_num_seqs_limit"
MAX_NUM_BATCHED_TOKENS_LIMIT = "paged_scheduler_max_num_batched_tokens_limit"
# One series per engine core (label ``engine``: its data-parallel rank); the unlabelled ones above are the sums
# (running, waiting) and the mean (KV usage) over the cores.
CORE_KV_USAGE = "paged_core_kv_cache_usage_ratio"
CORE_RUNNING = "paged_core_requests_running"
CORE_WAITING = "paged_core_requests_waiting"
CORE_GENERATION_TOKENS = "paged_core_generation_tokens_total"
CORE_MAX_NUM_SEQS = "paged_core_scheduler_max_num_seqs"
CORE_LABEL = "engine"
STEP_PHASE = "paged_step_phase_seconds"  # histogram, label ``phase``: where an engine step's time went
ENGINE_INFO = "paged_engine_info"  # labels only: dtype, CPU kernel variant, GEMM backend, ...
#: One series of value 1 per model name a replica serves now: ``model_name`` the base model's served name,
#: ``served_model_name`` the base itself or a loaded LoRA adapter. The router learns from it where each name
#: (adapters included) can go; unlike ``/v1/models`` it needs no API key.
SERVED_MODEL_INFO = "paged_served_model_info"
SERVED_MODEL_LABEL = "served_model_name"

# The router's demand, read by the operator to scale a ModelDeployment from and to zero.
ROUTER_QUEUE_DEPTH = "paged_router_queue_depth"
ROUTER_ARRIVALS = "paged_router_arrivals_total"
