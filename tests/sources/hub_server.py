"""A small HTTP server that speaks the part of the Hugging Face hub's API that ``huggingface_hub`` uses to
download files, so the real client runs against it through ``HF_ENDPOINT``.

Routes: ``GET /api/models/ORG/NAME[/revision/REV]`` (the model info with its file list, sizes when ``?blobs=True``)
and ``HEAD``/``GET /ORG/NAME/resolve/REV/FILE`` (the file, with ``Range`` support and the ``X-Repo-Commit``,
``X-Linked-Etag`` and ``X-Linked-Size`` headers). Errors carry the hub's ``X-Error-Code`` header (``RepoNotFound``,
``RevisionNotFound``, ``GatedRepo``, ``EntryNotFound``), which is how the client tells them apart.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    branches: dict[str, str] = field(default_factory=dict)
    gated_token: str | None = None
    """When set, requests must carry ``Authorization: Bearer <gated_token>``."""

    @classmethod
    def from_folder(cls, folder: Path, **kwargs: object) -> Repo:
        files = {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}
        return cls(files, **kwargs)  # type: ignore[arg-type]

    def resolve(self, revision: str) -> str | None:
        if revision == self.commit or revision in self.branches.values():
            return revision
        return self.branches.get(revision, self.commit if revision == "main" else None)


@dataclass
class HubState:
    repos: dict[str, Repo] = field(default_factory=dict)
    sizes_in_listing: bool = True
    """False models a listing without sizes: the client then finds out about a full disk only while writing."""
    slow_files: dict[str, float] = field(default_factory=dict)
    """File name -> seconds to sleep between 64 KiB chunks (so a test can interrupt a download mid-file)."""
    drop_once: dict[str, int] = field(default_factory=dict)
    """File name -> byte count after which the first GET of it is cut off (the connection closes mid-body)."""
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(method, path, Range header) of every request."""
    clients: set[str] = field(default_factory=set)
    """The addresses requests came from."""
    lock: threading.Lock = field(default_factory=threading.Lock)


_API = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
CHUNK = 64 << 10


def _handler(state: HubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:
            pass

        def _error(self, status: int, code: str, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _repo(self, repo_id: str) -> Repo | None:
            repo = state.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return None
            if repo.gated_token is not None:
                auth = self.headers.get("Authorization", "")
                if not auth:
                    self._error(401, "GatedRepo", "Access to model is restricted. You must be authenticated.")
                    return None
                if auth != f"Bearer {repo.gated_token}":
                    self._error(403, "GatedRepo", "Access to model is restricted and you are not in the list.")
                    return None
            return repo

        def do_GET(self) -> None:
            self._serve()

        def do_HEAD(self) -> None:
            self._serve()

        def _serve(self) -> None:
            url = urlparse(self.path)
            path = unquote(url.path)
            with state.lock:
                state.requests.append((self.command, path, self.headers.get("Range")))
                state.clients.add(self.client_address[0])
            if match := _API.match(path):
                self._info(match.group(1), match.group(2) or "main", "blobs" in parse_qs(url.query))
            elif match := _RESOLVE.match(path):
                self._file(match.group(1), match.group(2), match.group(3))
            else:
                self._error(404, "NotFound", f"no route {path}")

        def _info(self, repo_id: str, revision: str, blobs: bool) -> None:
            repo = self._repo(repo_id)
            if repo is None:
                return
            commit = repo.resolve(revision)
            if commit is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return
            siblings = []
            for name, data in repo.files.items():
                sibling: dict[str, object] = {"rfilename": name}
                if blobs and state.sizes_in_listing:
                    sibling["size"] = len(data)
                    sibling["blobId"] = hashlib.sha1(data).hexdigest()
                siblings.append(sibling)
            body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": commit, "siblings": siblings}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(body)

        def _file(self, repo_id: str, revision: str, name: str) -> None:
            repo = self._repo(repo_id)
            if repo is None:
                return
            commit = repo.resolve(revision)
            if commit is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return
            data = repo.files.get(name)
            if data is None:
                self._error(404, "EntryNotFound", f"{name} does not exist")
                return
            start = 0
            if (ranged := self.headers.get("Range")) and (m := re.match(r"bytes=(\d+)-", ranged)):
                start = int(m.group(1))
            body = data[start:]
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("X-Linked-Etag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(body)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if self.command != "GET":
                return
            delay = state.slow_files.get(name, 0.0)
            with state.lock:
                cut = state.drop_once.pop(name, None)
            if cut is not None:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            try:
                for offset in range(0, len(body), CHUNK):
                    self.wfile.write(body[offset : offset + CHUNK])
                    self.wfile.flush()
                    if delay:
                        time.sleep(delay)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


class HubServer:
    """The server at a free port of ``host`` (loopback, or the host's end of the real node's link, where its pods
    reach it), in a thread; ``url`` is what ``HF_ENDPOINT`` gets."""

    def __init__(self, state: HubState, host: str = "127.0.0.1") -> None:
        self.state = state
        self._server = ThreadingHTTPServer((host, 0), _handler(state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
