"""Model execution: persistent input batch, paged KV-cache allocation and the model runner. Runs in the
engine-core process (with several devices, a worker process per rank)."""
