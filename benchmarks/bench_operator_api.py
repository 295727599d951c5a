"""API-server requests per minute the operator causes, for 1, 10 and 50 ModelDeployments, with the children read by
GET/LIST each decision (``--no-child-watches``, as before) and from kopf's watches (the default).

On the test bed (kube-apiserver + etcd + kwok nodes on loopback): per size and mode, a fresh namespace gets N
ModelDeployments (one replica each, decisions every ``--interval`` seconds), one ``paged-operator`` process
watches it, and once every ModelDeployment is reconciled and a warm-up has passed, two windows are counted from
the API server's own ``apiserver_request_total`` for the resources the operator uses: one with the operator
running, one after it stopped (the rest of the control plane: kwok, the controller manager, the scheduler).
Their difference is the operator's load. The operator's own count of the requests its client sent
(``paged_operator_api_requests_total``, which leaves out kopf's watches) is printed next to it, by verb and
resource.

    python benchmarks/bench_operator_api.py                     # 1, 10, 50 × both modes (~15 minutes)
    python benchmarks/bench_operator_api.py --sizes 10 --window 30
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paged_platform.crd import crd  # noqa: E402

from e2e.cluster.binaries import ensure_binaries  # noqa: E402
from e2e.cluster.client import APPLY_PATCH, ApiError, KubeClient, wait_for  # noqa: E402
from e2e.cluster.controlplane import running_control_plane  # noqa: E402

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.M)
OPERATOR_TOTAL = re.compile(r"^paged_operator_api_requests_total\{([^}]*)\} (\S+)$", re.M)


def labels(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


#: What the operator reads and writes, less what the rest of the test bed keeps writing with or without it:
#: node Leases and heartbeats (kwok), Events and the status of pods, ReplicaSets, Deployments and
#: PodDisruptionBudgets (pod readiness the control plane flips now and then). The operator writes none of those
#: in a steady state (an Event only with a decision), so counting the rest keeps the background out.
OPERATOR_RESOURCES = frozenset(
    {"modeldeployments", "deployments", "configmaps", "pods", "secrets", "services", "poddisruptionbudgets",
     "customresourcedefinitions"}
)  # fmt: skip


def apiserver_counts(client: httpx.Client) -> Counter[tuple[str, str]]:
    """(verb, resource) → requests served so far (all clients), for the operator's resources. A watch counts
    when it ends (kopf renews each every ``--watch-timeout``, 5 minutes): long windows see them."""
    counts: Counter[tuple[str, str]] = Counter()
    for raw, value in REQUEST_TOTAL.findall(client.get("/metrics").text):
        lab = labels(raw)
        resource, sub = lab.get("resource", ""), lab.get("subresource", "")
        if resource not in OPERATOR_RESOURCES or (sub and resource != "modeldeployments"):
            continue
        counts[(lab.get("verb", ""), f"{resource}/{sub}" if sub else resource)] += int(float(value))
    return counts


def operator_counts(port: int) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    for raw, value in OPERATOR_TOTAL.findall(text):
        lab = labels(raw)
        counts[(lab["verb"], lab["resource"])] += int(float(value))
    return counts


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_deployment(name: str, interval: int) -> dict:
    return {
        "apiVersion": "paged.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name},
        "spec": {
            "resources": {"cpu": "10m", "memory": "16Mi"},
            "replicas": {"min": 1, "max": 2},
            "autoscaling": {"intervalSeconds": interval},
        },
    }


def per_minute(delta: Counter[tuple[str, str]], seconds: float) -> dict[tuple[str, str], float]:
    return {k: v * 60.0 / seconds for k, v in delta.items() if v}


def measure(admin: KubeClient, metrics: httpx.Client, kubeconfig: Path, workdir: Path, args: argparse.Namespace,
            n: int, watches: bool) -> dict[str, object]:  # fmt: skip
    ns = f"bench-{n}-{'watch' if watches else 'poll'}-{secrets.token_hex(2)}"
    admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for("default ServiceAccount", lambda: admin.exists(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 30)
    for i in range(n):
        admin.create(
            f"/apis/paged.dev/v1alpha1/namespaces/{ns}/modeldeployments", model_deployment(f"m{i}", args.interval)
        )
    key = workdir / "token-key"
    key.write_text(secrets.token_urlsafe(48))
    port, health = free_port(), free_port()
    command = [sys.executable, "-m", "paged_operator.cli", "run", "--standalone", "--namespace", ns,
               "--liveness", f"http://127.0.0.1:{health}/healthz", "--metrics-port", str(port),
               "--metrics-address", "127.0.0.1", "--token-key-file", str(key), "--scrape-timeout", "1",
               "--log-level", "warning", *([] if watches else ["--no-child-watches"])]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    log = (args.log_dir / f"operator-{ns}.log").open("wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def reconciled() -> bool:
            items = admin.get(f"/apis/paged.dev/v1alpha1/namespaces/{ns}/modeldeployments")["items"]
            return sum(1 for md in items if (md.get("status") or {}).get("observedGeneration") == 1) == n

        wait_for(f"{n} ModelDeployments reconciled", reconciled, timeout_s=300, interval_s=1)
        time.sleep(args.warmup)
        before, own_before, t0 = apiserver_counts(metrics), operator_counts(port), time.monotonic()
        time.sleep(args.window)
        after, own_after, t1 = apiserver_counts(metrics), operator_counts(port), time.monotonic()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    time.sleep(5)  # let the stop settle (kopf's last patches)
    idle0, s0 = apiserver_counts(metrics), time.monotonic()
    time.sleep(args.window)
    idle1, s1 = apiserver_counts(metrics), time.monotonic()
    for i in range(n):  # kopf's finalizer (for the daemons) would hold the namespace's deletion with no operator
        admin.patch(
            f"/apis/paged.dev/v1alpha1/namespaces/{ns}/modeldeployments/m{i}", {"metadata": {"finalizers": None}}
        )
    admin.delete(f"/api/v1/namespaces/{ns}")
    wait_for(f"namespace {ns} gone", lambda: not admin.exists(f"/api/v1/namespaces/{ns}"), timeout_s=300, interval_s=1)
    busy = per_minute(after - before, t1 - t0)
    idle = per_minute(idle1 - idle0, s1 - s0)
    own = per_minute(own_after - own_before, t1 - t0)
    total = sum(busy.values()) - sum(idle.values())
    return {"n": n, "watches": watches, "total": total, "busy": busy, "idle": idle, "own": own}


def served(admin: KubeClient) -> bool:
    try:
        admin.get("/apis/paged.dev/v1alpha1/modeldeployments")
    except (ValueError, ApiError):  # not served yet: a plain-text 404
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,50", help="numbers of ModelDeployments")
    parser.add_argument("--interval", type=int, default=15, help="autoscaling.intervalSeconds of each")
    parser.add_argument("--window", type=float, default=60.0, help="seconds counted, with and without the operator")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds after every object is reconciled")
    parser.add_argument("--verbose", action="store_true", help="print each window's requests by verb and resource")
    parser.add_argument("--log-dir", type=Path, default=None, help="where the operators' logs go (default: a new one)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="bench-operator-api-logs-"))
    args.log_dir.mkdir(parents=True, exist_ok=True)
    print(f"operator logs: {args.log_dir}", flush=True)
    binaries = ensure_binaries()
    with (
        tempfile.TemporaryDirectory(prefix="bench-operator-api-") as tmp,
        running_control_plane(binaries, Path(tmp) / "kube") as plane,
    ):
        workdir = Path(tmp)
        admin = plane.admin_client()
        admin.request("PATCH", f"{CRDS}/modeldeployments.paged.dev", crd(),
                      params={"fieldManager": "bench", "force": "true"}, content_type=APPLY_PATCH)  # fmt: skip
        wait_for("CRD served", lambda: served(admin), 60)
        creds = plane.admin
        metrics = httpx.Client(base_url=creds.server, verify=str(creds.ca_cert),
                               headers={"Authorization": f"Bearer {creds.token}"}, timeout=30)  # fmt: skip
        kubeconfig = creds.write_kubeconfig(workdir / "admin.kubeconfig")
        rows = []
        for n in sizes:
            for watches in (False, True):
                row = measure(admin, metrics, kubeconfig, workdir, args, n, watches)
                rows.append(row)
                own = row["own"]
                assert isinstance(own, dict)
                top = ", ".join(f"{v} {r} {c:.0f}" for (v, r), c in sorted(own.items(), key=lambda kv: -kv[1])[:6])
                mode = "watch" if watches else "poll"
                print(f"n={n:3d} {mode:5s}: {row['total']:7.1f} requests/min at the API server; own client: {top}",
                      flush=True)  # fmt: skip
                if args.verbose:
                    busy, idle = row["busy"], row["idle"]
                    assert isinstance(busy, dict) and isinstance(idle, dict)
                    for key in sorted(set(busy) | set(idle)):
                        print(f"    {key[0]:7s} {key[1]:32s} {busy.get(key, 0):7.1f} - {idle.get(key, 0):7.1f}")
    print(f"\n{'ModelDeployments':>16} | {'GET/LIST each decision':>22} | {'watches':>8} | ratio")
    by = {(r["n"], r["watches"]): r["total"] for r in rows}
    for n in sizes:
        poll, watch = by[(n, False)], by[(n, True)]
        assert isinstance(poll, float) and isinstance(watch, float)
        print(f"{n:>16} | {poll:>22.0f} | {watch:>8.0f} | {watch / poll if poll else float('nan'):.2f}")


if __name__ == "__main__":
    main()
