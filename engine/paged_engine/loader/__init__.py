"""Model loaders: Hugging Face folders, GGUF files, and the default Gemma 3 270M package. Run in the engine-core
process (downloads of remote sources: in the ``paged-engine`` process before it starts the core, or an init
container's ``paged-engine download``)."""
