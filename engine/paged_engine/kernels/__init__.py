"""Our C++ and CUDA kernels (``csrc/``) as torch ops: their build (``build``), the Python bindings (``ops``), what
the CPU supports (``cpu_features``, torch-free), and which instruction-set variant each CPU kernel family runs
(``cpu_isa``, timed by ``isa_tune``).

Runs where the model runs: the engine-core process (and, with more than one device, each worker process). The
attention backends that call these kernels are in ``paged_engine.attention``.
"""
