"""Real tiny-model servers for the live bench tests (the server tests' fixtures, reused)."""

from tests.server.conftest import start_server, tiny_gemma_dir

__all__ = ["start_server", "tiny_gemma_dir"]
