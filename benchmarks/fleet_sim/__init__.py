"""Request-level fleet simulator for evaluating autoscaling policies offline (used by benchmarks and tests).

It lives beside the benchmarks, not in the operator package: nothing in the operator imports it. It drives the
controller's pure ``decide`` (and baseline autoscalers) against generated traffic, so policies can be compared
without a cluster. Benchmarks import it as ``fleet_sim`` (run from ``benchmarks/``), tests as
``benchmarks.fleet_sim``.

* ``workload``: arrival-rate profiles and request streams (gamma renewal arrivals, lognormal lengths).
* ``engine_model``: one engine pod with continuous batching, chunked prefill, KV in tokens, preemption.
* ``fleet``: pods behind a Service, start-up delay, graceful drain, the control loop, the run record.
* ``scalers``: the paged controller and the HPA / Knative KPA / KEDA baselines behind one interface.
* ``scoring``: TTFT-SLO attainment, replica-hours, scale events, flaps, preemptions, throughput.
"""
