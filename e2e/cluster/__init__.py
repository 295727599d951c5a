"""A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver, controller-manager, scheduler and
kwok, built from Go modules (``build.sh``) and started by the pytest plugin in ``pytest_plugin``."""
