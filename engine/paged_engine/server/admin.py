"""The admin API (``/admin``, behind the admin token): live scheduler budgets, LoRA adapters and drain.

Its paths and budget bodies are the engine contract's (``paged_platform.engine_contract.admin``): the operator
builds its requests and reads the answers with the same models. A refusal by the engine core keeps the field at
fault (``param``) and its status (400 out of range, 404 no such adapter, 409 in conflict with the engine's state).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

from fastapi import Body, Depends, FastAPI, Query
from paged_platform.engine_contract import admin as contract
from pydantic import BaseModel, ConfigDict, Field

from paged_engine.server.engine_client import ControlError, EngineDeadError
from paged_engine.server.errors import APIError, bad_request
from paged_engine.server.state import ServerState, bearer_guard
from paged_engine.wire import BudgetsReply, LoraInfo

T = TypeVar("T")
#: Loading an adapter reads its weights: longer than a budget call may take.
LORA_CALL_TIMEOUT_S = 120.0


class LoraLoad(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128, description="the model name clients will use")
    path: str = Field(min_length=1, max_length=4096, description="a PEFT adapter folder on the engine's disk")


def add_admin_routes(app: FastAPI, state: ServerState) -> None:
    """``/admin``: live budgets, LoRA adapters and drain, behind the admin token."""
    guard = Depends(bearer_guard(state.admin_token, "admin token"))
    _budget_routes(app, state, guard)
    _lora_routes(app, state, guard)
    _drain_routes(app, state, guard)


async def _engine(call: Awaitable[T]) -> T:
    """A control call's answer; a dead core is a 503, a refusal keeps its status and field."""
    try:
        return await call
    except ControlError as exc:
        kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
        raise APIError(exc.status, str(exc), type=kind, param=exc.param) from None
    except EngineDeadError as exc:
        raise APIError(503, str(exc), type="unavailable_error") from None


def _budget_routes(app: FastAPI, state: ServerState, guard: Any) -> None:
    def report(reply: BudgetsReply) -> contract.BudgetsReport:
        state.metrics.observe_budgets(reply.budgets.max_num_seqs, reply.budgets.max_num_batched_tokens)
        return contract.BudgetsReport.of(reply.budgets, reply.limits)

    @app.get(contract.BUDGETS_PATH, dependencies=[guard])
    async def get_budgets() -> contract.BudgetsReport:
        return report(await _engine(state.client.get_budgets()))

    @app.put(contract.BUDGETS_PATH, dependencies=[guard])
    async def set_budgets(update: Annotated[contract.BudgetUpdate, Body()]) -> contract.BudgetsReport:
        if update.max_num_seqs is None and update.max_num_batched_tokens is None:
            raise bad_request("give max_num_seqs and/or max_num_batched_tokens")
        reply = state.client.set_budgets(update.max_num_seqs, update.max_num_batched_tokens)
        return report(await _engine(reply))


def _lora_routes(app: FastAPI, state: ServerState, guard: Any) -> None:
    def served(loras: list[LoraInfo]) -> None:
        """The served model list (``/v1/models``, and ``paged_served_model_info`` the router reads) follows the
        core's answer."""
        state.loras = loras
        state.ready_serving().loras = [lora.name for lora in loras]
        state.metrics.set_served_models(state.ready_serving().loras)

    @app.get(contract.LORA_PATH, dependencies=[guard])
    async def list_loras() -> dict[str, Any]:
        state.ready_serving()
        return {"loras": [_lora_body(lora) for lora in state.loras]}

    @app.post(contract.LORA_PATH, dependencies=[guard])
    async def load_lora(body: Annotated[LoraLoad, Body()]) -> dict[str, Any]:
        """Load a PEFT adapter into a free slot; it is then a model name in ``/v1/models`` and requests."""
        if body.name == state.ready_serving().model_name:
            raise APIError(409, f"adapter name {body.name!r} is the base model's name", param="name")
        loras = await _engine(state.client.load_lora(body.name, body.path, LORA_CALL_TIMEOUT_S))
        served(loras)
        return _lora_body(next(lora for lora in loras if lora.name == body.name))

    @app.delete(contract.LORA_PATH + "/{name:path}", dependencies=[guard])
    async def unload_lora(name: str) -> dict[str, Any]:
        state.ready_serving()
        served(await _engine(state.client.unload_lora(name, LORA_CALL_TIMEOUT_S)))
        return {"name": name, "unloaded": True}


def _lora_body(lora: LoraInfo) -> dict[str, Any]:
    return {"name": lora.name, "path": lora.path, "rank": lora.rank, "slot": lora.slot}


def _drain_routes(app: FastAPI, state: ServerState, guard: Any) -> None:
    client = state.client

    def drain_state() -> dict[str, Any]:
        draining = state.serving is not None and state.serving.draining
        return {"draining": draining, "in_flight": client.num_in_flight,
                "drained": draining and client.num_in_flight == 0,
                "closing_connections": state.closing_connections}  # fmt: skip

    @app.get(contract.DRAIN_PATH, dependencies=[guard])
    async def get_drain() -> dict[str, Any]:
        return drain_state()

    @app.post(contract.DRAIN_PATH, dependencies=[guard])
    async def drain(
        wait_seconds: Annotated[
            float, Query(alias=contract.DRAIN_WAIT_PARAM, ge=0, le=contract.DRAIN_MAX_WAIT_S)
        ] = 0.0,
        linger_seconds: Annotated[
            float, Query(alias=contract.DRAIN_LINGER_PARAM, ge=0, le=contract.DRAIN_MAX_LINGER_S)
        ] = 0.0,
    ) -> dict[str, Any]:
        """Stops admitting requests (``/ready`` turns false at once); with ``wait_seconds``, returns when the
        in-flight requests have finished or the wait is over (a preStop hook uses this). From the call on, every
        response closes its connection; with ``linger_seconds`` the server first keeps admitting that long, so
        that a Service stops routing here and keep-alive clients move elsewhere before admission stops (a pod's
        preStop lingers longer than the server's keep-alive timeout: see ``connection_close``)."""
        serving = state.ready_serving()
        state.closing_connections = True
        state.drain_calls += 1
        call = state.drain_calls
        if linger_seconds and not serving.draining:
            await asyncio.sleep(linger_seconds)
            if state.drain_calls != call:  # undrained (or drained again) meanwhile: that call decides
                return drain_state()
        serving.draining = True
        deadline = time.monotonic() + wait_seconds
        while client.num_in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return drain_state()

    @app.delete(contract.DRAIN_PATH, dependencies=[guard])
    async def undrain() -> dict[str, Any]:
        state.ready_serving().draining = False
        state.closing_connections = False
        state.drain_calls += 1
        return drain_state()
