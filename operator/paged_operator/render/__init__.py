"""Pure rendering: one ModelDeployment into the manifests of its children (the engine Deployment, Service,
ConfigMap, PodDisruptionBudget and Secret; the optional NetworkPolicy; the router's Deployment, Service,
PodDisruptionBudget and RBAC), with the model and adapter mounts, the pods' security settings and the tracing
environment, and what the operator's configuration adds (``settings``: its images, who its NetworkPolicy admits).
Nothing here talks to the API server.
``all_children`` gathers them for one ModelDeployment: the operator applies that list and ``paged-ctl render``
prints it.
"""
