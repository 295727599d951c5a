"""The engine core and what builds it: the one ``EngineConfig``, the start-up stages (``startup``), the step loop
(:class:`EngineCore`), the engine-core process around it (``core_proc``: ZMQ sockets, I/O threads, busy loop) and
the in-process front-end ``LLM`` uses (:class:`LLMEngine`). ``config`` is imported by the API server process too
(flags); everything else runs in the engine-core process, or in the user's process for ``LLM``."""
