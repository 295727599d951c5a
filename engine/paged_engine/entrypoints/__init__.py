"""User-facing entry points: the offline :class:`LLM` API."""
