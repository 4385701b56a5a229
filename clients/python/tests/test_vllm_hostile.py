"""draftd.vllm.DraftdProposer against a hostile server (tests/hostile.py, a
real threaded http.server on loopback), called as vLLM's model runner calls
it (test_vllm_proposer.Runner; no vLLM needed): whatever the server
answers, propose() returns (issue 37, failure 3), a step lasts at most
about ``timeout`` whatever the server dribbles, a 409 and the resend
included (failure 4), and no draft reaches vLLM with an id outside the
target's vocabulary or more tokens than its row can use (failure 5).

Timing: the deadline tests check what the step returned (no drafts where a
per-read timeout would have got them) and a generous bound (timeout + 5 s)
where the hostile answer takes ≥ 10 s to arrive whole."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("numpy")

from draftd.vllm import DraftdProposer  # noqa: E402

from hostile import INFO, Answer, Hostile, Req as HReq, drafts  # noqa: E402
from test_vllm_proposer import Req, Runner  # noqa: E402

K = 8


def config(url: str, vocab: int | None = 512, k: int = K, **draftd_cfg: Any) -> Any:
    mc = SimpleNamespace(max_model_len=256)
    if vocab is not None:
        mc.get_vocab_size = lambda: vocab
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k), model_config=mc,
                           additional_config={"draftd": {"url": url, **draftd_cfg}})


def two_rows(p: DraftdProposer, max_tokens: int = 50) -> Runner:
    r = Runner(p)
    r.requests = {"a": Req([11, 12, 13], max_tokens, [14]), "b": Req([21, 22], max_tokens, [23])}
    return r


def test_gzip_and_bad_info_cost_the_step_only() -> None:
    gz = lambda r: Answer(200, b'{"drafts":[]}', headers={"Content-Encoding": "gzip"})  # noqa: E731
    with Hostile({("POST", "/v1/drafts"): gz}) as h:
        p = DraftdProposer(config(h.url, backoff=1e-3))
        assert two_rows(p).step(["a", "b"], [[14], [23]]) == [[], []]
        assert p.stats.misses == 1 and "Content-Encoding" in p.stats.last_error, p.stats
        p.close()
    with Hostile({("POST", "/v1/drafts"): drafts([1, 2])}, info=dict(INFO, weight_mix=[1])) as h:
        p = DraftdProposer(config(h.url, backoff=1e-3))
        assert two_rows(p).step(["a", "b"], [[14], [23]]) == [[], []]
        assert "weight_mix" in p.stats.last_error, p.stats
        p.close()


@pytest.mark.parametrize("tokens", [[600, 3], [-5, 3], [2**40], [2**64, 1]])
def test_ids_outside_the_vocabulary_never_reach_vllm(tokens: list[int]) -> None:
    with Hostile({("POST", "/v1/drafts"): drafts(tokens)}) as h:
        p = DraftdProposer(config(h.url, backoff=1e-3))
        assert two_rows(p).step(["a", "b"], [[14], [23]]) == [[], []]
        p.close()


def test_a_row_gets_no_more_than_its_room() -> None:
    """Row a has 3 tokens left (room for a draft of 2), row b 40: a server
    answering 8 tokens to every item costs the step its drafts (the answer
    is not the protocol), never 8 tokens to row a."""
    with Hostile({("POST", "/v1/drafts"): drafts([1, 2, 3, 4, 5, 6, 7, 8])}) as h:
        p = DraftdProposer(config(h.url, backoff=1e-3))
        r = Runner(p)
        r.requests = {"a": Req([11, 12, 13], 4, [14]), "b": Req([21, 22], 41, [23])}
        got = r.step(["a", "b"], [[14], [23]])
        assert len(got[0]) <= 2 and len(got[1]) <= K, got
        p.close()
    with Hostile({("POST", "/v1/drafts"): lambda q: Answer(200, {"drafts": [
            {"id": it.get("id"), "draft": [1, 2, 3, 4, 5, 6, 7, 8][: it.get("n", 8)]} for it in q.body["requests"]]})}) as h:
        p = DraftdProposer(config(h.url, backoff=1e-3))
        r = Runner(p)
        r.requests = {"a": Req([11, 12, 13], 4, [14]), "b": Req([21, 22], 41, [23])}
        assert r.step(["a", "b"], [[14], [23]]) == [[1, 2], [1, 2, 3, 4, 5, 6, 7, 8]]
        p.close()


def test_step_timeout_bounds_a_dribbled_answer() -> None:
    body = b'{"drafts":[' + b" " * 40 + b"]}"
    with Hostile({("POST", "/v1/drafts"): lambda r: Answer(200, body, dribble=0.5)}) as h:  # ~11 s whole
        p = DraftdProposer(config(h.url, timeout=1.0))
        t0 = time.monotonic()
        got = two_rows(p).step(["a", "b"], [[14], [23]])
        took = time.monotonic() - t0
        assert got == [[], []] and p.stats.misses == 1, (got, p.stats)
        assert "Timeout" in p.stats.last_error, p.stats.last_error
        assert took < 1.0 + 5.0, f"the step took {took:.1f} s with timeout=1"
        p.close()


def test_step_timeout_bounds_409_and_resend() -> None:
    """Step 2's incremental items are answered unknown_session after 0.7 s,
    and their resend as tokens after 0.7 s more: each answer is inside the
    1 s timeout, the step is not. The step must draft nothing (a per-request
    timeout returns the resend's drafts after 1.4 s)."""
    calls: list[int] = []

    def route(q: HReq) -> Answer:
        calls.append(1)
        items = q.body["requests"]
        if len(calls) == 1:  # step 1: the sessions are established
            return Answer(200, {"drafts": [{"id": it["id"], "draft": [5, 6]} for it in items]})
        if any("accepted" in it for it in items):
            return Answer(200, {"drafts": [{"id": it["id"], "error": {"code": "unknown_session", "message": "x"}}
                                           for it in items]}, delay=0.7)
        return Answer(200, {"drafts": [{"id": it["id"], "draft": [7, 8]} for it in items]}, delay=0.7)

    with Hostile({("POST", "/v1/drafts"): route}) as h:
        p = DraftdProposer(config(h.url, timeout=1.0, backoff=1e-3))
        r = two_rows(p)
        assert r.step(["a", "b"], [[14], [23]]) == [[5, 6], [5, 6]]
        r.requests["a"].output += [5, 6, 15]
        r.requests["b"].output += [5, 24]
        assert r.step(["a", "b"], [[5, 6, 15], [5, 24]]) == [[], []], "the step outlived its timeout"
        assert p.stats.misses == 1, p.stats
        p.close()
