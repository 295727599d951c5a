"""Engine front-ends: the pure step loop (:class:`EngineCore`) and the tokenising front-end (:class:`LLMEngine`)."""
