"""Model loaders: Hugging Face folders, GGUF files, and the default Gemma 3 270M package."""
