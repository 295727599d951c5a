"""Multi-LoRA serving: PEFT adapters loaded into fixed weight slots and applied per token in a mixed batch.

``registry`` (no torch) decides names, slots and cache ids; ``adapter`` reads a PEFT folder into tensors shaped
for our fused projections; ``layers`` holds the stacked per-slot weights and the batched LoRA matmuls. Runs in the
engine-core process.
"""
