"""Pure: why engine replicas do not serve, named for the ``Ready`` condition.

A replica that is only slow to start reads as ``MinimumReplicasUnavailable``; one that cannot start is named, from
its pod's scheduling and its engine container's status, the most actionable cause first:

* ``ImagePullFailed``: the kubelet cannot pull the engine image (``ErrImagePull``, ``ImagePullBackOff``, ...);
* ``ModelLoadTimeout``: the engine was stopped after running about as long as its start-up budget without serving:
  the start-up probe (``/ready``) gave up on a load that hung, and the kubelet restarted it. The kubelet stops it
  as it stops any container (the preStop hook, SIGTERM, SIGKILL after the grace period), so the run ends with the
  engine's own clean exit on SIGTERM (0, ``Completed``: what this engine does while loading), 143 or 137;
* ``EngineCrashLooping``: the engine exits and is restarted (``CrashLoopBackOff``, or a last run that ended with a
  non-zero code, ``OOMKilled`` included): its exit code and the tail of its termination message, which holds the
  engine's last log lines (``terminationMessagePolicy: FallbackToLogsOnError``);
* ``Unschedulable``: no node can place the pod (pending past the operator's timeout; the scheduler's message).

The message names the pod and how many pods share the cause.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from paged_operator.render.children import ENGINE_CONTAINER
from paged_operator.status.builder import ConditionValue

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
#: How a container the kubelet stopped ends: its own exit on SIGTERM (0), death by SIGTERM (143), or SIGKILL after
#: the grace period (137).
STOPPED_EXIT_CODES = frozenset({0, 128 + 15, 128 + 9})
STARTUP_KILL_SLACK = 0.8  # a run this share of the budget or longer, then stopped, was the start-up probe's doing
MESSAGE_TAIL = 512
FAILURE_REASONS = ("ImagePullFailed", "ModelLoadTimeout", "EngineCrashLooping", "Unschedulable")


def _engine_status(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == ENGINE_CONTAINER), None)


def _seconds(terminated: Mapping[str, Any]) -> float | None:
    start, end = terminated.get("startedAt"), terminated.get("finishedAt")
    if not start or not end:
        return None
    parse = datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def _tail(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= MESSAGE_TAIL else "..." + text[-MESSAGE_TAIL:]


def _image_pull(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            image = container.get("image", "the image")
            return "ImagePullFailed", f"{waiting['reason']} for {image}: {_tail(waiting.get('message')) or '-'}"
    return None


def pod_failure(pod: Mapping[str, Any], startup_budget_s: float) -> tuple[str, str] | None:
    """``(reason, message)`` for one engine pod that cannot start, or None (serving, or only starting)."""
    if (pulling := _image_pull(pod)) is not None:
        return pulling
    status = _engine_status(pod)
    if status is None or status.get("ready"):
        return None
    last = (status.get("lastState") or {}).get("terminated")
    if not last:
        return None
    code, restarts = last.get("exitCode", 0), status.get("restartCount", 0)
    ran = _seconds(last)
    if (
        code in STOPPED_EXIT_CODES
        and last.get("reason") != "OOMKilled"
        and ran is not None
        and ran >= STARTUP_KILL_SLACK * startup_budget_s
    ):
        return (
            "ModelLoadTimeout",
            f"the engine did not serve within its start-up budget of {startup_budget_s:g} s (stopped after "
            f"{ran:.0f} s, {restarts} restarts); raise spec.engine.startupTimeoutSeconds if the load is only slow",
        )
    if code == 0:
        return None  # a clean exit before the budget ran out: a drain, not a failure
    why = last.get("reason") or "Error"
    detail = _tail(last.get("message"))
    return "EngineCrashLooping", f"the engine exited with code {code} ({why}, {restarts} restarts)" + (
        f": {detail}" if detail else ""
    )


def failing_condition(
    pods: Iterable[Mapping[str, Any]], unschedulable: Mapping[str, str], startup_budget_s: float
) -> ConditionValue | None:
    """``Ready=False`` naming the most actionable cause among the pods, or None when none has one."""
    found: dict[str, list[tuple[str, str]]] = {}
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        failure = pod_failure(pod, startup_budget_s)
        if failure is not None:
            found.setdefault(failure[0], []).append((name, failure[1]))
    for name, message in sorted(unschedulable.items()):
        found.setdefault("Unschedulable", []).append((name, message))
    for reason in FAILURE_REASONS:
        if reason in found:
            (pod, message), *others = sorted(found[reason])
            more = f" (and {len(others)} more pods)" if others else ""
            return ConditionValue("False", reason, f"pod {pod}{more}: {message}")
    return None
