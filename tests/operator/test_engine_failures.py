"""Why engine replicas do not serve, from pod statuses as the kubelet writes them: a crash loop, an image that
cannot be pulled, a load killed by the start-up probe, a pod no node can place."""

from __future__ import annotations

from typing import Any

from paged_operator.status.engine_failures import failing_condition, pod_failure

BUDGET_S = 600.0


def pod(name: str = "gemma-abc", *, ready: bool = False, waiting: str | None = None, last: dict | None = None,
        restarts: int = 0, init_waiting: str | None = None) -> dict[str, Any]:  # fmt: skip
    engine: dict[str, Any] = {"name": "engine", "image": "paged/engine-cpu:1", "ready": ready, "restartCount": restarts}
    engine["state"] = {"waiting": {"reason": waiting, "message": f"{waiting} details"}} if waiting else {"running": {}}
    if last is not None:
        engine["lastState"] = {"terminated": last}
    status: dict[str, Any] = {"containerStatuses": [engine]}
    if init_waiting:
        status["initContainerStatuses"] = [
            {"name": "model-download", "image": "bad/image:x", "state": {"waiting": {"reason": init_waiting}}}
        ]
    return {"metadata": {"name": name}, "status": status}


def run(seconds: int, code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    finished = f"2026-12-04T10:{seconds // 60:02d}:{seconds % 60:02d}Z"
    return {"exitCode": code, "reason": reason, "message": message, "startedAt": "2026-12-04T10:00:00Z",
            "finishedAt": finished}  # fmt: skip


def test_a_crash_loop_is_named_with_its_exit_code_and_last_log_lines() -> None:
    crashing = pod(waiting="CrashLoopBackOff", restarts=4,
                   last=run(3, 2, message="paged-engine serve: error: unrecognized arguments: --bogus"))  # fmt: skip
    reason, message = pod_failure(crashing, BUDGET_S)
    assert reason == "EngineCrashLooping"
    assert "exited with code 2" in message and "4 restarts" in message and "--bogus" in message


def test_an_out_of_memory_kill_is_a_crash_not_a_timeout() -> None:
    reason, message = pod_failure(pod(restarts=1, last=run(599, 137, reason="OOMKilled")), BUDGET_S)
    assert reason == "EngineCrashLooping" and "OOMKilled" in message


def test_a_load_killed_at_its_start_up_budget_is_a_model_load_timeout() -> None:
    reason, message = pod_failure(pod(restarts=1, last=run(595, 137)), BUDGET_S)
    assert reason == "ModelLoadTimeout" and "startupTimeoutSeconds" in message
    # killed early (a liveness failure, a node drain): not the start-up budget's doing
    assert pod_failure(pod(restarts=1, last=run(30, 137)), BUDGET_S)[0] == "EngineCrashLooping"


def test_a_load_stopped_at_its_budget_reads_as_a_timeout_however_the_engine_took_the_sigterm() -> None:
    """The kubelet stops a container its start-up probe gave up on with SIGTERM (after the preStop hook): the engine
    shuts down cleanly while loading (0, ``Completed``, as the real node records it), or dies of the signal (143)."""
    for code, why in ((0, "Completed"), (143, "Error")):
        reason, message = pod_failure(pod(restarts=2, last=run(598, code, reason=why)), BUDGET_S)
        assert reason == "ModelLoadTimeout", (code, message)
        assert "start-up budget of 600 s (stopped after 598 s, 2 restarts)" in message
    assert pod_failure(pod(restarts=1, last=run(30, 143)), BUDGET_S)[0] == "EngineCrashLooping"


def test_an_image_that_cannot_be_pulled_is_named_for_the_engine_or_its_init_container() -> None:
    assert pod_failure(pod(waiting="ImagePullBackOff"), BUDGET_S)[0] == "ImagePullFailed"
    reason, message = pod_failure(pod(waiting="PodInitializing", init_waiting="ErrImagePull"), BUDGET_S)
    assert reason == "ImagePullFailed" and "bad/image:x" in message


def test_a_starting_or_serving_pod_has_no_failure() -> None:
    assert pod_failure(pod(waiting="ContainerCreating"), BUDGET_S) is None
    assert pod_failure(pod(), BUDGET_S) is None  # running, not ready yet: loading
    assert pod_failure(pod(ready=True, restarts=3, last=run(5, 1)), BUDGET_S) is None  # crashed once, serves now
    assert pod_failure(pod(restarts=1, last=run(5, 0)), BUDGET_S) is None  # exited cleanly (a drain)


def test_the_condition_names_the_most_actionable_cause_and_counts_the_pods() -> None:
    pods = [pod("a", waiting="CrashLoopBackOff", restarts=2, last=run(2, 1)),
            pod("b", waiting="CrashLoopBackOff", restarts=5, last=run(2, 1)),
            pod("c", waiting="ErrImagePull")]  # fmt: skip
    value = failing_condition(pods, {"d": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}, BUDGET_S)
    assert (value.status, value.reason) == ("False", "ImagePullFailed")
    value = failing_condition(pods[:2], {}, BUDGET_S)
    assert value.reason == "EngineCrashLooping" and value.message.startswith("pod a (and 1 more pods): ")
    value = failing_condition([], {"d": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}, BUDGET_S)
    assert value.reason == "Unschedulable" and "Insufficient nvidia.com/gpu" in value.message
    assert failing_condition([pod()], {}, BUDGET_S) is None
