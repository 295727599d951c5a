"""Where a model comes from: a local folder or ``.gguf`` file, a Hugging Face repo, or an S3 prefix.

``spec`` parses what the user wrote into a source (pure); ``selection`` decides which files serving needs and
whether they fit (pure); ``cache`` lays out and publishes downloads atomically; ``hub`` and ``s3`` do the
transfers; ``fetch`` ties them together. A download is staged under the cache and renamed into place only when
complete, so a later start never sees a half-written model.
"""
