"""The API server process: the FastAPI applications (``app``, ``admin``), the OpenAI and Anthropic protocols and
request handling with SSE (``protocol``, ``serving``, ``anthropic``), the client of the engine-core process
(``engine_client``), its configuration (``config``: the server's flags), metrics and tracing, and the process's
start and shutdown (``launcher``). Nothing here imports torch or runs the model.
"""
