"""ServiceAccounts with exactly the RBAC a component is given, and kubeconfigs that act as them, so a test of the
operator runs with the chart's permissions and an RBAC gap fails the test the way it would fail in a cluster."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .client import ApiError, KubeClient
from .kubeconfig import Credentials

RBAC = "/apis/rbac.authorization.k8s.io/v1"
# Collection URL per kind, and whether the kind lives in a namespace.
_COLLECTIONS: dict[str, tuple[str, bool]] = {
    "ServiceAccount": ("/api/v1", True),
    "Role": (RBAC, True),
    "RoleBinding": (RBAC, True),
    "ClusterRole": (RBAC, False),
    "ClusterRoleBinding": (RBAC, False),
}
RBAC_KINDS = frozenset(_COLLECTIONS)


@dataclass
class CreatedObjects:
    """URLs of what a helper created, so a fixture can delete cluster-scoped leftovers (namespaced ones go with
    their namespace)."""

    cluster_scoped: list[str] = field(default_factory=list)

    def delete_all(self, client: KubeClient) -> None:
        while self.cluster_scoped:
            path = self.cluster_scoped.pop()
            try:
                client.delete(path)
            except ApiError as exc:
                if exc.code != 404:
                    raise


def object_path(obj: Mapping[str, Any], namespace: str | None = None) -> tuple[str, str]:
    """(collection URL, object URL) of an RBAC object or ServiceAccount; ``namespace`` fills in a missing one."""
    kind = obj.get("kind", "")
    if kind not in _COLLECTIONS:
        raise ValueError(f"kind {kind!r} is not one of the supported kinds {sorted(_COLLECTIONS)}")
    prefix, namespaced = _COLLECTIONS[kind]
    plural = kind.lower() + "s"
    name = obj["metadata"]["name"]
    if namespaced:
        ns = obj["metadata"].get("namespace") or namespace
        if not ns:
            raise ValueError(f"{kind} {name!r} has no namespace and none was given")
        collection = f"{prefix}/namespaces/{ns}/{plural}"
    else:
        collection = f"{prefix}/{plural}"
    return collection, f"{collection}/{name}"


def create_rbac(
    client: KubeClient, manifests: Iterable[Mapping[str, Any]], namespace: str, created: CreatedObjects
) -> list[dict[str, Any]]:
    """Create the ServiceAccounts, Roles, ClusterRoles and their bindings among ``manifests`` (e.g. a chart's
    ``helm template`` output; other kinds are not this helper's business and are left out) in ``namespace``."""
    out = []
    for obj in manifests:
        if obj.get("kind") not in RBAC_KINDS:
            continue
        body = dict(obj)
        body["metadata"] = dict(obj["metadata"])
        collection, path = object_path(body, namespace)
        if _COLLECTIONS[body["kind"]][1]:
            body["metadata"]["namespace"] = body["metadata"].get("namespace") or namespace
        out.append(client.create(collection, body))
        if not _COLLECTIONS[body["kind"]][1]:
            created.cluster_scoped.append(path)
    return out


def grant(
    client: KubeClient,
    namespace: str,
    service_account: str,
    created: CreatedObjects,
    *,
    rules: Sequence[Mapping[str, Any]] = (),
    cluster_rules: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Create ``service_account`` in ``namespace`` and bind ``rules`` to it in that namespace (a Role) and
    ``cluster_rules`` cluster-wide (a ClusterRole), each under the account's own name."""
    subject = [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]
    cluster_name = f"{namespace}:{service_account}"
    manifests: list[dict[str, Any]] = [{"kind": "ServiceAccount", "metadata": {"name": service_account}}]
    if rules:
        manifests += [
            {"kind": "Role", "metadata": {"name": service_account}, "rules": list(rules)},
            {
                "kind": "RoleBinding",
                "metadata": {"name": service_account},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": service_account},
                "subjects": subject,
            },
        ]
    if cluster_rules:
        manifests += [
            {"kind": "ClusterRole", "metadata": {"name": cluster_name}, "rules": list(cluster_rules)},
            {
                "kind": "ClusterRoleBinding",
                "metadata": {"name": cluster_name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name},
                "subjects": subject,
            },
        ]
    for obj in manifests:
        obj["apiVersion"] = "v1" if obj["kind"] == "ServiceAccount" else "rbac.authorization.k8s.io/v1"
    create_rbac(client, manifests, namespace, created)


def service_account_credentials(
    client: KubeClient, namespace: str, service_account: str, expiration_s: int = 3600
) -> Credentials:
    """A bound token for an existing ServiceAccount, minted by the TokenRequest API as a kubelet would mint one."""
    if not 600 <= expiration_s <= 86400:
        raise ValueError(f"expiration_s={expiration_s}: TokenRequest accepts 600 to 86400 seconds here")
    answer = client.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": expiration_s}},
    )
    return Credentials(
        server=client.credentials.server,
        ca_cert=client.credentials.ca_cert,
        token=answer["status"]["token"],
        user=f"system:serviceaccount:{namespace}:{service_account}",
    )


@dataclass(frozen=True)
class ServiceAccountAccess:
    """What a test needs to act as a ServiceAccount: its credentials and a kubeconfig file for other clients."""

    namespace: str
    name: str
    credentials: Credentials
    kubeconfig: Path

    def client(self) -> KubeClient:
        return KubeClient(self.credentials)


def service_account_access(client: KubeClient, namespace: str, name: str, kubeconfig: Path) -> ServiceAccountAccess:
    creds = service_account_credentials(client, namespace, name)
    return ServiceAccountAccess(namespace, name, creds, creds.write_kubeconfig(kubeconfig, namespace=namespace))
