"""A toy fleet of paged engines driven by the real controller logic, to run load traces against the policies.

The model is a fluid one (fractional requests), stepped once per simulated second:

* Arrivals (requests/s from the trace) are split evenly over the *ready* pods' waiting queues;
  queued clients give up after ``patience_s`` on average (aborted, not served, not counted as finished).
* The scheduler admits waiting requests up to ``max_num_seqs``. Only ``kv_capacity_seqs`` sequences
  fit in a pod's KV cache; the rest are preempted back to the queue every step (the preemption
  counter counts them) and the re-prefill wastes time, so a budget above the KV capacity thrashes.
* A pod completes ``running / (output_tokens × step_time)`` requests per second with
  ``step_time = step_base_s + step_per_seq_s × running`` (bigger batches: more throughput, slower each).
* KV usage is ``running / kv_capacity_seqs`` for the step's batch (reported with the batch size). New pods take
  ``start_delay_s`` to become ready; removed pods hand their queues back to the others.

Every ``tick_s`` the fleet is "scraped" into ``EngineSample``s with cumulative counters, fed to
``controller_logic.decide``, and the plan is applied: replicas change, budgets are pushed to the
ready pods and new pods start with the target budgets (the ConfigMap). Run this file to print the
figures of the standard traces.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from paged_operator.policy.arbiter import Action
from paged_operator.policy.controller import ControllerSpec, ControllerState, Observation, decide, initial_state
from paged_operator.policy.fleet_view import EngineSample
from paged_platform.engine_contract.budgets import Budgets

Trace = Callable[[float], float]


@dataclass(frozen=True)
class FleetModel:
    kv_capacity_seqs: float = 40.0
    output_tokens: float = 200.0
    step_base_s: float = 0.02
    step_per_seq_s: float = 0.0005
    start_delay_s: float = 90.0
    patience_s: float = 180.0  # mean time a queued client waits before giving up (aborts are not served)
    noise: float = 0.0  # relative arrival noise (seeded), 0 for a fluid trace

    def completions_per_s(self, running: float, preempted: float) -> float:
        """Requests a pod finishes per second; preempted sequences cost re-prefill time in the step."""
        if running <= 0:
            return 0.0
        step = self.step_base_s + self.step_per_seq_s * (running + preempted)
        return running / (self.output_tokens * step)

    def capacity_at(self, kv_usage: float) -> float:
        """Requests/s one healthy pod sustains at this KV usage (used to size expectations in tests)."""
        running = kv_usage * self.kv_capacity_seqs
        return self.completions_per_s(running, 0.0)


@dataclass
class Pod:
    name: str
    ready_at: float
    budgets: Budgets
    running: float = 0.0
    waiting: float = 0.0
    preemptions_total: float = 0.0
    finished_total: float = 0.0
    kv_usage: float = 0.0  # the last step's batch, as the engine's gauges report it (before completions)
    batch: float = 0.0


@dataclass
class Tick:
    """What one controller tick saw and did."""

    time: float
    replicas: int
    ready: int
    kv_usage: float
    waiting_per_replica: float
    preemption_rate: float
    budgets: Budgets | None
    action: Action
    rule: str
    panic: bool
    reason: str


@dataclass
class Run:
    ticks: list[Tick] = field(default_factory=list)

    def replicas(self) -> list[int]:
        return [t.replicas for t in self.ticks]

    def reversals(self) -> int:
        """Changes of scaling direction (up then down or down then up): flapping shows as many of these."""
        moves = [b - a for a, b in itertools.pairwise(self.replicas()) if b != a]
        return sum(1 for a, b in itertools.pairwise(moves) if (a > 0) != (b > 0))

    def between(self, start: float, end: float) -> list[Tick]:
        return [t for t in self.ticks if start <= t.time < end]


def simulate(
    spec: ControllerSpec,
    trace: Trace,
    *,
    duration_s: float,
    replicas: int,
    budgets: Budgets,
    model: FleetModel | None = None,
    tick_s: float = 10.0,
    silent_pods: frozenset[str] = frozenset(),
    seed: int = 0,
    restarts: Callable[[float, ControllerState, Budgets], ControllerState | None] | None = None,
) -> Run:
    """Run ``trace`` (arrivals/s as a function of time) for ``duration_s`` starting with ``replicas`` ready pods.

    ``restarts(time, state, budgets in force)``: called before each decision; a state it returns replaces the
    controller's (an operator restart: the state it starts from), None keeps it.
    """
    model = model or FleetModel()
    rng = random.Random(seed)
    names = (f"pod-{i}" for i in range(10_000))
    pods = [Pod(next(names), ready_at=0.0, budgets=budgets) for _ in range(replicas)]
    state = initial_state(spec, budgets)
    target = budgets
    run = Run()
    t = 0.0
    while t < duration_s:
        ready = [p for p in pods if p.ready_at <= t]
        arrivals = trace(t) * (1.0 + model.noise * rng.uniform(-1, 1))
        for pod in ready:
            pod.waiting += arrivals / len(ready)
            _step(model, pod)
        t += 1.0
        if t % tick_s:
            continue
        ready = [p for p in pods if p.ready_at <= t]
        samples = tuple(
            EngineSample(
                time=t,
                pod=p.name,
                kv_usage=p.kv_usage,
                running=p.batch,
                waiting=p.waiting,
                preemptions_total=p.preemptions_total,
                finished_total=p.finished_total,
                max_num_seqs=p.budgets.max_num_seqs,
                max_num_batched_tokens=p.budgets.max_num_batched_tokens,
            )
            for p in ready
            if p.name not in silent_pods
        )
        obs = Observation(
            time=t,
            ready_pods=tuple(p.name for p in ready),
            starting=len(pods) - len(ready),
            samples=samples,
            failures={name: "no answer" for name in silent_pods},
        )
        restarted = restarts(t, state, target) if restarts is not None else None
        plan, state = decide(spec, state if restarted is None else restarted, obs)
        if plan.target_budgets is not None:
            target = plan.target_budgets
            for pod in pods:
                if pod.name in plan.push_budgets_to:
                    pod.budgets = target
        if plan.replicas is not None:
            pods = _resize(pods, plan.replicas, t, model, target, names)
        view = plan.view
        run.ticks.append(
            Tick(
                time=t,
                replicas=len(pods),
                ready=len(ready),
                kv_usage=view.kv_usage_mean if view else math.nan,
                waiting_per_replica=view.waiting_per_replica if view else math.nan,
                preemption_rate=(view.preemption_rate_per_replica or 0.0) if view else math.nan,
                budgets=target,
                action=plan.verdict.action,
                rule=plan.verdict.rule,
                panic=bool(plan.scale and plan.scale.panic),
                reason=plan.verdict.reason,
            )
        )
    return run


def _step(model: FleetModel, pod: Pod) -> None:
    """One second of one engine: clients give up, admit up to the budget, preempt what does not fit, complete some."""
    pod.waiting -= pod.waiting / model.patience_s
    admit = min(pod.waiting, max(0.0, pod.budgets.max_num_seqs - pod.running))
    pod.running += admit
    pod.waiting -= admit
    overflow = max(0.0, pod.running - model.kv_capacity_seqs)
    pod.running -= overflow
    pod.waiting += overflow
    pod.preemptions_total += overflow
    pod.kv_usage = min(1.0, pod.running / model.kv_capacity_seqs)
    pod.batch = pod.running
    done = min(pod.running, model.completions_per_s(pod.running, overflow))
    pod.running -= done
    pod.finished_total += done


def _resize(pods: list[Pod], n: int, now: float, model: FleetModel, budgets: Budgets, names) -> list[Pod]:
    """Add pods (ready after the start delay) or remove the newest, whose queued work goes to the others."""
    pods = list(pods)
    while len(pods) < n:
        pods.append(Pod(next(names), ready_at=now + model.start_delay_s, budgets=budgets))
    while len(pods) > n:
        gone = pods.pop()
        rest = [p for p in pods if p.ready_at <= now] or pods
        for p in rest:
            p.waiting += (gone.running + gone.waiting) / len(rest)
    return pods


def step_trace(before: float, after: float, at: float) -> Trace:
    return lambda t: before if t < at else after


def ramp_trace(start: float, end: float, begin: float, length: float) -> Trace:
    return lambda t: start + (end - start) * min(1.0, max(0.0, (t - begin) / length))


def burst_trace(base: float, peak: float, at: float, length: float) -> Trace:
    return lambda t: peak if at <= t < at + length else base


def square_trace(low: float, high: float, period: float) -> Trace:
    return lambda t: high if (t % period) < period / 2 else low


if __name__ == "__main__":
    from paged_operator.policy.autoscaler import AutoscalingPolicySpec
    from paged_operator.policy.budget_tuner import BudgetSpec

    spec = ControllerSpec(
        autoscaling=AutoscalingPolicySpec(max_replicas=12, panic_window_s=20),
        budget=BudgetSpec(min_num_seqs=8, max_num_seqs=128),
    )
    model = FleetModel()
    per_pod = model.capacity_at(0.75)
    cases = {
        "step 2→12 req/s": (step_trace(2, 12, 300), 12, Budgets(36, 2048)),
        "ramp 2→16 req/s over 20 min": (ramp_trace(2, 16, 300, 1200), 16, Budgets(36, 2048)),
        "burst 2→30 req/s for 60 s": (burst_trace(2, 30, 300, 60), 30, Budgets(36, 2048)),
        "square 4/10 req/s, 120 s period": (square_trace(4, 10, 120), 10, Budgets(36, 2048)),
        "step 2→12, thrashing budget 128": (step_trace(2, 12, 300), 12, Budgets(128, 2048)),
        "8 req/s, budget 8 too small": (lambda t: 8.0, 8, Budgets(8, 2048)),
    }
    columns = (
        "trace | need | max replicas | final | reversals | t to need | panic ticks | budget changes | max_num_seqs"
    )
    print(f"| {columns} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (trace, peak, budgets) in cases.items():
        r = simulate(spec, trace, duration_s=3000, replicas=1 if "budget 8" not in name else 2, budgets=budgets)
        need = math.ceil(peak / per_pod)
        reached = next((t.time for t in r.ticks if t.replicas >= need), math.nan)
        last = r.ticks[-1]
        print(
            f"| {name} | {need} | {max(r.replicas())} | {last.replicas} | {r.reversals()} | {reached:.0f} s "
            f"| {sum(t.panic for t in r.ticks)} | {sum(t.action is Action.TUNE for t in r.ticks)} "
            f"| {last.budgets.max_num_seqs if last.budgets else '-'} |"
        )
