"""A bounded soak of one real ``paged-engine serve``: a mixed, misbehaving client population near the server's
capacity, then checks that nothing leaked (KV blocks, memory, descriptors, threads) and nothing failed.

``python -m e2e.soak --duration 600`` runs it against a fresh server on the tiny test model and prints the
figures; ``tests/server/test_soak.py`` runs a 2-minute version.
"""

MAX_MODEL_LEN = 1024
# A KV pool small enough that long prompts and n>1 preempt one another now and then (recompute is soaked too).
SERVER_ARGS = (
    "--block-size", "16", "--num-kv-blocks", "160", "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "16",
)  # fmt: skip
