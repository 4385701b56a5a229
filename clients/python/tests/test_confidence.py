"""The client side of confidence-bounded drafts (docs/protocol.md;
``min_confidence`` and ``confidences`` in requests, ``stop_reason`` and
``confidences`` in answers): the request bodies Client, AsyncClient, Session
and session_drafts send, and how they read the answers, against a small HTTP
server on a loopback socket that records every body and answers as the
protocol says (the drafting server gains the fields on its own branch; the
end-to-end checks against ``draftd serve`` are its tests).

The server's drafter here: the chain after any context is tokens 100, 101,
… with confidences CHAIN_CONF (``chain_prob``: their running products); a
bound x stops it before the first token whose confidence is below x."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import draftd
from draftd.types import DraftRequest
from hostile import INFO

CHAIN_CONF = [0.9, 0.8, 0.6, 0.3, 0.2, 0.9, 0.9, 0.9]


def answer(item: dict[str, Any]) -> dict[str, Any]:
    """The protocol's answer to one request object (no session state:
    an incremental request drafts as a full one)."""
    n = item.get("n", 4)
    bound = item.get("min_confidence", 0)
    conf = list(CHAIN_CONF)
    if item.get("confidence_signal") == "chain_prob":  # the running product
        for i in range(1, len(conf)):
            conf[i] *= conf[i - 1]
    k = n
    stop = "n"
    for i in range(n):
        if bound > 0 and conf[i] < bound:
            k, stop = i, "confidence"
            break
    out: dict[str, Any] = {"draft": list(range(100, 100 + k))}
    if bound > 0 or item.get("confidences"):
        out["stop_reason"] = stop
    if item.get("confidences"):
        out["confidences"] = conf[:k]
    return out


class Fake(ThreadingHTTPServer):
    bodies: list[tuple[str, Any]]
    override: dict[str, Any] | None = None  # a fixed answer body, for malformed answers
    info: dict[str, Any] = INFO  # the /v1/info answer


class Handler(BaseHTTPRequestHandler):
    server: Fake

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        # the client reads /v1/info before its first draft (the vocabulary
        # its answers are checked against): hostile.py's description
        if self.path != "/v1/info":
            self.send_error(404)
            return
        self.send_json(self.server.info)

    def send_json(self, out: Any) -> None:
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append((self.path, body))
        if self.server.override is not None:
            out: Any = self.server.override
        elif self.path == "/draft":
            out = answer(body)
        else:
            out = {"drafts": [{"id": r.get("id"), **answer(r)} for r in body["requests"]]}
        self.send_json(out)


@pytest.fixture
def fake() -> Iterator[Fake]:
    srv = Fake(("127.0.0.1", 0), Handler)
    srv.bodies = []
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def url(srv: Fake) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_draft_bound_and_confidences(fake: Fake) -> None:
    with draftd.Client(url(fake)) as c:
        d = c.draft([1, 2, 3], 8, min_confidence=0.5, confidences=True)
        plain = c.draft([1, 2, 3], 8)
        off = c.draft([1, 2, 3], 8, min_confidence=0)
        asked = c.draft([1, 2, 3], 2, confidences=True)
        chain = c.draft([1, 2, 3], 8, min_confidence=0.1, confidence_signal="chain_prob")
        with pytest.raises(TypeError, match="confidence_signal"):
            c.draft([1, 2, 3], 8, confidence_signal="")
    assert fake.bodies == [
        ("/draft", {"tokens": [1, 2, 3], "n": 8, "min_confidence": 0.5, "confidences": True}),
        ("/draft", {"tokens": [1, 2, 3], "n": 8}),
        ("/draft", {"tokens": [1, 2, 3], "n": 8, "min_confidence": 0.0}),  # 0: the bound off, said explicitly
        ("/draft", {"tokens": [1, 2, 3], "n": 2, "confidences": True}),
        ("/draft", {"tokens": [1, 2, 3], "n": 8, "min_confidence": 0.1, "confidence_signal": "chain_prob"}),
    ]
    assert (chain.tokens, chain.stop_reason) == ([100, 101, 102, 103], "confidence")  # 0.9·0.8·0.6·0.3 ≥ 0.1 > ·0.2
    assert (d.tokens, d.stop_reason, d.confidences) == ([100, 101, 102], "confidence", [0.9, 0.8, 0.6])
    assert (plain.tokens, plain.stop_reason, plain.confidences) == (list(range(100, 108)), None, None)
    assert (off.stop_reason, off.confidences) == (None, None)
    assert (asked.tokens, asked.stop_reason, asked.confidences) == ([100, 101], "n", [0.9, 0.8])


def test_extend_and_batch(fake: Fake) -> None:
    with draftd.Client(url(fake)) as c:
        e = c.extend("s1", 2, 7, 4, min_confidence=0.85)
        rs = c.drafts([DraftRequest(tokens=[1], n=8, id="a", min_confidence=0.7, confidences=True),
                       DraftRequest(tokens=[2], n=3, id="b")])
    assert fake.bodies[0] == ("/draft", {"session": "s1", "accepted": 2, "bonus": 7, "n": 4, "min_confidence": 0.85})
    assert fake.bodies[1] == ("/v1/drafts", {"requests": [
        {"id": "a", "tokens": [1], "n": 8, "min_confidence": 0.7, "confidences": True},
        {"id": "b", "tokens": [2], "n": 3}]})
    assert (e.tokens, e.stop_reason, e.confidences) == ([100], "confidence", None)
    assert (rs[0].result().tokens, rs[0].stop_reason, rs[0].confidences) == ([100, 101], "confidence", [0.9, 0.8])
    assert (rs[1].result().tokens, rs[1].stop_reason, rs[1].confidences) == ([100, 101, 102], None, None)


def test_session_carries_the_bound(fake: Fake) -> None:
    with draftd.Client(url(fake)) as c:
        s = c.session("conv-1", n=4, min_confidence=0.5, confidences=True)
        d1 = s.draft([1, 2, 3])
        d2 = s.draft([1, 2, 3, *d1.tokens[:1], 9], min_confidence=0.7)  # this draft's bound only
        s.min_confidence = None  # from now on not sent: the server's default
        s.draft([1, 2, 3, *d1.tokens[:1], 9, *d2.tokens[:1], 5])
        s2 = c.session("conv-2", n=2, confidence_signal="chain_prob")
        c.session_drafts([(s, [1, 2, 3, 100, 9, 100, 5, 100, 4]), (s2, [8])])
    assert [b for _, b in fake.bodies] == [
        {"session": "conv-1", "tokens": [1, 2, 3], "n": 4, "min_confidence": 0.5, "confidences": True},
        {"session": "conv-1", "accepted": 1, "bonus": 9, "n": 4, "min_confidence": 0.7, "confidences": True},
        {"session": "conv-1", "accepted": 1, "bonus": 5, "n": 4, "confidences": True},
        {"requests": [{"id": "conv-1", "session": "conv-1", "accepted": 1, "bonus": 4, "n": 4, "confidences": True},
                      {"id": "conv-2", "session": "conv-2", "tokens": [8], "n": 2,
                       "confidence_signal": "chain_prob"}]},
    ]
    assert d1.tokens == [100, 101, 102] and d1.stop_reason == "confidence"
    assert d2.tokens == [100, 101] and d2.confidences == [0.9, 0.8]
    assert (s.min_confidence, s.confidences) == (None, True)


def test_async(fake: Fake) -> None:
    async def run() -> tuple[draftd.Draft, draftd.Draft, list[draftd.DraftResult]]:
        async with draftd.AsyncClient(url(fake)) as c:
            d = await c.draft([1], 8, min_confidence=0.25, confidences=True)
            s = c.session("a1", n=8, min_confidence=0.65)
            sd = await s.draft([1])
            rs = await c.session_drafts([(s, [1, 100, 7])])
            return d, sd, rs

    d, sd, rs = asyncio.run(run())
    assert [b for _, b in fake.bodies] == [
        {"tokens": [1], "n": 8, "min_confidence": 0.25, "confidences": True},
        {"session": "a1", "tokens": [1], "n": 8, "min_confidence": 0.65},
        {"requests": [{"id": "a1", "session": "a1", "accepted": 1, "bonus": 7, "n": 8, "min_confidence": 0.65}]},
    ]
    assert (d.tokens, d.stop_reason, d.confidences) == ([100, 101, 102, 103], "confidence", [0.9, 0.8, 0.6, 0.3])
    assert (sd.tokens, sd.stop_reason, sd.confidences) == ([100, 101], "confidence", None)
    assert rs[0].stop_reason == "confidence"


@pytest.mark.parametrize("bad, exc", [(-0.1, ValueError), (1.5, ValueError), (float("nan"), ValueError),
                                      (float("inf"), ValueError), (True, TypeError), ("0.5", TypeError)])
def test_bad_bound_is_refused_before_sending(fake: Fake, bad: Any, exc: type[Exception]) -> None:
    with draftd.Client(url(fake)) as c:
        with pytest.raises(exc, match="min_confidence"):
            c.draft([1], 4, min_confidence=bad)
        with pytest.raises(exc, match="min_confidence"):
            c.session(min_confidence=bad)
        s = c.session()
        with pytest.raises(exc, match="min_confidence"):
            s.min_confidence = bad
        with pytest.raises(exc, match="min_confidence"):
            s.draft([1], min_confidence=bad)
    with pytest.raises(TypeError, match="confidences"):
        DraftRequest(tokens=[1], confidences="yes")  # type: ignore[arg-type]
    assert fake.bodies == []


@pytest.mark.parametrize("body, what", [
    ({"draft": [1, 2], "stop_reason": 3}, "stop_reason"),
    ({"draft": [1, 2], "stop_reason": "n", "confidences": [0.5]}, "confidences"),
    ({"draft": [1, 2], "stop_reason": "n", "confidences": [0.5, 1.5]}, "confidences"),
    ({"draft": [1, 2], "stop_reason": "n", "confidences": [0.5, True]}, "confidences"),
    ({"draft": [1, 2], "stop_reason": "n", "confidences": {"a": 1}}, "confidences"),
])
def test_malformed_answers(fake: Fake, body: dict[str, Any], what: str) -> None:
    fake.override = body
    with draftd.Client(url(fake)) as c:
        with pytest.raises(draftd.ProtocolError, match=what):
            c.draft([1], 2, confidences=True)
    fake.override = {"drafts": [{"id": None, **body}]}
    with draftd.Client(url(fake)) as c:
        with pytest.raises(draftd.ProtocolError, match=what):
            c.drafts([DraftRequest(tokens=[1], n=2, confidences=True)])
