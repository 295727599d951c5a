"""The autoscalers compared in the simulation: the paged controller and three baselines, one interface.

* ``PagedScaler``: the operator's real ``controller_logic.decide`` (autoscaler, budget tuner, arbiter).
* ``HpaScaler``: a Kubernetes HPA (autoscaling/v2) on the pods' KV-cache usage. Per sync period
  (15 s) ``desired = ceil(ready × mean / target)``, nothing within the 10 % tolerance; pods without
  a sample (starting) count as 0 on a scale-up (and as on-target on a scale-down), and when that
  reverses the direction nothing is done; scale-down takes the largest recommendation of the last
  300 s; scale-up at most ``max(2 × current, current + 4)`` per period. This is the controller's
  documented algorithm, re-implemented.
* ``KedaScaler``: KEDA's Prometheus scaler as the vLLM production-stack chart configures it
  (``vllm:num_requests_waiting``, threshold 5, polling every 15 s, min 1): KEDA feeds an HPA
  external metric of type AverageValue, so ``desired = ceil(Σ waiting / 5)`` with the HPA's
  tolerance (against the current count), stabilisation and rate limits.
* ``KpaScaler``: Knative's KPA on concurrency (requests in flight per pod, as the queue-proxy counts
  them): ticks every 2 s, a 60 s stable and a 6 s panic average, ``desired = ceil(avg / (target ×
  0.7))``; panic when the panic desire reaches 2× the ready pods, then it never scales down until
  a stable window passes without panic; at most halving per tick.
* ``PresentOracle``: no policy, a reference. It reads the true arrival rate of the present from the trace's
  profile (no measurement, no noise, no detection delay), keeps ``ceil(rate / per_pod)`` pods and removes them
  at once when the rate falls; only the pods' start-up is left. What reacting perfectly to the load can reach
  at that per-pod rate: a bound for any policy that sizes for it and cannot know a burst before it starts.
  Optionally it keeps a scale-up for ``hold_after_up_s`` (a policy that must not flap) or sizes for the highest
  rate of the next ``lead_s`` (foresight, which no policy here has).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from paged_operator.policy.controller import ControllerSpec, Observation, decide, initial_state
from paged_platform.engine_contract.budgets import Budgets

from .fleet import Actuation, Snapshot
from .workload import RateProfile


class PagedScaler:
    def __init__(self, spec: ControllerSpec, budgets: Budgets, *, interval_s: float, name: str = "paged") -> None:
        self.name, self.interval_s, self.spec = name, interval_s, spec
        self.state = initial_state(spec, budgets)

    def observe(self, snapshot: Snapshot) -> Actuation:
        obs = Observation(snapshot.time, snapshot.ready_pods, snapshot.starting, snapshot.samples)
        plan, self.state = decide(self.spec, self.state, obs)
        return Actuation(plan.replicas, plan.target_budgets, plan.push_budgets_to)


@dataclass(frozen=True)
class HpaBehavior:
    """The HPA's default behaviour (autoscaling/v2)."""

    min_replicas: int
    max_replicas: int
    tolerance: float = 0.1
    scale_down_window_s: float = 300.0


class _Hpa:
    """Stabilisation, rate limits and bounds shared by the HPA and KEDA (which drives an HPA)."""

    interval_s = 15.0

    def __init__(self, behavior: HpaBehavior) -> None:
        self.behavior = behavior
        self._recommendations: deque[tuple[float, int]] = deque()

    def _settle(self, now: float, current: int, raw: int) -> int:
        b = self.behavior
        self._recommendations.append((now, raw))
        while self._recommendations[0][0] <= now - b.scale_down_window_s:
            self._recommendations.popleft()
        down = max(r for _, r in self._recommendations)
        desired = raw if raw > current else min(current, down)
        desired = min(desired, max(2 * current, current + 4))
        return min(b.max_replicas, max(b.min_replicas, desired))


class HpaScaler(_Hpa):
    def __init__(self, behavior: HpaBehavior, *, target_kv_usage: float, name: str = "hpa-kv") -> None:
        super().__init__(behavior)
        self.name, self.target = name, target_kv_usage

    def observe(self, snapshot: Snapshot) -> Actuation:
        current = snapshot.replicas
        values = [s.kv_usage for s in snapshot.samples]
        if not values:
            return Actuation()
        tol = self.behavior.tolerance
        ratio = sum(values) / len(values) / self.target
        raw = current
        if abs(ratio - 1.0) > tol:
            missing = max(0, current - len(values))
            if missing:
                filled = values + [0.0 if ratio > 1.0 else self.target] * missing
                new_ratio = sum(filled) / len(filled) / self.target
                if abs(new_ratio - 1.0) > tol and (new_ratio > 1.0) == (ratio > 1.0):
                    raw = math.ceil(new_ratio * len(filled))
            else:
                raw = math.ceil(ratio * len(values))
        return Actuation(replicas=self._settle(snapshot.time, current, raw))


class KedaScaler(_Hpa):
    def __init__(self, behavior: HpaBehavior, *, threshold: float = 5.0, name: str = "keda-queue") -> None:
        super().__init__(behavior)
        self.name, self.threshold = name, threshold

    def observe(self, snapshot: Snapshot) -> Actuation:
        current = snapshot.replicas
        waiting = sum(s.waiting for s in snapshot.samples)
        raw = current
        if abs(waiting / (self.threshold * max(1, current)) - 1.0) > self.behavior.tolerance:
            raw = math.ceil(waiting / self.threshold)
        return Actuation(replicas=self._settle(snapshot.time, current, raw))


class KpaScaler:
    interval_s = 2.0

    def __init__(
        self,
        *,
        min_replicas: int,
        max_replicas: int,
        target_concurrency: float,
        target_utilization: float = 0.7,
        stable_window_s: float = 60.0,
        panic_window_s: float = 6.0,
        panic_threshold: float = 2.0,
        max_scale_down_rate: float = 2.0,
        name: str = "kpa-concurrency",
    ) -> None:
        self.name = name
        self.min_replicas, self.max_replicas = min_replicas, max_replicas
        self.target = target_concurrency * target_utilization
        self.stable_window_s, self.panic_window_s = stable_window_s, panic_window_s
        self.panic_threshold, self.max_scale_down_rate = panic_threshold, max_scale_down_rate
        self._samples: deque[tuple[float, float]] = deque()
        self._panic_since: float | None = None
        self._max_panic_pods = 0

    def observe(self, snapshot: Snapshot) -> Actuation:
        now = snapshot.time
        self._samples.append((now, sum(s.running + s.waiting for s in snapshot.samples)))
        while self._samples[0][0] <= now - self.stable_window_s:
            self._samples.popleft()
        stable = [c for _, c in self._samples]
        panic = [c for t, c in self._samples if t > now - self.panic_window_s]
        ready = max(1, len(snapshot.ready_pods))
        floor = math.floor(ready / self.max_scale_down_rate)
        stable_pods = max(floor, math.ceil(sum(stable) / len(stable) / self.target))
        panic_pods = max(floor, math.ceil(sum(panic) / len(panic) / self.target))
        over = panic_pods / ready >= self.panic_threshold
        if over:
            self._panic_since = now
        elif self._panic_since is not None and now - self._panic_since > self.stable_window_s:
            self._panic_since, self._max_panic_pods = None, 0
        desired = stable_pods
        if self._panic_since is not None:
            self._max_panic_pods = max(self._max_panic_pods, panic_pods, snapshot.replicas)
            desired = self._max_panic_pods
        return Actuation(replicas=min(self.max_replicas, max(self.min_replicas, desired)))


class PresentOracle:
    """``ceil(rate / per_pod)`` pods within the bounds, every ``interval_s``; ``rate`` is the profile's now, or its
    highest over the next ``lead_s`` (sampled each second). A count below the current one waits until
    ``hold_after_up_s`` have passed since the last scale-up."""

    def __init__(
        self,
        profile: RateProfile,
        *,
        per_pod: float,
        min_replicas: int,
        max_replicas: int,
        interval_s: float = 2.0,
        hold_after_up_s: float = 0.0,
        lead_s: float = 0.0,
        name: str = "oracle-of-the-present",
    ) -> None:
        if not per_pod > 0:
            raise ValueError(f"per_pod must be positive, got {per_pod}")
        if hold_after_up_s < 0 or lead_s < 0:
            raise ValueError(f"hold_after_up_s and lead_s must be non-negative, got {hold_after_up_s} and {lead_s}")
        self.name, self.interval_s, self.profile, self.per_pod = name, interval_s, profile, per_pod
        self.min_replicas, self.max_replicas = min_replicas, max_replicas
        self.hold_after_up_s, self.lead_s = hold_after_up_s, lead_s
        self._last_up = -math.inf

    def observe(self, snapshot: Snapshot) -> Actuation:
        now, current = snapshot.time, snapshot.replicas
        rate = max(self.profile(now + k) for k in range(int(self.lead_s) + 1))
        need = min(self.max_replicas, max(self.min_replicas, math.ceil(rate / self.per_pod - 1e-9)))
        if need > current:
            self._last_up = now
        elif need < current and now - self._last_up < self.hold_after_up_s:
            need = current
        return Actuation(replicas=need)
