"""Pure: the ``ModelReady`` condition, from the engine pods' model-download init containers.

The init container (``model_mounts``) writes ``Reason: message`` to its termination message when a download
fails (``ModelGated: acme/llama is a gated model: ...``), so a gated model without a token reads as
``ModelGated`` here, not as a crash loop. The rules, over the pods that exist:

* a pod whose download failed (now or in its last attempt): False, with that pod's reason and message;
* else a pod whose init container waits on something the kubelet reports (the token Secret is missing:
  ``CreateContainerConfigError``; the image cannot be pulled): False, with the kubelet's reason;
* else a pod downloading: False, ``Downloading``;
* else every pod past its download: True, ``Downloaded``, naming the commit (or S3 version) the downloads
  resolved to, which the init container writes to its termination message on success too; pods that resolved a
  moving branch to different commits are named as such;
* no pods: Unknown. A source with nothing to download (a path, an image, the built-in model) is True.

A failed download of a LoRA adapter (``adapter-download-<i>``, see ``adapter_mounts``) makes it False first,
naming the adapter: the engine cannot start without it either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from paged_platform.api import ModelDeployment, describe_source

from paged_operator.render.adapter_mounts import download_container_name
from paged_operator.render.model_mounts import DOWNLOAD_CONTAINER, model_mounts
from paged_operator.status.builder import ConditionValue

_REASON = re.compile(r"^([A-Z][A-Za-z]+): (.*)$", re.DOTALL)
_RESOLVED = re.compile(r" at ((?:commit|version) \S+)$")
#: The kubelet's waiting reasons that are not failures (it is only getting there).
_STARTING = frozenset({"PodInitializing", "ContainerCreating"})


def _download_status(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return next((s for s in statuses if s.get("name") == DOWNLOAD_CONTAINER), None)


def failure(terminated: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """``(reason, message)`` of a failed download attempt, from its termination message."""
    if not terminated or terminated.get("exitCode", 0) == 0:
        return None
    text = (terminated.get("message") or "").strip()
    lines = [line.removeprefix("error: ") for line in text.splitlines() if line.strip()]
    for line in reversed(lines):  # FallbackToLogsOnError may give a log tail: the last reason line wins
        if match := _REASON.match(line):
            return match.group(1), match.group(2)
    return "DownloadFailed", text[-512:] or f"exit code {terminated.get('exitCode')}"


def resolved(terminated: Mapping[str, Any] | None) -> str | None:
    """``commit SHA`` (or ``version DIGEST``) from a successful download's termination message."""
    text = ((terminated or {}).get("message") or "").strip()
    match = _REASON.match(text)
    if match is None or match.group(1) != "Downloaded":
        return None
    found = _RESOLVED.search(match.group(2))
    return found.group(1) if found else None


def _downloaded(source: str, resolutions: set[str]) -> str:
    if not resolutions:
        return f"{source} is on every pod's cache volume"
    if len(resolutions) == 1:
        return f"{source} is on every pod's cache volume, at {next(iter(resolutions))}"
    return (
        f"{source} is on every pod's cache volume, but the pods resolved it differently "
        f"({', '.join(sorted(resolutions))}): pin a commit sha so that every replica serves the same weights"
    )


def adapter_download_failure(md: ModelDeployment, pods: list[Mapping[str, Any]]) -> ConditionValue | None:
    """The first failed adapter download among ``pods`` (now or in its last attempt), if any."""
    adapters = {download_container_name(i): adapter for i, adapter in enumerate(md.spec.adapters)}
    for pod in pods:
        for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
            adapter = adapters.get(status.get("name"))
            if adapter is None:
                continue
            state, last = status.get("state") or {}, status.get("lastState") or {}
            if (why := failure(state.get("terminated")) or failure(last.get("terminated"))) is not None:
                name = (pod.get("metadata") or {}).get("name", "?")
                source = describe_source(adapter.source.given())
                return ConditionValue("False", why[0], f"downloading adapter {adapter.name} ({source}) failed in "
                                      f"pod {name}: {why[1]}")  # fmt: skip
    return None


def model_ready(md: ModelDeployment, pods: Iterable[Mapping[str, Any]]) -> ConditionValue:
    pods = list(pods)
    if (adapter_failed := adapter_download_failure(md, pods)) is not None:
        return adapter_failed
    if model_mounts(md).download is None:
        return ConditionValue("True", "NoDownload", f"served from {md.spec.model.describe()}")
    if not pods:
        return ConditionValue("Unknown", "NoPods", "no engine pod exists yet")
    failed: list[tuple[str, str, str]] = []
    waiting: list[tuple[str, str, str]] = []
    running: list[str] = []  # the downloads' start times
    done = 0
    resolutions: set[str] = set()
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        status = _download_status(pod)
        if status is None:
            waiting.append((name, "Pending", "the pod has not started its containers"))
            continue
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if (why := failure(state.get("terminated")) or failure(last.get("terminated"))) is not None:
            failed.append((name, *why))
        elif (state.get("terminated") or {}).get("exitCode") == 0:
            done += 1
            if (at := resolved(state.get("terminated"))) is not None:
                resolutions.add(at)
        elif "running" in state:
            running.append((state.get("running") or {}).get("startedAt") or "")
        elif (reason := (state.get("waiting") or {}).get("reason")) and reason not in _STARTING:
            waiting.append((name, reason, (state.get("waiting") or {}).get("message") or reason))
        else:
            waiting.append((name, "Pending", "the download has not started"))
    source = md.spec.model.describe()
    if failed:
        name, reason, message = failed[0]
        return ConditionValue("False", reason, f"downloading {source} failed in pod {name}: {message}")
    stuck = [w for w in waiting if w[1] != "Pending"]
    if stuck:
        name, reason, message = stuck[0]
        return ConditionValue("False", reason, f"pod {name} cannot start the download of {source}: {message}")
    if running:
        since = f" (since {min(running)})" if any(running) else ""
        return ConditionValue("False", "Downloading", f"{len(running)} of {len(pods)} pods downloading {source}{since}")
    if done == len(pods):
        return ConditionValue("True", "Downloaded", _downloaded(source, resolutions))
    return ConditionValue("False", "Pending", f"{len(pods) - done} of {len(pods)} pods have not downloaded {source}")
