"""kopf handlers: thin glue between the API server, the engine pods and the pure policies.

* ``reconcile`` (create / spec update / resume): applies the children with server-side apply, moves the
  replica count into the (new) bounds, and writes the status it can know without metrics. On resume (every
  object, whenever the operator starts) it renders with the operator's current configuration, so an operator
  started with new default images (an upgrade) rolls the engines and routers that name none.
* ``control_loop`` (a daemon per ModelDeployment, every ``autoscaling.intervalSeconds``): runs that object's
  ``ControlLoop`` (observe → decide → act → report: replicas, budgets, status, Events).

Both write the status and the replica count through ``status.writer`` (optimistic concurrency): neither
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
from collections.abc import Mapping
from typing import Any

import httpx
import kopf
from paged_platform.api import GROUP, PLURAL, VERSION, ModelDeployment, ModelDeploymentStatus
from pydantic import ValidationError

from paged_operator import admin_token, operator_metrics
from paged_operator.clients.child_reads import IndexReads
from paged_operator.clients.kube import ApiError, KubeApi, NotLeading, object_path, post_warning
from paged_operator.control_loop import ControlLoop
from paged_operator.policy import admission
from paged_operator.render import children
from paged_operator.render import router as router_children
from paged_operator.render.all_children import all_children
from paged_operator.render.settings import RenderSettings
from paged_operator.replica_count import desired_replicas, owns_replicas, recorded_count, scaled_externally
from paged_operator.shared import Shared
from paged_operator.status import api_outage
from paged_operator.status import builder as status_builder
from paged_operator.status.builder import set_condition
from paged_operator.status.writer import (
    WriteConflict,
    advance_generation,
    read_status,
    set_replicas,
    status_time,
    update_status,
)

log = logging.getLogger(__name__)
ANNOTATION_PREFIX = "operator.paged.dev"
MAX_BACKOFF_S = 60.0


def shared_state(memo: Any) -> Shared:
    """The operator's shared state, which ``paged-operator run`` puts into kopf's memo."""
    shared = getattr(memo, "shared", None)
    if not isinstance(shared, Shared):
        raise kopf.PermanentError("the operator was started without its shared state (use paged-operator run)")
    return shared


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    options = shared_state(memo).options
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
    shared_state(memo).connection = info
    return info


@kopf.on.cleanup()
async def close_clients(memo: Any, **_: Any) -> None:
    await shared_state(memo).aclose()


def parse(body: Mapping[str, Any]) -> ModelDeployment:
    """The ModelDeployment of a watched ``body`` (kopf's bookkeeping and managedFields left out)."""
    obj = {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}
    obj["metadata"] = {k: v for k, v in dict(body["metadata"]).items() if k != "managedFields"}
    return ModelDeployment.from_wire(obj)


def _backoff(retry: int) -> float:
    return min(MAX_BACKOFF_S, 2.0 ** max(0, retry))


async def _reject(kube: KubeApi, body: Mapping[str, Any], exc: ValidationError) -> None:
    message = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False))

    def invalid(status: ModelDeploymentStatus, _: Mapping[str, Any]) -> None:
        status.set_condition("Ready", "False", "InvalidSpec", message[:32768], now=status_time())

    await update_status(kube, body, invalid)
    await kube.post_event(body, reason="InvalidSpec", message=message, warning=True)


async def _refuse(kube: KubeApi, body: Mapping[str, Any], refused: list[str]) -> None:
    """A spec that names what the chart does not allow: no child is applied (a running fleet keeps its last
    allowed spec) until the spec or the chart's policy changes."""
    message = "; ".join(refused)

    def not_allowed(status: ModelDeploymentStatus, _: Mapping[str, Any]) -> None:
        status.set_condition("Ready", "False", "NotAllowed", message[:32768], now=status_time())

    await update_status(kube, body, not_allowed)
    await kube.post_event(body, reason="NotAllowed", message=message, warning=True)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@kopf.on.resume(GROUP, VERSION, PLURAL)
async def reconcile(body: kopf.Body, memo: Any, retry: int, **_: Any) -> None:
    shared = shared_state(memo)
    kube = shared.kube
    with operator_metrics.timed("reconcile"):
        try:
            md = parse(body)
        except ValidationError as exc:
            await _reject(kube, body, exc)
            raise kopf.PermanentError(f"invalid ModelDeployment: {exc.error_count()} error(s)") from None
        options = shared.options
        if refused := admission.violations(md, options.admission, options.render.images):
            await _refuse(kube, body, refused)
            raise kopf.PermanentError(f"not allowed: {'; '.join(refused)}")
        try:
            await apply_children(kube, md, dict(body), shared.token_key, options.render)
        except ApiError as exc:
            if exc.code == 422:  # the API server refused a child we built: retrying cannot help
                await kube.post_event(body, reason="ApplyRefused", message=str(exc), warning=True)
                raise kopf.PermanentError(str(exc)) from exc
            delay = _backoff(retry)
            await post_warning(kube, body, "ReconcileFailed", f"{exc} (retrying in {delay:g} s)")
            raise kopf.TemporaryError(str(exc), delay=delay) from exc
        except httpx.HTTPError as exc:
            raise kopf.TemporaryError(f"API server unreachable: {exc}", delay=_backoff(retry)) from exc
        except (WriteConflict, NotLeading) as exc:
            raise kopf.TemporaryError(str(exc), delay=_backoff(retry)) from exc


async def apply_children(
    kube: KubeApi, md: ModelDeployment, body: Mapping[str, Any], token_key: bytes, settings: RenderSettings
) -> None:
    """Apply every child (idempotent), set the wanted replica count and write the status known without metrics.
    ``settings``: the operator's configuration rendering reads (``Options.render``)."""
    meta = body["metadata"]
    uid, namespace = meta["uid"], meta["namespace"]
    current_cm = await kube.get_optional(object_path("ConfigMap", namespace, children.config_map_name(md)))
    budgets = children.config_map_budgets(md, current_cm)
    built = all_children(
        md,
        uid,
        admin_token=admin_token.derive(token_key, uid),
        budgets=budgets,
        router_cluster_role=router_role(),
        settings=settings,
    )
    await kube.create_if_absent(built.admin_secret)
    await kube.apply(built.config_map)
    await kube.apply(built.service)
    await kube.apply(built.pod_disruption_budget)
    await apply_network_policy(kube, md, uid, built.network_policy)
    deployment = await kube.apply(built.deployment)
    await apply_router(kube, md, built.router)
    owned, recorded = owns_replicas(deployment), recorded_count(body)
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
    now = status_time()
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
        set_condition(status, "Progressing", progressing, now, generation)
        ready = status_builder.ready_condition(status.ready_replicas, desired, md.spec.replicas.min)
        set_condition(status, "Ready", ready, now, generation)

    written = await update_status(kube, body, applied)
    operator_metrics.observe_fleet(namespace, md.metadata.name, md.spec, desired, written.ready_replicas)


def router_role() -> str:
    """The chart's router ClusterRole, which the router's RoleBinding refers to."""
    return os.environ.get(router_children.CLUSTER_ROLE_ENV, router_children.DEFAULT_CLUSTER_ROLE)


async def apply_network_policy(kube: KubeApi, md: ModelDeployment, uid: str, policy: dict[str, Any] | None) -> None:
    """The engines' NetworkPolicy while ``spec.networkPolicy.enabled``; once disabled, deleted if it is this
    ModelDeployment's (looked up first: a policy of the same name that someone else made is left alone)."""
    if policy is not None:
        await kube.apply(policy)
        return
    namespace, name = md.metadata.namespace or "", children.network_policy_name(md)
    live = await kube.get_optional(object_path("NetworkPolicy", namespace, name))
    refs = ((live or {}).get("metadata") or {}).get("ownerReferences") or ()
    if any(ref.get("uid") == uid and ref.get("controller") for ref in refs):
        await kube.delete_if_present("NetworkPolicy", namespace, name)


async def apply_router(kube: KubeApi, md: ModelDeployment, router: list[dict[str, Any]]) -> None:
    """The router's children (``all_children``) while ``spec.router.enabled``; once disabled, deleted (looked up
    first, so a ModelDeployment that never had a router costs one GET)."""
    namespace, name = md.metadata.namespace or "", children.router_name(md)
    if md.spec.router.enabled:
        for obj in router:
            await kube.apply(obj)
    elif await kube.get_optional(object_path("Deployment", namespace, name)) is not None:
        for kind in reversed(router_children.ROUTER_KINDS):
            await kube.delete_if_present(kind, namespace, name)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def forget(body: kopf.Body, **_: Any) -> None:
    """Children go with their owner (garbage collection); only the operator's own gauge is left to drop."""
    operator_metrics.forget(body["metadata"]["namespace"], body["metadata"]["name"])


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10)
async def control_loop(body: kopf.Body, memo: Any, stopped: kopf.DaemonStopped, logger: Any, **kwargs: Any) -> None:
    """Decide every ``autoscaling.intervalSeconds``; the policies' state lives here, one loop per object.

    The children are read from kopf's watches when they are on (``child_reads``), else from the API server."""
    shared = shared_state(memo)
    loop = ControlLoop(shared, reads=IndexReads.from_handler_kwargs(kwargs))
    while not stopped:
        snapshot = dict(body)  # kopf keeps ``body`` current; one consistent copy per decision
        interval = 15.0
        loop.at_zero = False  # set again by a decision that leaves the fleet at zero
        try:
            md = parse(snapshot)
            interval = float(md.spec.autoscaling.interval_seconds)
            with operator_metrics.timed("control_loop"):
                await loop.step(md, snapshot, interval, logger)
        except ValidationError:
            pass  # reported by ``reconcile``; nothing to decide on
        if loop.at_zero:
            await loop.pause(md, stopped, interval)
        else:
            await stopped.wait(interval)
