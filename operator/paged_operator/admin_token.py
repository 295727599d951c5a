"""Engine admin tokens derived from one operator key, so the operator never needs to read a Secret.

``token = base64url(HMAC-SHA256(key, uid))`` for a ModelDeployment's uid. The operator writes each token
into the ModelDeployment's admin Secret once (``create``; the engines read it through ``secretKeyRef``)
and computes it again whenever it calls ``/admin``: its RBAC grants ``create`` on Secrets and no read
at all, so it cannot read any Secret, its own or anyone else's. The key reaches the process as a file
(the chart mounts its own Secret, which the kubelet reads, not the operator).

Rotating the key changes every token: delete the admin Secrets (the operator re-creates them) and
restart the engines, which read the token at start.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

#: Shortest key accepted (bytes): HMAC-SHA256 keys shorter than the hash add no strength beyond their length.
MIN_KEY_BYTES = 32


class TokenKeyError(ValueError):
    """The key file is missing, unreadable or too short."""


def load_key(path: Path) -> bytes:
    """The key from ``path`` (surrounding whitespace ignored, e.g. a trailing newline)."""
    try:
        key = path.read_bytes().strip()
    except OSError as exc:
        raise TokenKeyError(f"--token-key-file {path}: cannot read it ({exc.strerror})") from exc
    if len(key) < MIN_KEY_BYTES:
        raise TokenKeyError(f"--token-key-file {path}: the key has {len(key)} bytes, at least {MIN_KEY_BYTES} needed")
    return key


def derive(key: bytes, uid: str) -> str:
    """The admin token of the ModelDeployment with this uid (a new object, even of the same name, gets another)."""
    if not uid:
        raise ValueError("a ModelDeployment uid is needed to derive its admin token")
    digest = hmac.new(key, uid.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
