"""Client and AsyncClient against a hostile server (tests/hostile.py, a real
threaded http.server on loopback): every failure is a draftd.DraftdError
(issue 37, failure 3: a gzip header on a body that is not gzip, a /v1/info
of the wrong types), drafts are checked against the server's vocabulary and
the n asked and answers are bounded in size (failure 5), and a number
``timeout`` bounds a whole call, not each read (failure 4: an answer
dribbled a few bytes at a time, endless 102 interim answers).

Timing: no assert waits on a clock for ordering. The deadline tests check
the result (a TimeoutError, not an answer) and a generous bound: the
hostile answer takes DRIBBLE_S (≥ 10 s) to arrive whole, the client's
timeout is 1 s, and the call must end before 1 + 5 s; a client that bounds
each read only gets the whole answer after DRIBBLE_S."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import draftd
from hostile import INFO, Answer, Hostile, draft, drafts

GZIP = {"Content-Encoding": "gzip"}
DRIBBLE_S = 10.0


def _sync_and_async(url: str, call: str, *args: Any, **kw: Any) -> list[BaseException | object]:
    """call on a Client and on an AsyncClient of url: what each returned or raised."""
    out: list[BaseException | object] = []
    with draftd.Client(url, max_retries=0) as c:
        try:
            out.append(getattr(c, call)(*args, **kw))
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            out.append(e)

    async def run() -> object:
        async with draftd.AsyncClient(url, max_retries=0) as ac:
            return await getattr(ac, call)(*args, **kw)

    try:
        out.append(asyncio.run(run()))
    except BaseException as e:  # noqa: BLE001
        out.append(e)
    return out


def test_gzip_header_on_a_body_that_is_not_gzip() -> None:
    routes = {
        ("POST", "/draft"): lambda r: Answer(200, b'{"draft":[1,2]}', headers=GZIP),
        ("GET", "/v1/info"): lambda r: Answer(200, b"not gzip at all", headers=GZIP),
        ("GET", "/health"): lambda r: Answer(200, b'{"status":"ok"}', headers={"Content-Encoding": "br"}),
    }
    with Hostile(routes) as h:
        for call, args in (("draft", ([1, 2, 3], 2)), ("info", ()), ("health", ())):
            for got in _sync_and_async(h.url, call, *args):
                assert isinstance(got, draftd.ProtocolError), f"{call}: have {got!r}; want a ProtocolError"
                assert "Content-Encoding" in str(got), got


@pytest.mark.parametrize("field,value,says", [
    ("weight_mix", [1, 2], '"weight_mix" is an array'),
    ("weight_mix", {"Q8_0": [1]}, '"weight_mix"'),
    ("weight_mix", {"Q8_0": {"tensors": 1, "parameters": 1, "bytes": "x", "bits_per_weight": 8}}, '"bytes"'),
    ("strategies", "abc", '"strategies" is the string'),
    ("strategies", ["model", 3], '"strategies"[1]'),
    ("vocab_size", 1.7, '"vocab_size" is the number 1.7'),
    ("vocab_size", "512", '"vocab_size" is the string'),
    ("vocab_size", True, '"vocab_size" is a boolean'),
    ("vocab_size", 0, '"vocab_size" is the number 0'),
    ("max_draft_len", None, '"max_draft_len" is null'),
    ("architecture", 7, '"architecture" is the number 7'),
])
def test_info_of_the_wrong_types(field: str, value: Any, says: str) -> None:
    with Hostile(info=dict(INFO, **{field: value})) as h:
        for got in _sync_and_async(h.url, "info"):
            assert isinstance(got, draftd.ProtocolError), f"have {got!r}; want a ProtocolError"
            assert says in str(got), f"{got} does not say {says!r}"


def test_info_field_missing() -> None:
    info = dict(INFO)
    del info["vocab_size"]
    with Hostile(info=info) as h:
        for got in _sync_and_async(h.url, "info"):
            assert isinstance(got, draftd.ProtocolError) and '"vocab_size" is missing' in str(got), got


@pytest.mark.parametrize("tokens,says", [
    ([600, 3], "600"),         # past the server's vocabulary of 512
    ([-5, 3], "-5"),
    ([2**40], str(2**40)),
    ([2**64, 1], str(2**64)[:20]),
    ([1, 2, 3, 4, 5], "5 tokens; 4 were asked"),
])
def test_draft_ids_are_checked(tokens: list[int], says: str) -> None:
    with Hostile({("POST", "/draft"): draft(tokens), ("POST", "/v1/drafts"): drafts(tokens)}) as h:
        for got in _sync_and_async(h.url, "draft", [1, 2, 3], 4):
            assert isinstance(got, draftd.ProtocolError), f"have {got!r}; want a ProtocolError"
            assert says in str(got), got
        reqs = [draftd.DraftRequest(tokens=[1, 2], n=4, id="a")]
        for got in _sync_and_async(h.url, "drafts", reqs):
            assert isinstance(got, draftd.ProtocolError) and "result 0" in str(got), got
        # n omitted: the server's draft_len (16) bounds the length
        with draftd.Client(h.url) as c:
            if len(tokens) <= 16 and all(0 <= t < 512 for t in tokens):
                assert c.draft([1, 2, 3]).tokens == tokens


def test_valid_draft_passes() -> None:
    with Hostile({("POST", "/draft"): draft([511, 0, 7])}) as h:
        for got in _sync_and_async(h.url, "draft", [1, 2, 3], 3):
            assert got == draftd.Draft([511, 0, 7])


def test_answer_size_is_bounded() -> None:
    big = b'{"draft":[' + b"1," * (5 << 20) + b"1]}"  # 10 MiB
    with Hostile({("POST", "/draft"): lambda r: Answer(200, big)}) as h:
        for got in _sync_and_async(h.url, "draft", [1, 2, 3], 4):
            assert isinstance(got, draftd.ProtocolError) and "over" in str(got), f"have {str(got)[:200]}"


def _timed(url: str, call: str, *args: Any) -> list[tuple[BaseException | object, float]]:
    out = []
    with draftd.Client(url, timeout=1.0, max_retries=0) as c:
        t0 = time.monotonic()
        try:
            r: object = getattr(c, call)(*args)
        except BaseException as e:  # noqa: BLE001
            r = e
        out.append((r, time.monotonic() - t0))

    async def run() -> object:
        async with draftd.AsyncClient(url, timeout=1.0, max_retries=0) as ac:
            return await getattr(ac, call)(*args)

    t0 = time.monotonic()
    try:
        r = asyncio.run(run())
    except BaseException as e:  # noqa: BLE001
        r = e
    out.append((r, time.monotonic() - t0))
    return out


def test_timeout_bounds_a_dribbled_answer() -> None:
    body = b'{"draft":[1,2]}' + b" " * 40
    every = DRIBBLE_S / (len(body) / 2)  # 2 bytes per `every` s, each read well inside the 1 s timeout
    with Hostile({("POST", "/draft"): lambda r: Answer(200, body, dribble=every)}) as h:
        for got, took in _timed(h.url, "draft", [1, 2, 3], 2):
            assert isinstance(got, draftd.TimeoutError), f"have {got!r} after {took:.1f} s; want a TimeoutError"
            assert took < 1.0 + 5.0, f"the call took {took:.1f} s with timeout=1"


def test_timeout_bounds_endless_interim_answers() -> None:
    route = lambda r: Answer(200, {"status": "ok"}, interim=0.2, interim_for=DRIBBLE_S)  # noqa: E731
    with Hostile({("GET", "/health"): route, ("GET", "/v1/info"): route}) as h:
        for got, took in _timed(h.url, "info"):
            assert isinstance(got, draftd.TimeoutError), f"have {got!r} after {took:.1f} s; want a TimeoutError"
            assert took < 1.0 + 5.0, f"the call took {took:.1f} s with timeout=1"


def test_deadline_block_bounds_several_calls() -> None:
    """client.deadline(s): the calls inside share one deadline (each of
    these answers arrives in 0.6 s, each well inside the 1 s timeout; two
    pass a 1 s deadline)."""
    slow = lambda r: Answer(200, {"draft": [1]}, delay=0.6)  # noqa: E731
    with Hostile({("POST", "/draft"): slow}) as h:
        with draftd.Client(h.url, timeout=5.0, max_retries=0) as c:
            c.info()
            with pytest.raises(draftd.TimeoutError):
                with c.deadline(1.0):
                    c.draft([1], 1)
                    c.draft([1], 1)
            assert c.draft([1], 1).tokens == [1]  # outside the block: the client's own timeout


def test_503_retry_wait_past_the_deadline_is_not_waited() -> None:
    busy = {"error": {"code": "busy", "message": "busy"}}
    with Hostile({("POST", "/draft"): lambda r: Answer(503, busy, headers={"Retry-After": "3"})}) as h:
        with draftd.Client(h.url, timeout=1.0, max_retries=5, max_retry_wait=3.0) as c:
            with pytest.raises(draftd.ServiceUnavailableError):
                c.draft([1], 1)
        assert h.count("POST", "/draft") == 1
