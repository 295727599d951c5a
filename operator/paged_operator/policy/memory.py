"""The policies' memory as text for ``status.controllerMemory``, so a restarted (or newly elected) operator goes on
where the last one stopped.

What is kept is what a restart would otherwise lose and what changes decisions:

* the autoscaler's recommendations over its windows (a restarted operator neither scales down before the
  down-window has passed since the last high demand, nor waits a whole window again), its panic hold, the
  floor left by an undone scale-down and the per-replica capacity it has seen on target;
* the budget tuner's budgets, the time of its last change (its cool-down) and the levels at which a
  preemption storm or an ITL break happened (its raises stay below them);
* the arbiter's deferred scale-up;
* scale-to-zero's idle clock (the last time requests arrived, waited or ran).

The raw metric samples are not kept: rates need two fresh scrapes anyway, and they are the bulk.

Invariants: ``decode(encode(s))`` equals ``s`` less its sample window; text this version cannot read (another
format version, an older operator's, hand-edited) decodes to None, and the caller starts fresh, as before
there was any memory. The text stays under ``MAX_CHARS``: the oldest recommendations are dropped first
(they matter least: only the down-window's maximum looks that far back).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from paged_platform.api.status import CONTROLLER_MEMORY_MAX_CHARS
from paged_platform.engine_contract.budgets import Budgets

from paged_operator.policy import budget_tuner
from paged_operator.policy.arbiter import ArbiterState
from paged_operator.policy.autoscaler import AutoscalerState, Recommendation
from paged_operator.policy.budget_tuner import TuneKind, TunerState
from paged_operator.policy.controller import ControllerSpec, ControllerState, initial_state
from paged_operator.policy.fleet_view import SampleWindow
from paged_operator.policy.scale_to_zero import ZeroState

#: Bumped when the format changes; other versions are ignored (start fresh), never misread.
VERSION = 1
#: Upper bound of the encoded text (the status field's ``maxLength``).
MAX_CHARS = CONTROLLER_MEMORY_MAX_CHARS


def encode(state: ControllerState) -> str:
    """The state as compact JSON text (at most ``MAX_CHARS``)."""
    scaler = state.autoscaler
    body: dict[str, Any] = {
        "v": VERSION,
        "autoscaler": {
            "history": [[r.time, r.demand, r.burst_demand, r.replicas, r.arrivals] for r in scaler.history],
            "panicUntil": scaler.panic_until,
            "firstSeen": scaler.first_seen,
            "lastDown": list(scaler.last_down) if scaler.last_down is not None else None,
            "floor": scaler.floor,
            "floorUntil": scaler.floor_until,
            "floorMemory": scaler.floor_memory_s,
            "floorDemand": scaler.floor_demand,
            "capacity": [[t, r] for t, r in scaler.capacity],
            "lastUp": scaler.last_up,
        },
        "tuner": _tuner(state.tuner),
        "arbiter": {
            "upDeferredSince": state.arbiter.up_deferred_since,
            "lastTune": state.arbiter.last_tune.value if state.arbiter.last_tune is not None else None,
        },
        "zero": {"arrivals": state.zero.arrivals_total, "lastActive": state.zero.last_active},
    }
    text = _dumps(body)
    history = body["autoscaler"]["history"]
    while len(text) > MAX_CHARS and history:
        del history[: max(1, len(history) // 4)]
        text = _dumps(body)
    return text


def _dumps(body: Mapping[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))


def _tuner(state: TunerState | None) -> dict[str, Any] | None:
    if state is None:
        return None
    return {
        "maxNumSeqs": state.budgets.max_num_seqs,
        "maxNumBatchedTokens": state.budgets.max_num_batched_tokens,
        "lastChange": state.last_change,
        "stormLevel": state.storm_level,
        "stormUntil": state.storm_until,
        "itlLevel": state.itl_level,
        "itlUntil": state.itl_until,
    }


def decode(text: str | None, *, rate_window_s: float) -> ControllerState | None:
    """The state ``encode`` wrote, with an empty sample window of ``rate_window_s``; None if unreadable."""
    if not text:
        return None
    try:
        body = json.loads(text)
        if not isinstance(body, dict) or body.get("v") != VERSION:
            return None
        scaler, arbiter, zero = body["autoscaler"], body["arbiter"], body.get("zero") or {}
        last_down = scaler["lastDown"]
        autoscaler = AutoscalerState(
            history=tuple(_recommendation(*row) for row in scaler["history"]),
            panic_until=_opt_float(scaler["panicUntil"]),
            first_seen=_opt_float(scaler["firstSeen"]),
            last_down=(
                (float(last_down[0]), int(last_down[1]), int(last_down[2]), float(last_down[3]))
                if last_down is not None
                else None
            ),
            floor=_opt_int(scaler["floor"]),
            floor_until=_opt_float(scaler["floorUntil"]),
            floor_memory_s=_opt_float(scaler["floorMemory"]),
            floor_demand=_opt_float(scaler["floorDemand"]),
            capacity=tuple((float(t), float(r)) for t, r in scaler["capacity"]),
            last_up=_opt_float(scaler.get("lastUp")),  # absent in an older operator's text: no recent scale-up
        )
        tune = arbiter["lastTune"]
        return ControllerState(
            window=SampleWindow(horizon_s=rate_window_s),
            autoscaler=autoscaler,
            tuner=_decode_tuner(body["tuner"]),
            arbiter=ArbiterState(
                up_deferred_since=_opt_float(arbiter["upDeferredSince"]),
                last_tune=TuneKind(tune) if tune is not None else None,
            ),
            zero=ZeroState(_opt_float(zero.get("arrivals")), _opt_float(zero.get("lastActive"))),
        )
    except (ValueError, TypeError, KeyError, IndexError):
        return None  # not ours to read (json.JSONDecodeError is a ValueError)


def _decode_tuner(body: Mapping[str, Any] | None) -> TunerState | None:
    if body is None:
        return None
    return TunerState(
        budgets=Budgets(int(body["maxNumSeqs"]), int(body["maxNumBatchedTokens"])),
        last_change=_opt_float(body["lastChange"]),
        storm_level=_opt_int(body["stormLevel"]),
        storm_until=_opt_float(body["stormUntil"]),
        itl_level=_opt_int(body["itlLevel"]),
        itl_until=_opt_float(body["itlUntil"]),
    )


def _recommendation(t: object, d: object, b: object, n: object, arrivals: object = None) -> Recommendation:
    """A history row; rows written before the arrival rate was kept have four fields."""
    return Recommendation(float(t), float(d), float(b), int(n), _opt_float(arrivals))  # type: ignore[arg-type]


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def restore(spec: ControllerSpec, budgets: Budgets, text: str | None) -> ControllerState:
    """The state to start deciding from: the remembered one where there is one, else ``initial_state``.

    The tuner's memory is used only while it describes the budgets in force (the ConfigMap's ``budgets``):
    budgets someone else set since (a spec edit of the static budget while no operator ran) start it over,
    as a running operator does (``ControlLoop``). Switched off, the tuner is dropped.
    """
    remembered = decode(text, rate_window_s=spec.rate_window_s)
    if remembered is None:
        return initial_state(spec, budgets if spec.budget is not None else None)
    tuner = remembered.tuner
    if spec.budget is None:
        tuner = None
    elif tuner is None or tuner.budgets != spec.budget.clamp(budgets):
        tuner = budget_tuner.initial_state(spec.budget, budgets)
    return replace(remembered, tuner=tuner)
