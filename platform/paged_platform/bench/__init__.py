"""``paged-ctl bench``: a serving benchmark client for any OpenAI-compatible endpoint.

Modules, one job each: ``datasets`` (synthetic workloads), ``arrivals`` (when each request is sent),
``sse`` (server-sent-event parsing), ``load`` (the async HTTP client and its timing), ``stats`` (pure:
percentiles, throughput, SLO goodput), ``report`` (table and JSON), ``cli`` (the typer command).
"""
