"""A stand-in engine at a kwok pod's IP: ``python stand_in_engine.py HOST PORT MAX_NUM_SEQS MAX_NUM_BATCHED_TOKENS``.

It answers what the operator asks an engine (``/ready``, and ``/metrics`` with every metric the autoscaler
needs, ``tests/operator/operator_exposition``, reporting the budgets it was started with: the spec's, so no
push is due), and ``POST /control {"waiting": N}`` sets the queue it
reports, so a test drives scaling decisions without running a model.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's tests package
from tests.operator.operator_exposition import exposition

load = {"waiting": 0}
budgets = {"max_num_seqs": int(sys.argv[3]), "max_num_batched_tokens": int(sys.argv[4])}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/ready":
            self._send(200, "application/json", b'{"ready": true}')
        elif self.path == "/metrics":
            self._send(200, "text/plain", exposition(kv=0.25, running=1, waiting=load["waiting"], **budgets).encode())
        else:
            self._send(404, "text/plain", b"not found")

    def do_POST(self) -> None:
        if self.path != "/control":
            self._send(404, "text/plain", b"not found")
            return
        load.update(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
        self._send(200, "application/json", json.dumps(load).encode())

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the operator asks every few seconds: keep the log for errors


if __name__ == "__main__":
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
