"""Model execution: persistent input batch, paged KV-cache allocation and the model runner."""
