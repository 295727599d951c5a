"""What the platform and the engine agree on, written once: the scheduler budgets (defaults, bounds, the per-device
default rule, the live limits an engine accepts), the admin API's bodies and paths, and the names of the flags
and environment variables the platform starts an engine with.

Torch-free and free of the engine's own code: the engine (``SchedulerConfig``, the admin routes, its flags), the
CRD types, the operator's budget tuner, its renderer and its engine client all import it, so a number two sides
must agree on is typed here and nowhere else.
"""
