"""kopf handlers: thin glue between the API server, the engine pods and the pure policies.

* ``reconcile`` (create / spec update / resume): applies the children with server-side apply, moves the
  replica count into the (new) bounds, and writes the status it can know without metrics.
* ``control_loop`` (a daemon per ModelDeployment, every ``autoscaling.intervalSeconds``): lists the engine
  pods, probes and scrapes the serving ones, runs ``controller_logic.decide`` and carries out its plan:
  replicas, budgets (ConfigMap and admin API), status, Events.

Both write the status and the replica count through ``status_writer`` (optimistic concurrency): neither
overwrites what the other wrote since it read the object, ``observedGeneration`` never goes backwards, and
reconcile starts from the Deployment's live count, never from a possibly stale ``status.desiredReplicas``.

Errors: an object the API types refuse is a permanent error (reported in the ``Ready`` condition and an
Event; kopf does not retry it). API and network failures are temporary: ``reconcile`` is retried with
exponential backoff, the daemon logs the failure and tries again at its next interval; decisions skipped
because the API server was unavailable are reported once it answers (``api_outage``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import httpx
import kopf
from paged_platform.api import GROUP, PLURAL, VERSION, Decision, ModelDeployment, ModelDeploymentStatus
from pydantic import ValidationError

from paged_operator import admin_token, operator_metrics
from paged_operator.clients import router_demand
from paged_operator.clients.child_reads import ApiReads, ChildReads, IndexReads
from paged_operator.clients.engine_admin import EngineAdmin, EnginePod, engine_pod
from paged_operator.clients.kube import REPLICAS_FIELD_MANAGER, ApiError, KubeApi, NotLeading, object_path
from paged_operator.clients.metrics_source import PodScraper
from paged_operator.policy import budget_tuner
from paged_operator.policy import memory as controller_memory
from paged_operator.policy.budget_tuner import Budgets
from paged_operator.policy.config import controller_spec, starting_budgets
from paged_operator.policy.controller import ControllerSpec, ControllerState, Observation, Plan, decide
from paged_operator.policy.scale_to_zero import RouterDemand
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_operator.status import api_outage
from paged_operator.status import builder as status_builder
from paged_operator.status import model_ready as model_status
from paged_operator.status.writer import WriteConflict, advance_generation, read_status, set_replicas, update_status

log = logging.getLogger(__name__)
ANNOTATION_PREFIX = "operator.paged.dev"
#: How often a fleet at zero asks its routers whether they hold a request (the wake-up latency it adds).
ZERO_POLL_S = 1.0
MAX_BACKOFF_S = 60.0


@dataclass
class Options:
    """Operator-wide settings from the command line."""

    scrape_timeout_s: float = 2.0
    watch_timeout_s: int = 300
    request_timeout_s: float = 30.0
    pending_timeout_s: float = 120.0
    clusterwide: bool = True
    token_key: bytes | None = None  # derives the engines' admin tokens (``admin_token``)


@dataclass
class Shared:
    """State shared by all handlers (kopf gives each object a shallow copy of the operator's memo)."""

    options: Options = field(default_factory=Options)
    connection: kopf.ConnectionInfo | None = None
    clock: Callable[[], float] = time.time  # the decisions' time (wall clock: it is kept in the status)
    leading: Callable[[], bool] = field(default=lambda: True)  # leader election's fence (``leader``)
    _kube: KubeApi | None = None
    _http: httpx.AsyncClient | None = None

    @property
    def kube(self) -> KubeApi:
        if self._kube is None:
            if self.connection is None:
                raise kopf.TemporaryError("not logged in to the API server yet", delay=1)
            self._kube = KubeApi.from_connection(
                self.connection, timeout_s=self.options.request_timeout_s, fence=lambda: self.leading()
            )
        return self._kube

    @property
    def http(self) -> httpx.AsyncClient:
        """The client for engine pods (plain HTTP, no API-server credentials)."""
        if self._http is None:
            self._http = httpx.AsyncClient(limits=httpx.Limits(max_connections=64))
        return self._http

    @property
    def token_key(self) -> bytes:
        if self.options.token_key is None:
            raise kopf.PermanentError("the operator was started without its token key (--token-key-file)")
        return self.options.token_key

    async def aclose(self) -> None:
        for client in (self._kube, self._http):
            if client is not None:
                await client.aclose()


def _shared(memo: Any) -> Shared:
    shared = getattr(memo, "shared", None)
    if not isinstance(shared, Shared):
        raise kopf.PermanentError("the operator was started without its shared state (use paged-operator run)")
    return shared


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    options = _shared(memo).options
    # The CRD's status schema is closed (kopf could not keep its progress there): annotations instead.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=ANNOTATION_PREFIX)
    settings.posting.level = logging.WARNING  # our own Events say what happened; kopf adds only warnings
    settings.watching.server_timeout = options.watch_timeout_s
    settings.watching.client_timeout = options.watch_timeout_s + 10
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = options.request_timeout_s
    settings.networking.connect_timeout = 10
    settings.networking.error_backoffs = api_outage.RetryForever()  # a watch that gives up never comes back
    # Watching named namespaces needs no cluster-wide namespace listing (which a namespaced Role forbids).
    settings.scanning.disabled = not options.clusterwide


@kopf.on.login()
def login(memo: Any, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own kubeconfig / in-cluster loaders; the operator's HTTP client reuses what they found."""
    info = kopf.login_with_kubeconfig(**kwargs) or kopf.login_with_service_account(**kwargs)
    _shared(memo).connection = info
    return info


@kopf.on.cleanup()
async def close_clients(memo: Any, **_: Any) -> None:
    await _shared(memo).aclose()


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _parse(body: Mapping[str, Any]) -> ModelDeployment:
    obj = {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}
    obj["metadata"] = {k: v for k, v in dict(body["metadata"]).items() if k != "managedFields"}
    return ModelDeployment.from_wire(obj)


def _backoff(retry: int) -> float:
    return min(MAX_BACKOFF_S, 2.0 ** max(0, retry))


def desired_replicas(md: ModelDeployment, live: int | None, *, owned: bool, recorded: int | None) -> int:
    """The count the operator keeps, moved into the (possibly new) bounds.

    ``live`` is the Deployment's count, ``owned`` whether the operator wrote it last (``owns_replicas``),
    ``recorded`` the status' ``desiredReplicas`` (None before the first reconcile). The live count when the
    operator owns it: it is the autoscaler's latest write, which a status read seconds ago may not show
    yet. Otherwise (someone else scaled the Deployment, or it was just created and defaulted to 1) the
    recorded count, or ``replicas.min`` for a new object or with autoscaling off (a fixed count).
    """
    bounds = md.spec.replicas
    base = live if owned else recorded
    if not md.spec.autoscaling.enabled or base is None:
        return bounds.min
    return min(bounds.max, max(bounds.min, base))


def _recorded(body: Mapping[str, Any]) -> int | None:
    status = read_status(body)
    return status.desired_replicas if status.observed_generation is not None else None


def replicas_owner(deployment: Mapping[str, Any]) -> str | None:
    """The field manager that set ``spec.replicas`` of this Deployment last (None: nobody, it was defaulted)."""
    for entry in (deployment.get("metadata") or {}).get("managedFields") or []:
        if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {}):
            return entry.get("manager")
    return None


def scale_subresource_writer(body: Mapping[str, Any]) -> str | None:
    """Who set ``spec.replicas.min`` of this ModelDeployment through its ``scale`` subresource, if that write still
    stands (``kubectl scale``, an HPA or KEDA targeting the ModelDeployment); None when a plain spec write set it.

    The scale subresource is the fleet's fixed count: ``min``, which is the count while autoscaling is off. With
    autoscaling on, ``min`` is only the autoscaler's floor, so a scaler reading it back as the current count (an
    HPA does) acts on a wrong number: the control loop reports that (``ScalingLimited=True/ExternalScaler``).
    """
    for entry in (body.get("metadata") or {}).get("managedFields") or []:
        replicas = ((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:replicas") or {}
        if entry.get("subresource") == "scale" and "f:min" in replicas:
            return str(entry.get("manager") or "an unnamed client")
    return None


def owns_replicas(deployment: Mapping[str, Any]) -> bool:
    """Whether the operator's replica field manager has set ``spec.replicas`` of this Deployment last."""
    return replicas_owner(deployment) == REPLICAS_FIELD_MANAGER


def scaled_externally(md: ModelDeployment, deployment: Mapping[str, Any]) -> bool:
    """Autoscaling is off and someone else (an HPA or KEDA on the engine Deployment, ``kubectl scale
    deployment``) has set the count: it is theirs, and the operator no longer writes it.

    With autoscaling on, the operator is the count's only writer and sets a foreign count back.
    """
    owner = replicas_owner(deployment)
    return not md.spec.autoscaling.enabled and owner not in (None, REPLICAS_FIELD_MANAGER)


async def _reject(kube: KubeApi, body: Mapping[str, Any], exc: ValidationError) -> None:
    message = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False))

    def invalid(status: ModelDeploymentStatus, _: Mapping[str, Any]) -> None:
        status.set_condition("Ready", "False", "InvalidSpec", message[:32768], now=_now())

    await update_status(kube, body, invalid)
    await kube.post_event(body, reason="InvalidSpec", message=message, warning=True)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@kopf.on.resume(GROUP, VERSION, PLURAL)
async def reconcile(body: kopf.Body, memo: Any, retry: int, **_: Any) -> None:
    shared = _shared(memo)
    kube = shared.kube
    with operator_metrics.timed("reconcile"):
        try:
            md = _parse(body)
        except ValidationError as exc:
            await _reject(kube, body, exc)
            raise kopf.PermanentError(f"invalid ModelDeployment: {exc.error_count()} error(s)") from None
        try:
            await apply_children(kube, md, dict(body), shared.token_key)
        except ApiError as exc:
            if exc.code == 422:  # the API server refused a child we built: retrying cannot help
                await kube.post_event(body, reason="ApplyRefused", message=str(exc), warning=True)
                raise kopf.PermanentError(str(exc)) from exc
            delay = _backoff(retry)
            await _warn(kube, body, "ReconcileFailed", f"{exc} (retrying in {delay:g} s)")
            raise kopf.TemporaryError(str(exc), delay=delay) from exc
        except httpx.HTTPError as exc:
            raise kopf.TemporaryError(f"API server unreachable: {exc}", delay=_backoff(retry)) from exc
        except (WriteConflict, NotLeading) as exc:
            raise kopf.TemporaryError(str(exc), delay=_backoff(retry)) from exc


async def _warn(kube: KubeApi, body: Mapping[str, Any], reason: str, message: str) -> None:
    """A Warning Event, best effort: failing to report a failure must not hide the failure itself."""
    try:
        await kube.post_event(body, reason=reason, message=message, warning=True)
    except (ApiError, httpx.HTTPError, NotLeading) as exc:
        log.warning("could not post event %s: %s", reason, exc)


async def apply_children(kube: KubeApi, md: ModelDeployment, body: Mapping[str, Any], token_key: bytes) -> None:
    """Apply every child (idempotent), set the wanted replica count and write the status known without metrics."""
    meta = body["metadata"]
    uid, namespace = meta["uid"], meta["namespace"]
    await kube.create_if_absent(children.admin_secret(md, uid, admin_token.derive(token_key, uid)))
    current_cm = await kube.get_optional(object_path("ConfigMap", namespace, children.config_map_name(md)))
    budgets = children.config_map_budgets(md, current_cm)
    await kube.apply(children.config_map(md, uid, budgets))
    await kube.apply(children.service(md, uid))
    await kube.apply(children.pod_disruption_budget(md, uid))
    deployment = await kube.apply(children.deployment(md, uid))
    await apply_router(kube, md, uid)
    owned, recorded = owns_replicas(deployment), _recorded(body)
    if not scaled_externally(md, deployment):
        # A compare-and-swap from the live count: a scaling decision the control loop made since is kept.
        _, deployment = await set_replicas(
            kube,
            md,
            deployment,
            lambda live: desired_replicas(md, live, owned=owned, recorded=recorded),
            take_ownership=not owned,
        )
    desired = (deployment.get("spec") or {}).get("replicas", 0)

    generation = meta.get("generation")
    if read_status(body).observed_generation != generation:
        await kube.post_event(
            body,
            reason="Applied",
            message=f"applied Deployment, Service, ConfigMap and PodDisruptionBudget for generation {generation}"
            f" ({desired} replicas, budgets {budgets.max_num_seqs}/{budgets.max_num_batched_tokens})",
        )
    now = _now()
    dep_status = deployment.get("status") or {}
    progressing = status_builder.progressing_condition(deployment, desired)

    def applied(status: ModelDeploymentStatus, _: Mapping[str, Any]) -> None:
        if generation is not None and (status.observed_generation or 0) > generation:
            return  # a reconcile of a newer generation already wrote: nothing older to add
        advance_generation(status, generation)
        status.desired_replicas = desired
        status.selector = children.selector_string(md)
        status.endpoint = children.endpoint(md)
        status.model = md.spec.model.describe()
        status.adapters = status_builder.adapter_statuses(md)
        status.budget = status.budget or status_builder.budget_state(budgets)
        status.replicas = dep_status.get("replicas", 0)
        status.ready_replicas = dep_status.get("readyReplicas", 0)
        _set(status, "Progressing", progressing, now, generation)
        ready = status_builder.ready_condition(status.ready_replicas, desired, md.spec.replicas.min)
        _set(status, "Ready", ready, now, generation)

    written = await update_status(kube, body, applied)
    operator_metrics.observe_fleet(namespace, md.metadata.name, md.spec, desired, written.ready_replicas)


async def apply_router(kube: KubeApi, md: ModelDeployment, uid: str) -> None:
    """The router's children while ``spec.router.enabled``; once disabled, deleted (looked up first, so a
    ModelDeployment that never had a router costs one GET)."""
    namespace, name = md.metadata.namespace or "", children.router_name(md)
    if md.spec.router.enabled:
        role = os.environ.get(router_children.CLUSTER_ROLE_ENV, router_children.DEFAULT_CLUSTER_ROLE)
        for obj in router_children.router_children(md, uid, role):
            await kube.apply(obj)
    elif await kube.get_optional(object_path("Deployment", namespace, name)) is not None:
        for kind in reversed(router_children.ROUTER_KINDS):
            await kube.delete_if_present(kind, namespace, name)


def _set(
    status: ModelDeploymentStatus, type_: str, value: status_builder.ConditionValue, now: datetime, gen: int | None
) -> None:
    status.set_condition(type_, value.status, value.reason, value.message, now=now, observed_generation=gen)


def _pods_why(failures: Mapping[str, str]) -> str:
    return "; ".join(f"{pod}: {why}" for pod, why in sorted(failures.items()))


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def forget(body: kopf.Body, **_: Any) -> None:
    """Children go with their owner (garbage collection); only the operator's own gauge is left to drop."""
    operator_metrics.forget(body["metadata"]["namespace"], body["metadata"]["name"])


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10)
async def control_loop(body: kopf.Body, memo: Any, stopped: kopf.DaemonStopped, logger: Any, **kwargs: Any) -> None:
    """Decide every ``autoscaling.intervalSeconds``; the policies' state lives here, one loop per object.

    The children are read from kopf's watches when they are on (``child_reads``), else from the API server."""
    shared = _shared(memo)
    loop = ControlLoop(shared, reads=IndexReads.from_handler_kwargs(kwargs))
    while not stopped:
        snapshot = dict(body)  # kopf keeps ``body`` current; one consistent copy per decision
        interval = 15.0
        loop.at_zero = False  # set again by a decision that leaves the fleet at zero
        try:
            md = _parse(snapshot)
            interval = float(md.spec.autoscaling.interval_seconds)
            with operator_metrics.timed("control_loop"):
                await loop.step(md, snapshot, interval, logger)
        except ValidationError:
            pass  # reported by ``reconcile``; nothing to decide on
        if loop.at_zero:
            await loop.pause(md, stopped, interval)
        else:
            await stopped.wait(interval)


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
            self.outage = api_outage.skipped(self.outage, _now(), exc)
            log.warning("%s/%s: decision skipped, retrying in %g s: %s", md.metadata.namespace, md.metadata.name,
                        interval, why)  # fmt: skip

    async def tick(self, md: ModelDeployment, body: Mapping[str, Any]) -> None:
        kube = self.shared.kube
        namespace, name = md.metadata.namespace or "", md.metadata.name
        uid = body["metadata"]["uid"]
        reads = self.reads or ApiReads(kube)
        deployment = await reads.deployment(namespace, children.deployment_name(md))
        if deployment is None:
            return  # reconcile creates it
        cm = await reads.config_map(namespace, children.config_map_name(md))
        budgets = children.budgets_from_config_map((cm or {}).get("data")) or starting_budgets(md.spec)
        spec = controller_spec(md.spec)
        state = self._state_for(spec, budgets, read_status(body).controller_memory)

        pods = await reads.pods(namespace, name)
        alive = [p for p in pods if not status_builder.pod_is_terminating(p)]
        kube_ready = [p for p in alive if status_builder.pod_is_ready(p)]
        candidates = [engine_pod(p, children.ENGINE_PORT, children.ADMIN_PORT) for p in kube_ready]
        admin = EngineAdmin(self.shared.http, timeout_s=self.shared.options.scrape_timeout_s)
        serving, not_serving = await admin.serving(candidates)
        if not_serving != self.not_serving:
            for pod, why in sorted(not_serving.items()):
                log.info("%s/%s: pod %s is not serving yet: %s", namespace, name, pod, why)
            self.not_serving = not_serving
        scraper = PodScraper(self.shared.http, timeout_s=self.shared.options.scrape_timeout_s, clock=self.shared.clock)
        scraped = await scraper.collect([p.metrics_target for p in serving])
        if scraped.failures:
            operator_metrics.SCRAPE_FAILURES.labels(namespace).inc(len(scraped.failures))
            log.warning("%s/%s: metrics scrape failed: %s", namespace, name, _pods_why(scraped.failures))
        current = (deployment.get("spec") or {}).get("replicas", 0)
        stuck = status_builder.unschedulable_pods(alive, _now(), self.shared.options.pending_timeout_s)
        # Pods beyond the Deployment's count (it was just scaled down) are not capacity to plan with: they are
        # about to go; nor are pods the scheduler cannot place.
        obs = Observation(
            time=scraped.time,
            ready_pods=tuple(p.name for p in serving),
            starting=max(0, min(len(alive), current) - len(stuck) - len(serving)),
            samples=scraped.samples,
            failures=scraped.failures,
            unschedulable=stuck,
            router=await self._router_demand(reads, md) if spec.zero is not None else None,
        )
        plan, state = decide(spec, state, obs)

        now = _now()
        mine = owns_replicas(deployment)
        owned = mine and md.spec.autoscaling.enabled
        kept = desired_replicas(md, current, owned=owned, recorded=_recorded(body))

        external = scaled_externally(md, deployment)

        def choose(live: int | None) -> int | None:
            if external:
                return None  # autoscaling off and an external scaler owns the count
            if not owned:  # someone else scaled the Deployment (or autoscaling is off): the operator's count again
                return kept
            # The plan was made for ``current``: a count the operator set since (reconcile moving it into new
            # bounds) wins, and the next decision starts from it.
            return plan.replicas if live == current else None

        _, deployment = await set_replicas(kube, md, deployment, choose, take_ownership=not (mine or external))
        desired = (deployment.get("spec") or {}).get("replicas", 0)
        scale = status_builder.scale_decision(plan, current, now)
        if plan.replicas is not None and desired != plan.replicas:
            log.info("%s/%s: scaling to %s dropped: the count is %s now", namespace, name, plan.replicas, desired)
            scale = None

        in_force = budgets
        tuned = status_builder.budget_decision(plan, budgets, now)
        if plan.budgets is not None:
            await kube.apply(children.config_map(md, uid, plan.budgets))
            in_force = plan.budgets
        # Carried out: the policies go on from this decision. A decision the API server did not take leaves
        # them at the last one carried out (a tuner whose new budget never reached the ConfigMap would
        # otherwise see a budget it did not set, and start over).
        self.state = state
        target = plan.target_budgets or starting_budgets(md.spec)
        push_failed = await self._push(md, body, serving, plan, target)

        progressing = status_builder.progressing_condition(deployment, desired)
        ready = status_builder.ready_condition(len(serving), desired, md.spec.replicas.min)
        model_ready = model_status.model_ready(md, alive)
        recorded: list[Decision] = []
        scaler = scale_subresource_writer(body) if plan.scale is not None else None
        memory = controller_memory.encode(state)  # written with the decisions it led to, or not at all
        outage = api_outage.report(self.outage, now, current, budgets) if self.outage is not None else None

        def observed(status: ModelDeploymentStatus, _: Mapping[str, Any]) -> None:
            recorded.clear()  # runs again after a conflict, on the fresh status
            for decision in (scale, tuned):
                if decision is not None and not status_builder.is_repeat(status, decision):
                    status.record_decision(decision)
                    recorded.append(decision)
            status.desired_replicas = desired
            status.replicas = len(alive)
            status.ready_replicas = len(serving)
            status.selector = children.selector_string(md)
            status.endpoint = children.endpoint(md)
            status.budget = status_builder.budget_state(in_force)
            status.controller_memory = memory
            if plan.view is not None and plan.view.reporting:
                status.metrics = status_builder.metrics_snapshot(plan.view, now)
            generation = status.observed_generation  # the fresh one: conditions never claim an older generation
            _set(status, "Progressing", progressing, now, generation)
            _set(status, "Ready", ready, now, generation)
            _set(status, "ModelReady", model_ready, now, generation)
            for cond in plan.conditions:
                if cond.type == "ScalingLimited" and scaler is not None:
                    continue  # set below: one write per decision, so its transition time stays put
                value = status_builder.ConditionValue(cond.status, cond.reason, cond.message)  # type: ignore[arg-type]
                _set(status, cond.type, value, now, generation)
            if (missed := status_builder.budget_push_condition(push_failed)) is not None:
                _set(status, "Degraded", missed, now, generation)
            if outage is not None:  # reported once; the next decision sets Degraded from the metrics again
                _set(status, "Degraded", outage, now, generation)
            if plan.scale is None:
                who = f"set by {replicas_owner(deployment)}" if external else "replicas.min"
                off = status_builder.ConditionValue("False", "AutoscalingDisabled", f"{desired} replicas ({who})")
                _set(status, "ScalingLimited", off, now, generation)
            elif scaler is not None:
                _set(status, "ScalingLimited", status_builder.external_scaler(scaler, md.spec.replicas.min), now,
                     generation)  # fmt: skip

        await update_status(kube, body, observed)
        if outage is not None:
            self.outage = None
            log.warning("%s/%s: the API server answers again: %s", namespace, name, outage.message)
            await _warn(kube, body, api_outage.REASON, outage.message)
        operator_metrics.observe_fleet(namespace, name, md.spec, desired, len(serving))
        self.at_zero = spec.zero is not None and desired == 0
        for decision in recorded:
            await self._record(body, decision, plan)

    async def _router_demand(self, reads: ChildReads, md: ModelDeployment) -> RouterDemand | None:
        """What the ModelDeployment's routers hold and received (None when none answered)."""
        pods = [p for p in await reads.router_pods(md.metadata.namespace or "", md.metadata.name)
                if status_builder.pod_is_ready(p)]  # fmt: skip
        urls = [f"{engine_pod(p, router_children.ROUTER_PORT).base_url}/metrics" for p in pods]
        return await router_demand.collect(self.shared.http, urls, timeout_s=self.shared.options.scrape_timeout_s)

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
            names = {pod for pod, have in reported.items() if have != want}
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

    async def _record(self, body: Mapping[str, Any], decision: Decision, plan: Plan) -> None:
        """Count and announce a decision the status recorded."""
        rule = plan.verdict.rule if not decision.dry_run else "dry-run"
        operator_metrics.DECISIONS.labels(decision.kind, rule, str(decision.dry_run).lower()).inc()
        verb = {"scale": "Scaled", "budget": "BudgetChanged"}[decision.kind]
        reason = f"{verb}DryRun" if decision.dry_run else verb
        message = f"{decision.from_.describe()} -> {decision.to.describe()}: {decision.reason}"
        await self.shared.kube.post_event(body, reason=reason, message=message)
