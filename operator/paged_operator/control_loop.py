"""One ModelDeployment's decisions, each in four named stages: observe → decide → act → report.

* ``observe`` reads what a decision needs and writes nothing: the engine Deployment and the budgets' ConfigMap
  (from kopf's watches, or the API server), the engine pods, which of them serve (``/ready``), their metrics,
  and with scale to zero the routers' demand;
* ``decide`` is the pure ``policy.controller.decide``;
* ``act`` carries the plan out: the replica count (a compare-and-swap from the count the plan was made for),
  new budgets into the ConfigMap, and the budgets pushed to the engines that do not run them yet;
* ``report`` writes the status (decisions, counts, the policies' memory, conditions), then the Events and the
  operator's own metrics.

Invariants: the policies' state advances only once the API server took the decision (one it did not take leaves
them at the last one carried out); a replica that does not hold the operator's Lease writes nothing (the
``KubeApi`` fence) and pushes nothing (``_push``); a decision skipped because the API server was unavailable is
one log line, and the next decision written reports the gap once (``api_outage``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import httpx
import kopf
from paged_platform.api import Decision, ModelDeployment, ModelDeploymentStatus
from paged_platform.engine_contract.budgets import Budgets

from paged_operator import admin_token, operator_metrics
from paged_operator.clients import router_demand
from paged_operator.clients.child_reads import ApiReads, ChildReads
from paged_operator.clients.engine_admin import EngineAdmin, EnginePod, engine_pod
from paged_operator.clients.kube import ApiError, NotLeading, post_warning
from paged_operator.clients.metrics_source import MetricsSource, PodScraper, PrometheusSource, ScrapeResult
from paged_operator.policy import budget_tuner
from paged_operator.policy import memory as controller_memory
from paged_operator.policy.config import controller_spec, starting_budgets
from paged_operator.policy.controller import ControllerSpec, ControllerState, Observation, Plan, decide
from paged_operator.policy.scale_to_zero import RouterDemand
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_operator.replica_count import (
    desired_replicas,
    owns_replicas,
    recorded_count,
    replicas_owner,
    scale_subresource_writer,
    scaled_externally,
)
from paged_operator.shared import Shared
from paged_operator.status import api_outage, engine_failures
from paged_operator.status import builder as status_builder
from paged_operator.status import model_ready as model_status
from paged_operator.status.builder import ConditionValue, set_condition
from paged_operator.status.writer import WriteConflict, read_status, set_replicas, status_time, update_status

log = logging.getLogger(__name__)
#: How often a fleet at zero asks its routers whether they hold a request (the wake-up latency it adds).
ZERO_POLL_S = 1.0


@dataclass(frozen=True)
class Observed:
    """What one decision is made on.

    ``current``: the Deployment's count, the one the plan is made for; ``budgets``: those in force (the
    ConfigMap's, else the spec's starting ones); ``alive``: the engine pods not terminating; ``serving``: those
    whose engine answers ``/ready``; ``observation``: what the policies see.
    """

    deployment: Mapping[str, Any]
    current: int
    budgets: Budgets
    spec: ControllerSpec
    alive: list[Mapping[str, Any]]
    serving: list[EnginePod]
    observation: Observation


@dataclass(frozen=True)
class Carried:
    """What ``act`` got done: the Deployment as last written or read and its count, the decisions to record (None:
    not taken, or nothing new), the budgets now in force, the engines that missed the push (pod → why), and the
    policies' state the loop goes on from."""

    deployment: Mapping[str, Any]
    desired: int
    scale: Decision | None
    tuned: Decision | None
    in_force: Budgets
    push_failed: dict[str, str]
    state: ControllerState


@dataclass
class ControlLoop:
    """One ModelDeployment's decisions: the policies' state and what was last carried out."""

    shared: Shared
    reads: ChildReads | None = None  # None: GET / LIST from the API server
    state: ControllerState | None = None
    at_zero: bool = False  # scaled to zero, waiting for a router to hold a request
    not_serving: dict[str, str] = field(default_factory=dict)
    outage: api_outage.Outage | None = None  # decisions skipped since the API server last answered

    def _state_for(self, spec: ControllerSpec, budgets: Budgets, memory: str | None = None) -> ControllerState:
        """Keep the policies' windows across spec changes; (re)start the tuner when it is switched on or when its
        budgets no longer match the ConfigMap's (someone else set them: the spec's static budget changed).

        The first decision of this loop (operator start, or leadership taken over) starts from the memory the
        last one left in the status (``controller_memory``), not from scratch."""
        if self.state is None:
            return controller_memory.restore(spec, budgets, memory)
        state = self.state
        if spec.budget is None:
            return replace(state, tuner=None)
        if state.tuner is None or state.tuner.budgets != spec.budget.clamp(budgets):
            return replace(state, tuner=budget_tuner.initial_state(spec.budget, budgets))
        return state

    async def step(
        self, md: ModelDeployment, body: Mapping[str, Any], interval: float, logger: logging.LoggerAdapter[Any]
    ) -> None:
        """One decision (``tick``); a failure is one log line. ``logger`` is kopf's for the object, which also
        posts a warning as an Event; a failure because the API server was unavailable is logged here only (no
        Event could be posted) and counted towards the report the next decision written makes (``api_outage``)."""
        try:
            await self.tick(md, body)
        except (ApiError, httpx.HTTPError, kopf.TemporaryError, WriteConflict, NotLeading) as exc:
            why = str(exc) or type(exc).__name__
            if not api_outage.is_unavailable(exc):
                logger.warning(f"decision skipped, retrying in {interval:g} s: {why}")
                return
            self.outage = api_outage.skipped(self.outage, status_time(), exc)
            log.warning("%s/%s: decision skipped, retrying in %g s: %s", md.metadata.namespace, md.metadata.name,
                        interval, why)  # fmt: skip

    async def tick(self, md: ModelDeployment, body: Mapping[str, Any]) -> None:
        """One decision: observe → decide → act → report."""
        seen = await self.observe(md)
        if seen is None:
            return  # reconcile creates the Deployment
        state = self._state_for(seen.spec, seen.budgets, read_status(body).controller_memory)
        plan, state = decide(seen.spec, state, seen.observation)
        now = status_time()
        carried = await self.act(md, body, seen, plan, state, now)
        await self.report(md, body, seen, plan, carried, now)

    # observe

    async def observe(self, md: ModelDeployment) -> Observed | None:
        """What the decision needs, read and probed, nothing written; None while the Deployment does not exist."""
        reads = self.reads or ApiReads(self.shared.kube)
        namespace, name = md.metadata.namespace or "", md.metadata.name
        deployment = await reads.deployment(namespace, children.deployment_name(md))
        if deployment is None:
            return None
        cm = await reads.config_map(namespace, children.config_map_name(md))
        budgets = children.budgets_from_config_map((cm or {}).get("data")) or starting_budgets(md.spec)
        spec = controller_spec(md.spec)
        pods = await reads.pods(namespace, name)
        alive = [p for p in pods if not status_builder.pod_is_terminating(p)]
        serving = await self._serving(md, alive)
        scraped = await self._scrape(md, serving)
        current = (deployment.get("spec") or {}).get("replicas", 0)
        stuck = status_builder.unschedulable_pods(alive, status_time(), self.shared.options.pending_timeout_s)
        # Pods beyond the Deployment's count (it was just scaled down) are not capacity to plan with: they are
        # about to go; nor are pods the scheduler cannot place.
        observation = Observation(
            time=scraped.time,
            ready_pods=tuple(p.name for p in serving),
            starting=max(0, min(len(alive), current) - len(stuck) - len(serving)),
            samples=scraped.samples,
            failures=scraped.failures,
            unschedulable=stuck,
            router=await self._router_demand(reads, md) if spec.zero is not None else None,
        )
        return Observed(deployment, current, budgets, spec, alive, serving, observation)

    async def _serving(self, md: ModelDeployment, alive: list[Mapping[str, Any]]) -> list[EnginePod]:
        """The Kubernetes-ready pods whose engine answers ``/ready``; why the others do not is logged on a change."""
        kube_ready = [p for p in alive if status_builder.pod_is_ready(p)]
        candidates = [engine_pod(p, children.ENGINE_PORT, children.ADMIN_PORT) for p in kube_ready]
        admin = EngineAdmin(self.shared.http, timeout_s=self.shared.options.scrape_timeout_s)
        serving, not_serving = await admin.serving(candidates)
        if not_serving != self.not_serving:
            for pod, why in sorted(not_serving.items()):
                log.info("%s/%s: pod %s is not serving yet: %s", md.metadata.namespace, md.metadata.name, pod, why)
            self.not_serving = not_serving
        return serving

    async def _scrape(self, md: ModelDeployment, serving: list[EnginePod]) -> ScrapeResult:
        """The serving engines' metrics; the pods that gave none are counted and logged (the decision goes on)."""
        namespace = md.metadata.namespace or ""
        scraped = await self._metrics_source(namespace).collect([p.metrics_target for p in serving])
        if scraped.failures:
            operator_metrics.SCRAPE_FAILURES.labels(namespace).inc(len(scraped.failures))
            log.warning("%s/%s: metrics scrape failed: %s", namespace, md.metadata.name, _pods_why(scraped.failures))
        return scraped

    def _metrics_source(self, namespace: str) -> MetricsSource:
        """Each serving pod's ``/metrics``; with ``--prometheus-url`` the Prometheus server that scrapes them, which
        a large fleet's pods are then spared (their series picked by the ``namespace`` and ``pod`` labels that a
        PodMonitor or ServiceMonitor attaches)."""
        options, http, clock = self.shared.options, self.shared.http, self.shared.clock
        if options.prometheus_url is None:
            return PodScraper(http, timeout_s=options.scrape_timeout_s, clock=clock)
        labels = {"namespace": namespace}
        return PrometheusSource(
            http, options.prometheus_url, labels=labels, timeout_s=options.prometheus_timeout_s, clock=clock
        )

    async def _router_demand(self, reads: ChildReads, md: ModelDeployment) -> RouterDemand | None:
        """What the ModelDeployment's routers hold and received (None when none answered)."""
        pods = [p for p in await reads.router_pods(md.metadata.namespace or "", md.metadata.name)
                if status_builder.pod_is_ready(p)]  # fmt: skip
        urls = [f"{engine_pod(p, router_children.ROUTER_PORT).base_url}/metrics" for p in pods]
        return await router_demand.collect(self.shared.http, urls, timeout_s=self.shared.options.scrape_timeout_s)

    # act

    async def act(
        self,
        md: ModelDeployment,
        body: Mapping[str, Any],
        seen: Observed,
        plan: Plan,
        state: ControllerState,
        now: datetime,
    ) -> Carried:
        """Carry the plan out: the replica count, the ConfigMap's budgets, then (the decision taken, the policies
        go on from ``state``) the budgets pushed to the engines."""
        deployment, desired, scale = await self._scale(md, body, seen, plan, now)
        in_force = seen.budgets
        tuned = status_builder.budget_decision(plan, seen.budgets, now)
        if plan.budgets is not None:
            await self.shared.kube.apply(children.config_map(md, body["metadata"]["uid"], plan.budgets))
            in_force = plan.budgets
        # Carried out: the policies go on from this decision. A decision the API server did not take leaves
        # them at the last one carried out (a tuner whose new budget never reached the ConfigMap would
        # otherwise see a budget it did not set, and start over).
        self.state = state
        push_failed = await self._push(md, body, seen.serving, plan, push_target(md, plan))
        return Carried(deployment, desired, scale, tuned, in_force, push_failed, state)

    async def _scale(
        self, md: ModelDeployment, body: Mapping[str, Any], seen: Observed, plan: Plan, now: datetime
    ) -> tuple[Mapping[str, Any], int, Decision | None]:
        """Set the count (a compare-and-swap); returns the latest Deployment, its count, and the scale decision to
        record (None when the write was dropped because someone moved the count meanwhile)."""
        current = seen.current
        mine = owns_replicas(seen.deployment)
        owned = mine and md.spec.autoscaling.enabled
        kept = desired_replicas(md, current, owned=owned, recorded=recorded_count(body))
        external = scaled_externally(md, seen.deployment)

        def choose(live: int | None) -> int | None:
            if external:
                return None  # autoscaling off and an external scaler owns the count
            if not owned:  # someone else scaled the Deployment (or autoscaling is off): the operator's count again
                return kept
            # The plan was made for ``current``: a count the operator set since (reconcile moving it into new
            # bounds) wins, and the next decision starts from it.
            return plan.replicas if live == current else None

        take = not (mine or external)
        _, deployment = await set_replicas(self.shared.kube, md, seen.deployment, choose, take_ownership=take)
        desired = (deployment.get("spec") or {}).get("replicas", 0)
        scale = status_builder.scale_decision(plan, current, now)
        if plan.replicas is not None and desired != plan.replicas:
            log.info("%s/%s: scaling to %s dropped: the count is %s now", md.metadata.namespace, md.metadata.name,
                     plan.replicas, desired)  # fmt: skip
            scale = None
        return deployment, desired, scale

    async def _push(
        self, md: ModelDeployment, body: Mapping[str, Any], serving: list[EnginePod], plan: Plan, target: Budgets
    ) -> dict[str, str]:
        """Budgets to the engines that do not run them yet (all of them after a change); returns the pods that
        missed the push (pod → why)."""
        if plan.target_budgets is not None:
            names = set(plan.push_budgets_to)
        else:  # static budget: the pods that report another one (the spec's budget was changed)
            reported = plan.view.budgets if plan.view is not None else {}
            want = (target.max_num_seqs, target.max_num_batched_tokens)
            # a pod that does not export its budgets is not known to differ: it is not pushed every decision
            names = {pod for pod, have in reported.items() if have not in (want, (None, None))}
        pods = [p for p in serving if p.name in names]
        if not pods:
            return {}
        if not self.shared.leading():
            raise NotLeading("budget push not sent: this replica does not hold the operator's Lease")
        kube = self.shared.kube
        token = admin_token.derive(self.shared.token_key, body["metadata"]["uid"])  # no Secret read: see admin_token
        admin = EngineAdmin(self.shared.http, timeout_s=self.shared.options.scrape_timeout_s)
        failed = await admin.push_budgets(pods, target, token)
        if failed:
            detail = _pods_why(failed)
            log.warning("%s/%s: budget push failed: %s", md.metadata.namespace, md.metadata.name, detail)
            await kube.post_event(body, reason="BudgetPushFailed", message=detail, warning=True)
        return failed

    # report

    async def report(
        self, md: ModelDeployment, body: Mapping[str, Any], seen: Observed, plan: Plan, carried: Carried, now: datetime
    ) -> None:
        """The status of this decision, then what announces it: the outage report's Event (once), the operator's
        fleet gauges, and an Event per decision the status recorded."""
        namespace, name = md.metadata.namespace or "", md.metadata.name
        outage = api_outage.report(self.outage, now, seen.current, seen.budgets) if self.outage is not None else None
        before = _ready_reason(body)
        recorded = await self._write_status(md, body, seen, plan, carried, outage, now)
        ready = ready_condition(md, seen, carried.desired)
        if ready.reason in engine_failures.FAILURE_REASONS and ready.reason != before:
            log.warning("%s/%s: %s: %s", namespace, name, ready.reason, ready.message)
            await post_warning(self.shared.kube, body, ready.reason, ready.message)
        if outage is not None:
            self.outage = None
            log.warning("%s/%s: the API server answers again: %s", namespace, name, outage.message)
            await post_warning(self.shared.kube, body, api_outage.REASON, outage.message)
        operator_metrics.observe_fleet(namespace, name, md.spec, carried.desired, len(seen.serving))
        self.at_zero = seen.spec.zero is not None and carried.desired == 0
        for decision in recorded:
            await self._record(body, decision, plan)

    async def _write_status(
        self,
        md: ModelDeployment,
        body: Mapping[str, Any],
        seen: Observed,
        plan: Plan,
        carried: Carried,
        outage: ConditionValue | None,
        now: datetime,
    ) -> list[Decision]:
        """Write the status; returns the decisions it recorded (those the status did not hold yet)."""
        conditions = _conditions(md, body, seen, plan, carried, outage)
        memory = controller_memory.encode(carried.state)  # written with the decisions it led to, or not at all
        recorded: list[Decision] = []

        def observed(status: ModelDeploymentStatus, _: Mapping[str, Any]) -> None:
            recorded.clear()  # runs again after a conflict, on the fresh status
            for decision in (carried.scale, carried.tuned):
                if decision is not None and not status_builder.is_repeat(status, decision):
                    status.record_decision(decision)
                    recorded.append(decision)
            status.desired_replicas = carried.desired
            status.replicas = len(seen.alive)
            status.ready_replicas = len(seen.serving)
            status.selector = children.selector_string(md)
            status.endpoint = children.endpoint(md)
            status.budget = status_builder.budget_state(carried.in_force)
            status.controller_memory = memory
            if plan.view is not None and plan.view.reporting:
                status.metrics = status_builder.metrics_snapshot(plan.view, now)
            generation = status.observed_generation  # the fresh one: conditions never claim an older generation
            for type_, value in conditions:
                set_condition(status, type_, value, now, generation)

        await update_status(self.shared.kube, body, observed)
        return recorded

    async def _record(self, body: Mapping[str, Any], decision: Decision, plan: Plan) -> None:
        """Count and announce a decision the status recorded."""
        rule = plan.verdict.rule if not decision.dry_run else "dry-run"
        operator_metrics.DECISIONS.labels(decision.kind, rule, str(decision.dry_run).lower()).inc()
        verb = {"scale": "Scaled", "budget": "BudgetChanged"}[decision.kind]
        reason = f"{verb}DryRun" if decision.dry_run else verb
        message = f"{decision.from_.describe()} -> {decision.to.describe()}: {decision.reason}"
        await self.shared.kube.post_event(body, reason=reason, message=message)

    async def pause(self, md: ModelDeployment, stopped: kopf.DaemonStopped, interval: float) -> None:
        """Until the next decision: ``interval``, cut short at zero replicas as soon as a router holds a request
        (it is asked every ``ZERO_POLL_S``; a plain HTTP call to the router, nothing to the API server)."""
        if not self.at_zero:
            await stopped.wait(interval)
            return
        reads = self.reads or ApiReads(self.shared.kube)
        deadline = time.monotonic() + interval
        while not stopped and time.monotonic() < deadline:
            await stopped.wait(min(ZERO_POLL_S, max(0.0, deadline - time.monotonic())))
            demand = await self._router_demand(reads, md)
            if demand is not None and demand.held > 0:
                return


def _conditions(
    md: ModelDeployment,
    body: Mapping[str, Any],
    seen: Observed,
    plan: Plan,
    carried: Carried,
    outage: ConditionValue | None,
) -> list[tuple[str, ConditionValue]]:
    """The conditions a decision sets, in the order they are set (a later one of the same type wins)."""
    desired = carried.desired
    conditions = [
        ("Progressing", status_builder.progressing_condition(carried.deployment, desired)),
        ("Ready", ready_condition(md, seen, desired)),
        ("ModelReady", model_status.model_ready(md, seen.alive)),
    ]
    scaler = scale_subresource_writer(body) if plan.scale is not None else None
    for cond in plan.conditions:
        if cond.type == "ScalingLimited" and scaler is not None:
            continue  # set below: one write per decision, so its transition time stays put
        conditions.append((cond.type, ConditionValue(cond.status, cond.reason, cond.message)))  # type: ignore[arg-type]
    if (missed := status_builder.budget_push_condition(carried.push_failed)) is not None:
        conditions.append(("Degraded", missed))
    if outage is not None:  # reported once; the next decision sets Degraded from the metrics again
        conditions.append(("Degraded", outage))
    if plan.scale is None:
        external = scaled_externally(md, seen.deployment)
        who = f"set by {replicas_owner(carried.deployment)}" if external else "replicas.min"
        off = ConditionValue("False", "AutoscalingDisabled", f"{desired} replicas ({who})")
        conditions.append(("ScalingLimited", off))
    elif scaler is not None:
        conditions.append(("ScalingLimited", status_builder.external_scaler(scaler, md.spec.replicas.min)))
    return conditions


def ready_condition(md: ModelDeployment, seen: Observed, desired: int) -> ConditionValue:
    """``Ready``: enough replicas serve, or why not (a crash loop, an image, a hung load, no node) where known."""
    ready = status_builder.ready_condition(len(seen.serving), desired, md.spec.replicas.min)
    if ready.status == "True":
        return ready
    budget_s = md.spec.resolved_startup_timeout_s()
    return engine_failures.failing_condition(seen.alive, seen.observation.unschedulable, budget_s) or ready


def _ready_reason(body: Mapping[str, Any]) -> str | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in conditions if c.get("type") == "Ready"), None)


def _pods_why(failures: Mapping[str, str]) -> str:
    return "; ".join(f"{pod}: {why}" for pod, why in sorted(failures.items()))


def push_target(md: ModelDeployment, plan: Plan) -> Budgets:
    """The budgets the engines should run: the tuner's, else the spec's static budget within the live limits the
    engines report (a pod started before the spec raised them accepts no more until the rollout replaces it)."""
    if plan.target_budgets is not None:
        return plan.target_budgets
    static = starting_budgets(md.spec)
    limits = plan.view.budget_limits if plan.view is not None else None
    return limits.clamp(static) if limits is not None else static
