"""The API server's engine cores as one: one core, or several under data parallelism (``--data-parallel-size``),
each with its own scheduler, KV cache and workers, behind this one API server.

Each request goes to the least loaded core (fewest requests in flight from here; the lowest index on a tie).
Aborts go to every core (a core ignores ids it does not hold). Budgets and adapters are set on every core; the
first core's answer is returned. Metrics: the contract's gauges are the sums (running, waiting) and the mean (KV
usage) over the cores, the counters add up, and ``paged_core_*{engine}`` keeps each core's own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import multiprocessing.process
from collections.abc import Callable

from paged_engine import wire
from paged_engine.core.stats import SchedulerStats
from paged_engine.sampling_params import SamplingParams
from paged_engine.server.engine_client import ControlError, EngineClient, StreamQueue
from paged_engine.server.metrics import EngineMetrics


def least_loaded(in_flight: list[int]) -> int:
    """The core to send the next request to: the fewest requests in flight, the lowest index on a tie."""
    return min(range(len(in_flight)), key=lambda i: (in_flight[i], i))


@dataclasses.dataclass(frozen=True)
class CoreEndpoint:
    process: multiprocessing.process.BaseProcess
    input_address: str
    output_address: str


class EngineCores:
    def __init__(self, endpoints: list[CoreEndpoint], metrics: EngineMetrics) -> None:
        self.metrics = metrics
        self.cores = [
            EngineClient(e.process, e.input_address, e.output_address, functools.partial(self._observe, i))
            for i, e in enumerate(endpoints)
        ]
        self._latest: list[SchedulerStats | None] = [None] * len(self.cores)
        self.on_death: Callable[[], None] | None = None

    # ---- state ---------------------------------------------------------------------------------------------

    @property
    def dead(self) -> bool:
        """Any core gone ends the server: the pod restarts rather than serving on part of its cores."""
        return any(core.dead for core in self.cores)

    @property
    def num_unscheduled(self) -> int:
        return sum(core.num_unscheduled for core in self.cores)

    @property
    def num_in_flight(self) -> int:
        return sum(core.num_in_flight for core in self.cores)

    def _observe(self, index: int, stats: SchedulerStats) -> None:
        self._latest[index] = stats
        seen = [s for s in self._latest if s is not None]
        combined = dataclasses.replace(
            stats, num_running=sum(s.num_running for s in seen), num_waiting=sum(s.num_waiting for s in seen),
            kv_cache_usage=sum(s.kv_cache_usage for s in seen) / len(seen),
        )  # fmt: skip
        self.metrics.observe_step(combined)
        self.metrics.observe_core(str(index), stats)

    # ---- life ----------------------------------------------------------------------------------------------

    async def wait_ready(self, timeout: float) -> wire.EngineInfo:
        """Every core's READY; the first core's description (they serve the same model alike)."""
        infos = await asyncio.gather(*(core.wait_ready(timeout) for core in self.cores))
        return infos[0]

    def start(self) -> None:
        for core in self.cores:
            core.on_death = self._core_died
            core.start()

    def _core_died(self) -> None:
        if self.on_death is not None:
            self.on_death()

    async def close(self) -> None:
        await asyncio.gather(*(core.close() for core in self.cores))

    # ---- requests ------------------------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        priority: int = 0,
        cache_salt: str | None = None,
        queue: StreamQueue | None = None,
        lora_name: str | None = None,
    ) -> list[str]:
        core = self.cores[least_loaded([c.num_in_flight for c in self.cores])]
        return core.add_request(request_id, prompt_token_ids, params, arrival_time, priority, cache_salt, queue,
                                lora_name)  # fmt: skip

    def abort(self, request_ids: list[str]) -> None:
        for core in self.cores:
            core.abort(request_ids)

    # ---- control: every core -------------------------------------------------------------------------------

    async def get_budgets(self) -> wire.BudgetsReply:
        return await self.cores[0].get_budgets()

    async def set_budgets(self, max_num_seqs: int | None, max_num_batched_tokens: int | None) -> wire.BudgetsReply:
        """The cores share their limits, so a pair one refuses every one refuses; the first answers."""
        replies = await asyncio.gather(*(c.set_budgets(max_num_seqs, max_num_batched_tokens) for c in self.cores))
        return replies[0]

    async def list_loras(self) -> list[wire.LoraInfo]:
        return await self.cores[0].list_loras()

    async def load_lora(self, name: str, path: str, timeout: float) -> list[wire.LoraInfo]:
        """Loaded on every core, or on none: a refusal by one unloads it from those that took it."""
        loaded: list[list[wire.LoraInfo]] = []
        for core in self.cores:
            try:
                loaded.append(await core.load_lora(name, path, timeout))
            except ControlError:
                for done in self.cores[: len(loaded)]:
                    await done.unload_lora(name, timeout)
                raise
        return loaded[0]

    async def unload_lora(self, name: str, timeout: float) -> list[wire.LoraInfo]:
        replies = [await core.unload_lora(name, timeout) for core in self.cores]
        return replies[0]
