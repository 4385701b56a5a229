"""A hostile HTTP server on 127.0.0.1 for the client's and the drafters'
failure tests: a real threaded ``http.server`` on a real socket that answers
what a confused or malicious draftd (or whatever listens on its address)
might: a gzip header on a body that is not gzip, a /v1/info of the wrong
types, draft ids outside the vocabulary, answers longer than asked, an
answer dribbled a few bytes at a time, endless ``102`` interim answers, a
409 after a delay. It is not a fake of draftd: each test says what every
route answers, and the drafts it serves are whatever the test makes it
send.

``Hostile(routes)``: ``routes[(method, path)]`` is a function of the
request (``Req``: method, path, body as JSON or None) that returns an
``Answer`` (status, JSON body or raw bytes, headers, how to send it).
Every request is logged in ``requests``; ``closed`` counts answers the
client stopped reading (the connection closed under the server).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: A /v1/info of a 512-token model, the shape draftd answers.
INFO: dict[str, Any] = {
    "architecture": "qwen2", "model": "hostile", "parameters": 1000, "weight_bytes": 4000,
    "weight_types": {"F32": 1}, "weight_mix": {"F32": {"tensors": 1, "parameters": 1000, "bytes": 4000,
                                                      "bits_per_weight": 32.0}},
    "bits_per_weight": 32.0, "vocab_size": 512, "max_context": 256, "hidden_size": 8, "num_layers": 1,
    "num_heads": 1, "num_kv_heads": 1, "head_dim": 8, "max_draft_len": 64, "strategy": "model",
    "strategies": ["model", "lookup", "hybrid", "pld"], "trust_match": 4, "min_match": 2, "lookup_choice": "last",
    "kernels": "generic", "threads": 1, "kv_cache_type": "f32", "max_batch": 8, "max_queue": 64, "draft_len": 16,
    "version": "hostile", "build": {},
}


@dataclass
class Req:
    method: str
    path: str
    body: Any


@dataclass
class Answer:
    """status and body (a JSON value, or bytes sent as they are); ``dribble``
    > 0 sends the body ``chunk`` bytes at a time, ``dribble`` seconds apart;
    ``interim`` > 0 sends ``102 Processing`` every ``interim`` seconds, for
    ``interim_for`` seconds, before the answer; ``delay`` seconds before
    anything."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    dribble: float = 0.0
    chunk: int = 2
    interim: float = 0.0
    interim_for: float = 0.0
    delay: float = 0.0


Route = Callable[[Req], Answer]


def draft(tokens: list[int]) -> Route:
    """/draft answering ``tokens`` to every request."""
    return lambda r: Answer(200, {"draft": tokens})


def drafts(tokens: list[int]) -> Route:
    """/v1/drafts answering ``tokens`` to every item, ids echoed."""
    return lambda r: Answer(200, {"drafts": [{"id": it.get("id"), "draft": tokens} for it in r.body["requests"]]})


class Hostile:
    def __init__(self, routes: dict[tuple[str, str], Route] | None = None, info: dict[str, Any] | None = None) -> None:
        self.routes: dict[tuple[str, str], Route] = {
            ("GET", "/v1/info"): lambda r: Answer(200, info if info is not None else INFO),
            ("GET", "/health"): lambda r: Answer(200, {"status": "ok"}),
        }
        self.routes.update(routes or {})
        self.requests: list[Req] = []
        self.closed = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                path = self.path.split("?")[0]
                req = Req(self.command, path, json.loads(raw) if raw else None)
                with outer._lock:
                    outer.requests.append(req)
                route = outer.routes.get((self.command, path))
                if route is None and self.command == "DELETE" and path.startswith("/v1/sessions/"):
                    route = lambda r: Answer(204)  # noqa: E731
                ans = route(req) if route is not None else Answer(404, {"error": {"code": "not_found", "message": path}})
                try:
                    outer._send(self, ans)
                except OSError:  # the client closed the connection under us
                    with outer._lock:
                        outer.closed += 1
                    self.close_connection = True

            do_GET = do_POST = do_DELETE = _serve

        self._srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"
        self._thread = threading.Thread(target=self._srv.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, a: Answer) -> None:
        if a.delay:
            time.sleep(a.delay)
        if a.interim:
            end = time.monotonic() + a.interim_for
            while time.monotonic() < end:
                h.wfile.write(b"HTTP/1.1 102 Processing\r\n\r\n")
                h.wfile.flush()
                time.sleep(a.interim)
        body = b"" if a.body is None else a.body if isinstance(a.body, bytes) else json.dumps(a.body).encode()
        h.send_response(a.status)
        for k, v in a.headers.items():
            h.send_header(k, v)
        if a.body is not None:
            h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.flush()
        if not a.dribble:
            h.wfile.write(body)
            h.wfile.flush()
            return
        for i in range(0, len(body), a.chunk):
            h.wfile.write(body[i: i + a.chunk])
            h.wfile.flush()
            time.sleep(a.dribble)

    def count(self, method: str, path: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.method == method and r.path == path)

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()

    def __enter__(self) -> Hostile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
