"""Injects faults into one request's own work inside the engine core's step, for the step-isolation tests.

A server started with this folder on ``PYTHONPATH`` loads it in both of its processes (Python imports
``sitecustomize`` at start-up). Requests are marked by their ``seed``, which passes every validation:
``PREPARE_SEED`` fails while the runner adds the request to its batch, ``SAMPLE_SEED`` while it builds the
sampling parameters. Everything else runs unchanged.
"""

from __future__ import annotations

PREPARE_SEED = 0xFA17
SAMPLE_SEED = 0xFA18


def _install() -> None:
    from paged_engine.worker import model_runner
    from paged_engine.worker.input_batch import InputBatch

    add, build = InputBatch.add_request, model_runner.SamplingMetadata.build

    def add_or_fail(self, new, *args):  # type: ignore[no-untyped-def]
        if new.sampling_params.seed == PREPARE_SEED:
            raise RuntimeError("injected fault while preparing the request")
        return add(self, new, *args)

    def build_or_fail(rows, *args, **kwargs):  # type: ignore[no-untyped-def]
        if any(row.params.seed == SAMPLE_SEED for row in rows):
            raise ValueError("injected fault while sampling")
        return build(rows, *args, **kwargs)

    InputBatch.add_request = add_or_fail  # type: ignore[method-assign]
    model_runner.SamplingMetadata.build = build_or_fail  # type: ignore[method-assign]


# Only as the interpreter's start-up hook: the tests import this module for its seeds, and must not patch the
# engine inside the test process itself.
if __name__ == "sitecustomize":
    _install()
