"""Token kubeconfigs: the one file format every Kubernetes client (kubectl, kopf, kubernetes_asyncio, helm) reads."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and who we are to it: enough for any client, in or out of a kubeconfig."""

    server: str
    ca_cert: Path
    token: str
    user: str

    def write_kubeconfig(self, path: Path, namespace: str | None = None) -> Path:
        """Write a self-contained kubeconfig (CA embedded) with one context, current; ``namespace`` becomes its
        default namespace."""
        context: dict[str, str] = {"cluster": "testbed", "user": self.user}
        if namespace is not None:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testbed",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(self.ca_cert.read_bytes()).decode(),
                    },
                }
            ],
            "users": [{"name": self.user, "user": {"token": self.token}}],
            "contexts": [{"name": "testbed", "context": context}],
            "current-context": "testbed",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path
