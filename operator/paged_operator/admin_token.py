"""Engine admin tokens derived from one operator key, so the operator never needs to read a Secret.

``token = base64url(HMAC-SHA256(key, uid))`` for a ModelDeployment's uid. The operator writes each token
into the ModelDeployment's admin Secret once (``create``; the engines read it through ``secretKeyRef``)
and computes it again whenever it calls ``/admin``: its RBAC grants ``create`` on Secrets and no read
at all, so it cannot read any Secret, its own or anyone else's. The key reaches the process as a file
(the chart mounts its own Secret, which the kubelet reads, not the operator).

The key itself is generated once, by the operator (``obtain_key``): the chart mounts its Secret, optional, and
renders none of its own, so ``helm template`` (Argo CD, Flux) renders the same objects every time. An operator
whose mount is empty creates the Secret with a fresh key and uses it (create only: still no read); one that finds
it taken by another replica waits for the kubelet to mount it. A key can also be provided: a Secret of one's own
mounted instead (the chart's ``tokenKey.existingSecret``).

Rotating the key changes every token: delete the admin Secrets (the operator re-creates them) and
restart the engines, which read the token at start.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
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


def new_key() -> bytes:
    return secrets.token_urlsafe(48).encode()


def secret_data(key: bytes) -> dict[str, str]:
    """The key Secret's ``data``: one file, ``key``, as the chart mounts it."""
    return {"key": base64.b64encode(key).decode()}


async def obtain_key(
    path: Path, create: Callable[[bytes], Awaitable[bool]], *, wait_s: float = 180.0, poll_s: float = 2.0
) -> bytes:
    """The key from the mounted ``path``; if nothing is mounted yet, a new key that ``create`` stores as the Secret
    (True: created). If another replica created it first, the kubelet mounts it within its sync period."""
    if path.is_file():
        return load_key(path)
    key = new_key()
    if await create(key):
        return key
    for _ in range(max(1, round(wait_s / poll_s))):
        if path.is_file():
            return load_key(path)
        await asyncio.sleep(poll_s)
    raise TokenKeyError(
        f"--token-key-file {path}: the key Secret exists but was not mounted within {wait_s:g} s (is the operator's "
        "Secret volume mounted from it?)"
    )


def derive(key: bytes, uid: str) -> str:
    """The admin token of the ModelDeployment with this uid (a new object, even of the same name, gets another)."""
    if not uid:
        raise ValueError("a ModelDeployment uid is needed to derive its admin token")
    digest = hmac.new(key, uid.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
