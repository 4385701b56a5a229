"""A small client of an OpenAI-compatible completions server (``vllm serve``,
``python -m draftd.llamacpp_server``) for the served tests and benches:
streaming completions of token-id or text prompts, each token with its
arrival time and, where the server gives them, its top log-probabilities;
requests run concurrently on threads; a request can be abandoned mid-stream
(the client closes the connection, which the server takes as an abort).
Also the server's ``/metrics`` read as {name{labels}: value}. Shared by
tests/test_vllm_serve.py, tests/test_llamacpp_server.py and the served
load benches (bench/vllm_serve_load.py, bench/llamacpp_serve_load.py)."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from draftd._testing import metrics as _metrics

_TOKEN_ID = re.compile(r"token_id:(-?\d+)\Z")


@dataclass
class Stream:
    """One streamed completion: ``tokens`` (ids where the server names
    them, vLLM's ``return_tokens_as_token_ids``; else the token strings),
    ``text``, ``top`` (per
    token, [[id, logprob], …] best first), ``times`` (perf_counter of each
    token's arrival), ``sent`` (when the request was sent), ``finish``
    (the finish reason; "abandoned" when the client stopped reading),
    ``error`` (a failed request)."""

    tokens: list[Any] = field(default_factory=list)
    text: str = ""
    top: list[list[tuple[Any, float]]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    sent: float = 0.0
    finish: str | None = None
    error: str | None = None

    @property
    def ttft(self) -> float:
        return self.times[0] - self.sent

    def itl(self) -> list[float]:
        """Inter-token latencies: the gaps between successive tokens (0 for
        tokens that arrived in the same chunk)."""
        return [b - a for a, b in zip(self.times, self.times[1:])]


def _token(s: str) -> Any:
    """The id in 'token_id:N', else the token string itself."""
    m = _TOKEN_ID.match(s)
    return s if m is None else int(m.group(1))


def complete(url: str, body: dict[str, Any], *, stop_after: int | None = None, path: str = "/v1/completions",
             timeout: float = 1200.0, on_chunk: Any = None) -> Stream:
    """POSTs body (``stream`` forced on) and reads the stream; with
    ``stop_after`` the connection is closed once that many tokens arrived
    (or chunks, when the server does not name tokens); ``on_chunk(stream)``
    is called after each chunk."""
    out = Stream()
    body = dict(body, stream=True)
    chat = path.endswith("/chat/completions")
    out.sent = time.perf_counter()
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0)) as c, \
                c.stream("POST", url + path, json=body) as r:
            if r.status_code != 200:
                r.read()
                out.error = f"HTTP {r.status_code}: {r.text[:500]}"
                return out
            chunks = 0
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                if "error" in msg:
                    out.error = json.dumps(msg["error"])[:500]
                    break
                now = time.perf_counter()
                for ch in msg.get("choices", []):
                    piece = (ch.get("delta") or {}).get("content") if chat else ch.get("text")
                    lp = ch.get("logprobs")
                    if lp and not chat and lp.get("tokens"):
                        for tok, top in zip(lp["tokens"], lp.get("top_logprobs") or [None] * len(lp["tokens"])):
                            out.tokens.append(_token(tok))
                            out.top.append(sorted(((_token(k), float(v)) for k, v in (top or {}).items()),
                                                  key=lambda kv: -kv[1]))
                            out.times.append(now)
                    elif lp and chat and lp.get("content"):
                        for item in lp["content"]:
                            out.tokens.append(_token(item["token"]))
                            out.top.append([(_token(t["token"]), float(t["logprob"]))
                                            for t in item.get("top_logprobs") or []])
                            out.times.append(now)
                    elif piece:
                        out.times.append(now)
                    if piece:
                        out.text += piece
                    if ch.get("finish_reason"):
                        out.finish = ch["finish_reason"]
                chunks += 1
                if on_chunk is not None:
                    on_chunk(out)
                if stop_after is not None and max(len(out.tokens), chunks) >= stop_after:
                    out.finish = "abandoned"
                    break
    except httpx.HTTPError as e:
        out.error = f"{type(e).__name__}: {e}"
    return out


def run_all(url: str, bodies: dict[str, dict[str, Any]], *, stop_after: dict[str, int] | None = None,
            path: str = "/v1/completions") -> dict[str, Stream]:
    """The requests at once, one thread each; {id: Stream}."""
    got: dict[str, Stream] = {}
    stop_after = stop_after or {}

    def one(k: str) -> None:
        got[k] = complete(url, bodies[k], stop_after=stop_after.get(k), path=path)

    threads = [threading.Thread(target=one, args=(k,), name=f"req-{k}") for k in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def metrics(url: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of url + /metrics, read by draftd._testing.metrics
    (prometheus_client's parser)."""
    return _metrics.scrape(url, timeout=30)


def metric(m: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The sum of name's samples whose labels include the given ones."""
    return _metrics.value(m, name, labels)


