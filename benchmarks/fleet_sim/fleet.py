"""A fleet of simulated engine pods behind a Service, sized by one autoscaler, and the record of a run.

Kubernetes as the simulation sees it: a Service spreads new requests at random over the *ready*
pods; a scale-up creates pods that serve after ``start_delay_s``; a scale-down removes pods that
are still starting first, then the newest ready ones (the ReplicaSet's order), which stop receiving
traffic and drain for ``drain_grace_s`` before whatever they still hold fails. A pod costs from its
creation to its removal (the GPU is held while the model loads and while it drains).

Every ``scaler.interval_s`` the scaler sees a ``Snapshot`` (one ``EngineSample`` per ready pod, the
ready and starting counts) and answers an ``Actuation``; new pods start with the latest budgets
(the ConfigMap), pushes change running pods at once (the admin API).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Protocol

from paged_operator.policy.fleet_view import EngineSample
from paged_platform.engine_contract.budgets import Budgets

from .engine_model import EngineModel, Pod, SimRequest
from .workload import RequestSpec


@dataclass(frozen=True)
class Snapshot:
    time: float
    replicas: int  # the Deployment's spec.replicas
    ready_pods: tuple[str, ...]
    starting: int
    samples: tuple[EngineSample, ...]


@dataclass(frozen=True)
class Actuation:
    """replicas: new count or None; budgets: the budgets new pods get; push_to: running pods that get them now."""

    replicas: int | None = None
    budgets: Budgets | None = None
    push_to: tuple[str, ...] = ()


class Scaler(Protocol):
    name: str
    interval_s: float

    def observe(self, snapshot: Snapshot) -> Actuation: ...


@dataclass(frozen=True)
class TimePoint:
    time: float
    arrivals_per_s: float
    replicas: int
    ready: int
    max_num_seqs: int


@dataclass
class RunRecord:
    requests: list[SimRequest]
    timeline: list[TimePoint] = field(default_factory=list)
    scale_events: list[tuple[float, int, int]] = field(default_factory=list)  # (time, from, to)
    pod_seconds: float = 0.0
    preemptions: int = 0
    duration_s: float = 0.0


def run(
    requests: list[RequestSpec],
    scaler: Scaler,
    *,
    duration_s: float,
    replicas: int,
    budgets: Budgets,
    model: EngineModel | None = None,
    dt: float = 0.5,
    seed: int = 0,
) -> RunRecord:
    """Serve ``requests`` for ``duration_s`` starting from ``replicas`` ready pods."""
    model = model or EngineModel()
    rng = random.Random(seed)
    names = (f"pod-{i}" for i in itertools.count())
    pods = [Pod(next(names), model, budgets, created_at=-model.start_delay_s) for _ in range(replicas)]
    draining: list[Pod] = []
    sims = [SimRequest(spec) for spec in requests]
    record = RunRecord(sims, duration_s=duration_s)
    target = budgets
    arrivals = iter(sims)
    upcoming = next(arrivals, None)
    next_decision = scaler.interval_s
    window_arrivals, window_start = 0, 0.0
    retired: list[Pod] = []
    steps = round(duration_s / dt)
    for k in range(steps):
        t0 = k * dt
        t1 = t0 + dt
        ready = [p for p in pods if p.ready(t0)]
        while upcoming is not None and upcoming.spec.arrival < t1:
            if ready:
                rng.choice(ready).enqueue(upcoming)
            else:
                upcoming.aborted = True  # no endpoint: the connection is refused
            window_arrivals += 1
            upcoming = next(arrivals, None)
        for pod in itertools.chain(pods, draining):
            pod.advance(t0, dt)
        for pod in list(draining):
            if pod.idle or t1 - (pod.draining_since or t1) >= model.drain_grace_s:
                pod.drop_all()
                draining.remove(pod)
                retired.append(pod)
                record.pod_seconds += t1 - max(pod.created_at, 0.0)
        if t1 + 1e-9 >= next_decision:
            next_decision += scaler.interval_s
            ready = [p for p in pods if p.ready(t1)]
            snapshot = Snapshot(
                time=t1,
                replicas=len(pods),
                ready_pods=tuple(p.name for p in ready),
                starting=len(pods) - len(ready),
                samples=tuple(p.sample(t1) for p in ready),
            )
            act = scaler.observe(snapshot)
            if act.budgets is not None:
                target = act.budgets
                for pod in pods:
                    if pod.name in act.push_to:
                        pod.budgets = target
            if act.replicas is not None and act.replicas != len(pods):
                record.scale_events.append((t1, len(pods), act.replicas))
                while len(pods) < act.replicas:
                    pods.append(Pod(next(names), model, target, created_at=t1))
                while len(pods) > act.replicas:
                    pod = _victim(pods, t1)
                    pods.remove(pod)
                    pod.draining_since = t1
                    _requeue_unstarted(pod, [p for p in pods if p.ready(t1)], rng)
                    draining.append(pod)
        if t1 - window_start >= 10.0 or k == steps - 1:
            record.timeline.append(
                TimePoint(
                    time=t1,
                    arrivals_per_s=window_arrivals / (t1 - window_start),
                    replicas=len(pods),
                    ready=sum(p.ready(t1) for p in pods),
                    max_num_seqs=target.max_num_seqs,
                )
            )
            window_arrivals, window_start = 0, t1
    for pod in itertools.chain(pods, draining):
        record.pod_seconds += duration_s - max(pod.created_at, 0.0)
    record.preemptions = sum(p.preemptions_total for p in itertools.chain(pods, draining, retired))
    return record


def _victim(pods: list[Pod], now: float) -> Pod:
    """The ReplicaSet removes not-ready pods first, then the newest."""
    starting = [p for p in pods if not p.ready(now)]
    return (starting or pods)[-1]


def _requeue_unstarted(pod: Pod, others: list[Pod], rng: random.Random) -> None:
    """Queued requests of a removed pod are retried by clients on other pods (their arrival time kept)."""
    if not others:
        return
    queued = [r for r in pod.waiting if r.first_token_at is None]
    pod.waiting = type(pod.waiting)(r for r in pod.waiting if r.first_token_at is not None)
    for request in queued:
        rng.choice(others).enqueue(request)
