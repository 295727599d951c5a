"""Executors: how the engine core has its model runner(s) run a step.

- ``in_process``: world size 1, the runner lives in the engine-core process (``LLM`` and the server alike);
- ``multiproc``: one worker process per rank (``worker_proc``), each step broadcast to all of them through a
  shared-memory ring (``shm_ring``), the sampling rank's output read back.
"""
