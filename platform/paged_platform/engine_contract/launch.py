"""How the platform starts an engine: ``paged-engine serve`` and ``paged-engine download``, the flags it passes
and the environment variables the engine reads.

The engine generates its flags from its configuration classes (``EngineConfig``, ``ServerConfig``); its tests
check that every flag named here is one of them, and its configuration reads the variables named here.
"""

from __future__ import annotations

from enum import StrEnum

COMMAND = "paged-engine"
SERVE = "serve"
DOWNLOAD = "download"


class ServeFlag(StrEnum):
    """Flags of ``paged-engine serve`` that the platform renders."""

    HOST = "--host"
    PORT = "--port"
    ADMIN_PORT = "--admin-port"
    SERVED_MODEL_NAME = "--served-model-name"
    SHUTDOWN_GRACE_SECONDS = "--shutdown-grace-seconds"
    OTEL_EXPORTER = "--otel-exporter"
    DEVICE = "--device"
    DTYPE = "--dtype"
    BLOCK_SIZE = "--block-size"
    MAX_MODEL_LEN = "--max-model-len"
    KV_CACHE_MEMORY = "--kv-cache-memory"
    ENABLE_PREFIX_CACHING = "--enable-prefix-caching"
    NO_ENABLE_PREFIX_CACHING = "--no-enable-prefix-caching"
    MAX_NUM_SEQS_LIMIT = "--max-num-seqs-limit"
    MAX_NUM_BATCHED_TOKENS_LIMIT = "--max-num-batched-tokens-limit"
    LORA_MODULES = "--lora-modules"
    MAX_LORAS = "--max-loras"
    MAX_LORA_RANK = "--max-lora-rank"


class DownloadFlag(StrEnum):
    """Flags of ``paged-engine download`` (an init container's model download) that the platform renders."""

    REVISION = "--revision"
    DEST = "--dest"
    TERMINATION_LOG = "--termination-log"


#: The admin API's bearer token.
ADMIN_TOKEN_ENV = "PAGED_ADMIN_TOKEN"
#: The OpenAI API's key (``Authorization: Bearer KEY``).
API_KEY_ENV = "PAGED_API_KEY"
#: The scheduler budgets an engine starts with (a live change goes through the admin API): the operator sets them
#: from the ConfigMap, so a pod started after the tuner moved them starts with the tuned ones.
MAX_NUM_SEQS_ENV = "PAGED_MAX_NUM_SEQS"
MAX_NUM_BATCHED_TOKENS_ENV = "PAGED_MAX_NUM_BATCHED_TOKENS"
#: ``--otel-exporter``'s default.
OTEL_EXPORTER_ENV = "PAGED_OTEL_EXPORTER"

#: LoRA weight slots an engine allocates unless ``--max-loras`` says otherwise: the platform renders the flag only
#: for more adapters than this.
DEFAULT_MAX_LORAS = 4
