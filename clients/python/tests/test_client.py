"""Client and AsyncClient against real ``draftd serve`` processes on random
test models (``draftd testmodel``), over real loopback sockets: answers,
every error the server can be made to answer, retries of 503 Retry-After
(and of nothing else), timeouts, keep-alive. Drafts are checked against
``draftd generate`` on the same file (the engine's greedy chain through the
CLI, not through this client)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

import draftd
from draftd._testing import metrics

KV = ("--kv-cache-bytes", str(64 << 20))


def generate(draftd_bin: Path, model: Path, tokens: list[int], n: int) -> list[int]:
    out = subprocess.run(
        [str(draftd_bin), "generate", "--model", str(model), "--prompt-ids", ",".join(map(str, tokens)),
         "-n", str(n), "--json"], check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)["tokens"]


def metric(url: str, name: str, **labels: str) -> float:
    """The sum of the server's /metrics samples called name with these labels."""
    return metrics.value(metrics.scrape(url), name, labels)


@pytest.fixture
def tiny(serve, test_model):  # type: ignore[no-untyped-def]
    s = serve(test_model, *KV)
    with draftd.Client(s.url) as c:
        c.wait_ready(30)
    return s


def test_draft_is_the_model_greedy_chain(tiny, draftd_bin: Path, test_model: Path) -> None:
    prompt = [3, 17, 200, 5, 9, 44, 1]
    want = generate(draftd_bin, test_model, prompt, 12)
    with draftd.Client(tiny.url) as c:
        d = c.draft(prompt, 12, strategy="model")
    assert isinstance(d, draftd.Draft)
    assert d.tokens == want, f"have {d.tokens}; want {want}"


def test_health_and_info(tiny) -> None:  # type: ignore[no-untyped-def]
    with draftd.Client(tiny.url) as c:
        h = c.health()
        info = c.info()
    assert h == draftd.Health(status="ok", ok=True, retry_after=None)
    assert (info.architecture, info.vocab_size, info.max_context) == ("qwen2", 512, 256)
    assert info.strategies == ["model", "lookup", "hybrid", "pld"]
    assert (info.draft_len, info.max_draft_len, info.strategy) == (16, 64, "hybrid")
    assert info.raw["num_layers"] == 2
    assert sum(w.parameters for w in info.weight_mix.values()) == info.parameters


def test_default_n_and_strategy(tiny) -> None:  # type: ignore[no-untyped-def]
    prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3]
    with draftd.Client(tiny.url) as c:
        assert len(c.draft(prompt).tokens) == 16  # the server's --draft-len
        # hybrid is the server's default: asking for it by name changes nothing
        assert c.draft(prompt, 8).tokens == c.draft(prompt, 8, strategy="hybrid").tokens
        # lookup follows the repetition in the context: 4, 1, 2, 3, ...
        assert c.draft(prompt, 5, strategy="lookup").tokens == [4, 1, 2, 3, 4]


def test_short_draft_at_the_end_of_the_context(tiny) -> None:  # type: ignore[no-untyped-def]
    with draftd.Client(tiny.url) as c:
        d = c.draft([7] * 250, 16, strategy="model")
    assert len(d.tokens) == 6  # max_context 256 leaves room for 6


@pytest.mark.parametrize(
    ("tokens", "n", "strategy", "status", "code", "cls"),
    [
        ([], 4, None, 400, "missing_tokens", draftd.BadRequestError),
        ([1, 512], 4, None, 400, "token_out_of_range", draftd.BadRequestError),
        ([1, -1], 4, None, 400, "token_out_of_range", draftd.BadRequestError),
        ([1, 2], 0, None, 400, "invalid_n", draftd.BadRequestError),
        ([1, 2], 65, None, 400, "invalid_n", draftd.BadRequestError),
        ([1] * 256, 4, None, 400, "context_too_long", draftd.BadRequestError),
        ([1, 2], 4, "beam", 400, "invalid_strategy", draftd.BadRequestError),
    ],
)
def test_errors_carry_the_server_code(tiny, tokens, n, strategy, status, code, cls) -> None:  # type: ignore[no-untyped-def]
    with draftd.Client(tiny.url, max_retries=3) as c:
        with pytest.raises(cls) as ei:
            c.draft(tokens, n, strategy=strategy)
    e = ei.value
    assert (e.status, e.code) == (status, code)
    assert e.code in draftd.CODES and draftd.CODES[e.code] == status
    assert e.message and e.retry_after is None


def test_a_400_is_not_retried(tiny) -> None:  # type: ignore[no-untyped-def]
    before = metric(tiny.url, "draftd_http_requests_total", route="/draft", code="400")
    with draftd.Client(tiny.url, max_retries=5) as c:
        with pytest.raises(draftd.BadRequestError):
            c.draft([1, 9999], 4)
    after = metric(tiny.url, "draftd_http_requests_total", route="/draft", code="400")
    assert after - before == 1


def test_body_too_large(serve, test_model) -> None:  # type: ignore[no-untyped-def]
    s = serve(test_model, *KV, "--max-body-bytes", "256")
    with draftd.Client(s.url) as c:
        c.wait_ready(30)
        with pytest.raises(draftd.PayloadTooLargeError) as ei:
            c.draft(list(range(100)), 4)
    assert (ei.value.status, ei.value.code) == (413, "body_too_large")


def test_wrong_base_url_is_not_found(tiny) -> None:  # type: ignore[no-untyped-def]
    with draftd.Client(tiny.url + "/v2") as c:
        with pytest.raises(draftd.NotFoundError) as ei:
            c.draft([1, 2, 3], 4)
    assert (ei.value.status, ei.value.code) == (404, "not_found")


def test_not_a_draftd_server(tiny) -> None:  # type: ignore[no-untyped-def]
    # /metrics answers 200 in Prometheus text: the client must say it is not
    # the protocol rather than return something. Point /v1/info there.
    with draftd.Client(tiny.url) as c:
        resp = c._http.get(tiny.url + "/metrics")
        with pytest.raises(draftd.ProtocolError):
            c._p.json(resp)


def test_client_type_errors() -> None:
    with draftd.Client("http://127.0.0.1:9") as c:
        with pytest.raises(TypeError, match=r"tokens\[1\]"):
            c.draft([1, True], 4)
        with pytest.raises(TypeError, match=r"tokens\[0\]"):
            c.draft([1.0], 4)  # type: ignore[list-item]
        with pytest.raises(TypeError, match="n is"):
            c.draft([1], 4.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="http://"):
        draftd.Client("127.0.0.1:8080")


def test_connect_error() -> None:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with draftd.Client(f"http://127.0.0.1:{port}", max_retries=3) as c:
        with pytest.raises(draftd.ConnectError):
            c.draft([1, 2], 4)


@pytest.fixture(scope="module")
def slow_model(draftd_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-0.6B's shapes (vocab 151936, hidden 1024) with 2 layers: a
    64-token draft takes tens of milliseconds, long enough to queue."""
    p = tmp_path_factory.mktemp("slow") / "qwen3-2l.gguf"
    subprocess.run([str(draftd_bin), "testmodel", "--shape", "qwen3-0.6b", "--layers", "2", "--gguf", str(p)],
                   check=True, stdout=subprocess.DEVNULL)
    return p


def test_client_timeout(serve, slow_model) -> None:  # type: ignore[no-untyped-def]
    s = serve(slow_model, *KV, "--threads", "1")
    with draftd.Client(s.url) as c:
        c.wait_ready(60)
    with draftd.Client(s.url, timeout=httpx.Timeout(5.0, read=0.001)) as c:
        with pytest.raises(draftd.TimeoutError):
            c.draft(list(range(1, 400)), 64, strategy="model")


def test_queue_full_is_retried_after_retry_after(serve, slow_model) -> None:  # type: ignore[no-untyped-def]
    s = serve(slow_model, *KV, "--threads", "1", "--max-batch", "1", "--max-queue", "1")
    prompts = [[i + 1, i + 2, i + 3] * 5 for i in range(5)]

    async def burst(max_retries: int) -> list[object]:
        async with draftd.AsyncClient(s.url, max_retries=max_retries, max_retry_wait=1.0) as c:
            await c.wait_ready(60)
            return await asyncio.gather(*(c.draft(p, 32, strategy="model") for p in prompts), return_exceptions=True)

    # Without retries: five at once into one running + one queued slot.
    first = asyncio.run(burst(0))
    full = [r for r in first if isinstance(r, draftd.ServiceUnavailableError)]
    assert full, f"no 503 among {first}"
    assert all(e.code == "queue_full" and e.status == 503 and e.retry_after == 1.0 for e in full)
    assert all(isinstance(r, (draftd.Draft, draftd.ServiceUnavailableError)) for r in first)

    # With retries every request is served, and the server did answer 503s.
    before = metric(s.url, "draftd_http_requests_total", route="/draft", code="503")
    second = asyncio.run(burst(20))
    assert all(isinstance(r, draftd.Draft) and len(r.tokens) == 32 for r in second), second
    assert metric(s.url, "draftd_http_requests_total", route="/draft", code="503") > before
    # The same contexts give the same drafts whether or not they were retried.
    for a, b in zip(first, second):
        if isinstance(a, draftd.Draft):
            assert a == b


def test_async_client_matches_sync(tiny) -> None:  # type: ignore[no-untyped-def]
    prompts = [[i, i + 1, (i * 7) % 500] for i in range(1, 9)]
    with draftd.Client(tiny.url) as c:
        want = [c.draft(p, 10, strategy="model") for p in prompts]

    async def run() -> tuple[list[draftd.Draft], draftd.Info, draftd.Health]:
        async with draftd.AsyncClient(tiny.url) as ac:
            got = await asyncio.gather(*(ac.draft(p, 10, strategy="model") for p in prompts))
            return list(got), await ac.info(), await ac.health()

    got, info, health = asyncio.run(run())
    assert got == want
    assert info.vocab_size == 512 and health.ok

    async def bad() -> None:
        async with draftd.AsyncClient(tiny.url) as ac:
            await ac.draft([1], 0)

    with pytest.raises(draftd.BadRequestError) as ei:
        asyncio.run(bad())
    assert ei.value.code == "invalid_n"


def test_keep_alive_reuses_one_connection(tiny) -> None:  # type: ignore[no-untyped-def]
    ports: set[int] = set()

    def hook(resp: httpx.Response) -> None:
        ports.add(resp.extensions["network_stream"].get_extra_info("client_addr")[1])

    http = httpx.Client(event_hooks={"response": [hook]})
    with draftd.Client(tiny.url, http_client=http) as c:
        for i in range(5):
            c.draft([1, 2, 3 + i], 4)
        c.info()
    http.close()
    assert len(ports) == 1, f"connections from ports {ports}"


def test_retry_after_http_date() -> None:
    p = draftd.client._Protocol("http://x", 1, 10.0)
    req = httpx.Request("POST", "http://x/draft")
    r = httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, request=req)
    assert p.retry_after(r) == 0.0  # in the past
    assert p.retry_wait(httpx.Response(503, request=req), 0) is None  # no header: not retryable
    assert p.retry_wait(httpx.Response(500, headers={"Retry-After": "1"}, request=req), 0) is None
    assert p.retry_wait(httpx.Response(503, headers={"Retry-After": "30"}, request=req), 0) == 10.0
    assert p.retry_wait(httpx.Response(503, headers={"Retry-After": "1"}, request=req), 1) is None


def test_codes_match_the_server_source() -> None:
    """CODES lists every code internal/server/errors.go defines (its
    constants), with the status its codeStatus map or apiErrorFor gives."""
    src = (Path(__file__).resolve().parents[3] / "internal/server/errors.go").read_text()
    eng = (Path(__file__).resolve().parents[3] / "internal/engine/engine.go").read_text()
    consts = dict(re.findall(r'(Code\w+)\s*=\s*"([a-z_]+)"', src + eng))
    aliases = dict(re.findall(r"(Code\w+)\s*=\s*engine\.(Code\w+)", src))
    codes = {name: consts.get(aliases.get(name, name)) for name in set(consts) | set(aliases)}
    server_codes = {v for k, v in codes.items() if v and k.startswith("Code")} - {"client_closed"}
    assert server_codes <= set(draftd.CODES), server_codes - set(draftd.CODES)


def _mock(handler) -> draftd.Client:  # type: ignore[no-untyped-def]
    """A Client whose answers come from handler (an httpx.MockTransport)."""
    return draftd.Client("http://x", http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def test_retry_after_not_ascii_digits() -> None:
    # "²".isdigit() is True and float("²") a ValueError: an unreadable
    # Retry-After is no Retry-After, and the 503 is a typed error.
    p = draftd.client._Protocol("http://x", 1, 10.0)
    req = httpx.Request("POST", "http://x/draft")
    for v in ("²", "٣", "1²"):  # as a server sends them: UTF-8 bytes
        r = httpx.Response(503, headers={"Retry-After": v.encode()}, request=req)
        assert r.headers["Retry-After"] == v
        assert p.retry_after(r) is None
    body = {"error": {"code": "queue_full", "message": "the draft queue is full"}}
    with _mock(lambda r: httpx.Response(503, json=body, headers={"Retry-After": "²".encode()})) as c:
        with pytest.raises(draftd.ServiceUnavailableError) as ei:
            c.draft([1, 2, 3], 4)
    assert ei.value.retry_after is None


@pytest.mark.parametrize("status", [200, 400, 503])
def test_deeply_nested_json_is_a_protocol_error(status: int) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(RecursionError):
        json.loads(deep)  # the reference: what the stdlib decoder does with it
    with _mock(lambda r: httpx.Response(status, content=deep, headers={"Content-Type": "application/json"})) as c:
        with pytest.raises(draftd.ProtocolError):
            c.draft([1, 2, 3], 4)
        with pytest.raises(draftd.ProtocolError):
            c.info()


@pytest.mark.parametrize("tokens", [{1: 2, 3: 4}, {1, 2, 3}, frozenset([1]), {}])
def test_unordered_token_collections_are_refused(tokens) -> None:  # type: ignore[no-untyped-def]
    with draftd.Client("http://127.0.0.1:9") as c:
        with pytest.raises(TypeError, match="want a sequence of ints"):
            c.draft(tokens, 4)
    with pytest.raises(TypeError, match="want a sequence of ints"):
        draftd.DraftRequest(tokens=tokens)


@pytest.mark.parametrize("body", [b"<html>503 Service Unavailable</html>", b'{"status":1}', b"", b"[" * 100_000])
def test_health_503_without_status_is_unhealthy(body: bytes) -> None:
    with _mock(lambda r: httpx.Response(503, content=body, headers={"Retry-After": "2"})) as c:
        h = c.health()
    assert (h.status, h.ok, h.retry_after) == ("unavailable", False, 2.0)
    # A 200 without a status is still not the protocol.
    with _mock(lambda r: httpx.Response(200, content=body)) as c:
        with pytest.raises(draftd.ProtocolError):
            c.health()
