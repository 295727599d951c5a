"""The scheduling core: requests, block pool, prefix cache, KV-cache manager and scheduler. Pure Python, no torch.
Runs in the engine-core process (in the user's process for ``LLM``)."""

from .block_pool import BlockPool, KVBlock
from .engine_core_output import EngineCoreOutput
from .kv_cache_manager import ComputedBlocks, KVCacheManager, SlotAllocation
from .kv_cache_spec import FullAttentionSpec, KVCacheConfig, KVCacheGroup, SlidingWindowSpec
from .request import FinishReason, Request, RequestStatus
from .scheduler import RequestValidationError, Scheduler, StepResult
from .scheduler_config import SchedulerConfig, SettingError
from .stats import SchedulerStats

__all__ = [
    "BlockPool",
    "ComputedBlocks",
    "EngineCoreOutput",
    "FinishReason",
    "FullAttentionSpec",
    "KVBlock",
    "KVCacheConfig",
    "KVCacheGroup",
    "KVCacheManager",
    "Request",
    "RequestStatus",
    "RequestValidationError",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerStats",
    "SettingError",
    "SlidingWindowSpec",
    "SlotAllocation",
    "StepResult",
]
