"""Drift repair: a child deleted or edited by hand is put back to its rendered form within seconds.

Reconcile runs on the ModelDeployment's own changes; this watches its children (engine and router Deployments,
Services, the budgets' ConfigMap, the PodDisruptionBudgets, the NetworkPolicy: everything labelled as the
operator's). When one is
deleted, or modified so that a field the operator renders no longer holds its rendered value, the owner's
children are applied again (the same server-side apply as reconcile, so the replica count, which the control loop
or an external scaler owns, is left alone), and the repair is recorded: a ``DriftRepaired`` Event and a
``repair`` entry in ``status.decisions``.

Invariants:

* only fields the operator renders count (``drifted_fields`` compares the rendered object as a subset of the live
  one): what the API server defaults or another controller adds is not drift, and a quantity written another way
  (``1.5`` and ``1500m``) is the same value;
* a repair is reported only when it changed something; the operator's own applies find no drift, and a status
  update (the same generation, labels and annotations as the child last checked) is not even checked;
* a child whose owner is gone or being deleted is left to the garbage collector.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from paged_platform.api import KIND, ModelDeployment, parse_quantity
from paged_platform.api.status import Decision, DecisionState
from pydantic import ValidationError

from paged_operator import handlers
from paged_operator.clients.kube import KubeApi, model_deployment_path, object_path
from paged_operator.policy import admission
from paged_operator.render import children
from paged_operator.render.all_children import all_children
from paged_operator.render.settings import RenderSettings
from paged_operator.shared import Options
from paged_operator.status.writer import status_time, update_status

log = logging.getLogger(__name__)
MANAGED = {"app.kubernetes.io/managed-by": "paged-operator"}
# (group, version, plural) of the children watched.
WATCHED = (
    ("apps", "v1", "deployments"),
    ("", "v1", "services"),
    ("", "v1", "configmaps"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("networking.k8s.io", "v1", "networkpolicies"),
)
REPORTED_FIELDS = 4  # fields named in a repair's Event, the rest counted
IGNORED_KEYS = frozenset({"apiVersion", "kind", "status"})
UNCOMPARED_TOKEN = "-" * 32  # what the admin Secret is rendered with here: it is never compared, so never used


# ---- pure: what drifted ----


def _same_scalar(wanted: Any, live: Any) -> bool:
    if wanted == live:
        return True
    if isinstance(wanted, str | int) and isinstance(live, str | int) and not isinstance(wanted, bool):
        try:
            return parse_quantity(wanted) == parse_quantity(live)
        except ValueError:
            return False
    return False


def drifted_fields(wanted: Any, live: Any, path: str = "") -> list[str]:
    """The paths at which ``live`` no longer holds what ``wanted`` (a rendered object) sets; keys ``wanted`` does
    not set are not compared. Lists must match item by item."""
    if isinstance(wanted, Mapping):
        if not isinstance(live, Mapping):
            return [path or "."]
        out: list[str] = []
        for key, value in wanted.items():
            if not path and key in IGNORED_KEYS:
                continue
            where = f"{path}.{key}" if path else key
            out += drifted_fields(value, live[key], where) if key in live else [where]
        return out
    if isinstance(wanted, list):
        if not isinstance(live, list) or len(live) != len(wanted):
            return [path]
        return [field for i, item in enumerate(wanted) for field in drifted_fields(item, live[i], f"{path}[{i}]")]
    return [] if _same_scalar(wanted, live) else [path]


def rendered_child(
    md: ModelDeployment,
    uid: str,
    kind: str,
    name: str,
    live_config_map: Mapping[str, Any] | None,
    settings: RenderSettings,
) -> dict[str, Any] | None:
    """The object the operator renders for ``md`` under this kind and name (None: not one of its children).
    The admin Secret is never compared (created once, its token derived, not rendered)."""
    budgets = children.config_map_budgets(md, live_config_map)
    built = all_children(
        md,
        uid,
        admin_token=UNCOMPARED_TOKEN,
        budgets=budgets,
        router_cluster_role=handlers.router_role(),
        settings=settings,
    )
    candidates = [c for c in built.in_apply_order() if c is not built.admin_secret]
    return next((c for c in candidates if c["kind"] == kind and c["metadata"]["name"] == name), None)


def fingerprint(body: Mapping[str, Any]) -> str:
    """What a change the operator may have to undo changes: the generation where the kind has one (a status update
    leaves it alone), else the resourceVersion; and the metadata the operator renders."""
    meta = body.get("metadata") or {}
    version = meta.get("generation", meta.get("resourceVersion"))
    rendered = {k: meta.get(k) for k in ("uid", "labels", "annotations", "ownerReferences")}
    return json.dumps([version, rendered], sort_keys=True)


class Checked:
    """The fingerprint of each child when last checked, so that the watch's stream of status updates costs
    nothing. Per process: a restarted operator checks each child once more on its next change."""

    def __init__(self) -> None:
        self._fingerprints: dict[tuple[str, str, str], str] = {}

    def is_new(self, body: Mapping[str, Any]) -> bool:
        """True (and remembered) unless ``body`` looks as it did when last checked."""
        meta = body["metadata"]
        key, now = (body["kind"], meta["namespace"], meta["name"]), fingerprint(body)
        if self._fingerprints.get(key) == now:
            return False
        self._fingerprints[key] = now
        return True

    def forget(self, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        self._fingerprints.pop((body["kind"], meta["namespace"], meta["name"]), None)


CHECKED = Checked()


def describe_repair(kind: str, name: str, fields: list[str] | None) -> str:
    if fields is None:
        return f"{kind} {name} was deleted: created again from the ModelDeployment"
    shown = ", ".join(fields[:REPORTED_FIELDS])
    if len(fields) > REPORTED_FIELDS:
        shown += f" and {len(fields) - REPORTED_FIELDS} more"
    return f"{kind} {name} was changed by hand ({shown}): restored to its rendered form"


def owner_of(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the ModelDeployment that controls ``body``."""
    for ref in body.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("kind") == KIND and ref.get("controller"):
            return ref["name"], ref["uid"]
    return None


# ---- I/O: the watch, the repair, the record ----


async def repair(
    kube: KubeApi, event_type: str, body: Mapping[str, Any], token_key: bytes, options: Options
) -> str | None:
    """Put the child ``body`` (as a watch event saw it) back; the repair's description, or None if none was due."""
    owner = owner_of(body)
    if owner is None:
        return None
    meta = body["metadata"]
    namespace, kind, name = meta["namespace"], body["kind"], meta["name"]
    md_body = await kube.get_optional(model_deployment_path(namespace, owner[0]))
    if md_body is None or md_body["metadata"]["uid"] != owner[1] or md_body["metadata"].get("deletionTimestamp"):
        return None
    try:
        md = handlers.parse(md_body)
    except ValidationError:
        return None  # reconcile reports it
    if admission.violations(md, options.admission, options.render.images):
        return None  # reconcile refused this spec: nothing of it is put back either
    live_cm = await kube.get_optional(object_path("ConfigMap", namespace, children.config_map_name(md)))
    wanted = rendered_child(md, owner[1], kind, name, live_cm, options.render)
    if wanted is None:
        return None
    if event_type == "DELETED":  # recorded even if the control loop's next write brought it back first
        await handlers.apply_children(kube, md, md_body, token_key, options.render)
        return await _record(kube, md_body, describe_repair(kind, name, None))
    if not drifted_fields(wanted, body):
        return None
    path = object_path(kind, namespace, name)
    before = await kube.get_optional(path)  # the event may be stale: repaired already, or deleted since
    fields = drifted_fields(wanted, before) if before is not None else []
    if before is None or not fields:
        return None
    log.info("%s %s/%s differs from its rendered form at %s", kind, namespace, name, ", ".join(fields))
    await handlers.apply_children(kube, md, md_body, token_key, options.render)
    after = await kube.get_optional(path)
    if after is not None and after["metadata"].get("resourceVersion") == before["metadata"].get("resourceVersion"):
        return None  # nothing the operator owns had changed (what differs is not its to restore)
    return await _record(kube, md_body, describe_repair(kind, name, fields))


async def _record(kube: KubeApi, md_body: Mapping[str, Any], message: str) -> str:
    """The repair as an Event and a ``repair`` decision on the ModelDeployment."""
    await kube.post_event(md_body, reason="DriftRepaired", message=message, warning=True)
    decision = Decision.model_validate(
        {"time": status_time(), "kind": "repair", "from": DecisionState(), "to": DecisionState(), "reason": message}
    )
    await update_status(kube, md_body, lambda status, _: status.record_decision(decision), fresh=True)
    return message


async def on_child_event(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
    event_type = event.get("type")
    if event_type == "DELETED":
        CHECKED.forget(body)
    elif event_type != "MODIFIED" or not CHECKED.is_new(body):
        return  # the initial listing (reconcile on resume has applied everything), or a status update
    shared = handlers.shared_state(memo)
    message = await repair(shared.kube, event_type, dict(body), shared.token_key, shared.options)
    if message is not None:
        log.warning("%s/%s: %s", body["metadata"]["namespace"], body["metadata"]["name"], message)


def register(registry: kopf.OperatorRegistry | None = None) -> None:
    """Declare the children's watches (before the operator starts)."""
    for group, version, plural in WATCHED:
        resource = (group, version, plural) if group else (version, plural)
        kopf.on.event(*resource, labels=MANAGED, id=f"drift_{plural}", registry=registry)(on_child_event)
