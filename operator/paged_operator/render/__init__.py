"""Pure rendering: one ModelDeployment into the manifests of its children (the engine Deployment, Service,
ConfigMap, PodDisruptionBudget and Secret; the router's Deployment, Service, PodDisruptionBudget and RBAC), with
the model and adapter mounts, the pods' security settings and the tracing environment. Nothing here talks to the
API server.
``all_children`` gathers them for one ModelDeployment: the operator applies that list and ``paged-ctl render``
prints it.
"""
