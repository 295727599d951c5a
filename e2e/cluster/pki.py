"""Certificates and keys for the test bed, made with the openssl CLI (no Python crypto dependency needed).

One CA signs one serving certificate valid for the loopback names every component listens on; the service-account
key pair signs and verifies ServiceAccount tokens."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Names a client may use to reach a loopback-bound component, plus the in-cluster names of the `kubernetes` Service.
SERVING_NAMES = (
    "IP:127.0.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_private_key: Path
    sa_public_key: Path


def _openssl(*args: str | Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl is not installed; the test bed needs it to make certificates")
    result = subprocess.run([openssl, *map(str, args)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(map(str, args[:2]))} failed: {result.stderr.strip()}")


def make_pki(directory: Path, extra_names: tuple[str, ...] = ()) -> Pki:
    """Write a fresh CA, a serving certificate (SANs: ``SERVING_NAMES`` + ``extra_names``) and an EC key pair for
    ServiceAccount tokens into ``directory``. EC P-256 keys: generating them takes milliseconds."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "serving.crt",
        serving_key=directory / "serving.key",
        sa_private_key=directory / "sa.key",
        sa_public_key=directory / "sa.pub",
    )
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", pki.ca_key, "-out", pki.ca_cert, "-days", "3650",
        "-subj", "/CN=paged-testbed-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    csr = directory / "serving.csr"
    sans = ",".join((*SERVING_NAMES, *extra_names))
    _openssl(
        "req", *ec, "-keyout", pki.serving_key, "-out", csr, "-subj", "/CN=paged-testbed",
        "-addext", f"subjectAltName={sans}",
        "-addext", "keyUsage=critical,digitalSignature",
        "-addext", "extendedKeyUsage=serverAuth",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", csr, "-CA", pki.ca_cert, "-CAkey", pki.ca_key, "-CAcreateserial",
        "-days", "365", "-copy_extensions", "copy", "-out", pki.serving_cert,
    )  # fmt: skip
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", pki.sa_private_key)
    _openssl("pkey", "-in", pki.sa_private_key, "-pubout", "-out", pki.sa_public_key)
    return pki
