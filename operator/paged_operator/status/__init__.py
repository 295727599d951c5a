"""The ModelDeployment's status: the conditions and decisions built from a plan (``builder``, ``model_ready``,
``api_outage``), and written back with optimistic concurrency (``writer``).
"""
