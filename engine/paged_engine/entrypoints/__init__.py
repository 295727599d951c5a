"""User-facing entry points: the offline :class:`LLM` API, running the engine core in the user's own process."""
