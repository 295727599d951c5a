"""The operator's I/O: the Kubernetes API (``kube``, ``child_reads``), the engines' admin API (``engine_admin``),
their metrics (``metrics_source``: each pod's ``/metrics`` or a Prometheus server) and the routers' demand.
Every call has its own timeout; a failing pod becomes a value, not an exception.
"""
