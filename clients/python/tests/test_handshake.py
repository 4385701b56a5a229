"""The vLLM proposer's handshake (issue 36, item 2) against real ``draftd
serve`` processes on the random tiny Qwen2 (vocab 512, max context 256)
started with small limits, called as vLLM's model runner calls it
(test_vllm_proposer.Runner): it reads /v1/info when built and again after
draftd restarts; a draftd vocabulary the target cannot take is an error at
start-up naming both sizes; K above ``--max-draft-len`` is clipped with one
warning; batches are split at ``--max-batch-items``; a permanent 4xx is
logged once at WARNING and not backed off and retried as a busy server is.
The reference of every draft is a plain ``POST /draft`` of the whole
context. The llama.cpp draft model's handshake is in
test_llamacpp_hostile.py (it needs llama_cpp)."""

from __future__ import annotations

import logging
import time

import pytest

np = pytest.importorskip("numpy")

import draftd  # noqa: E402
from draftd.vllm import DraftdProposer  # noqa: E402

from hostile import free_port  # noqa: E402
from test_vllm_hostile import config  # noqa: E402
from test_vllm_proposer import Req, Runner  # noqa: E402

KV = ("--kv-cache-bytes", str(64 << 20))


def rows(p: DraftdProposer, count: int) -> Runner:
    r = Runner(p)
    r.requests = {f"r{i}": Req([30 + i, 40 + i, 50 + i, 7 + i], 100, [60 + i]) for i in range(count)}
    return r


def step(r: Runner) -> list[list[int]]:
    ids = list(r.requests)
    return r.step(ids, [r.requests[k].output[-1:] for k in ids])


def ctx(r: Runner, k: str) -> list[int]:
    return r.requests[k].prompt + r.requests[k].output


def warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [m.getMessage() for m in caplog.records if m.levelno == logging.WARNING and text in m.getMessage()]


def test_k_above_max_draft_len_is_clipped_once(serve, test_model, caplog) -> None:  # type: ignore[no-untyped-def]
    s = serve(test_model, *KV, "--max-draft-len", "4", "--draft-len", "4")
    with draftd.Client(s.url) as c:
        c.wait_ready(30)
        caplog.set_level(logging.WARNING, logger="draftd.vllm")
        p = DraftdProposer(config(s.url, k=8))
        r = rows(p, 2)
        for _ in range(3):
            got = step(r)
            for k, d in zip(r.requests, got):
                assert d == c.draft(ctx(r, k), 4).tokens and len(d) == 4, (k, d)
    assert p.stats.item_errors == 0 and p.stats.misses == 0, p.stats
    assert len(warnings(caplog, "--max-draft-len 4")) == 1, [m.getMessage() for m in caplog.records]
    p.close()


def test_batches_are_split_at_max_batch_items(serve, test_model) -> None:  # type: ignore[no-untyped-def]
    s = serve(test_model, *KV, "--max-batch-items", "2")
    with draftd.Client(s.url) as c:
        c.wait_ready(30)
        p = DraftdProposer(config(s.url, k=4))
        r = rows(p, 5)
        got = step(r)
        assert got == [c.draft(ctx(r, k), 4).tokens for k in r.requests]
    assert p.stats.misses == 0 and p.stats.drafts == 5, p.stats
    p.close()


def test_vocabulary_the_target_cannot_take_is_a_start_up_error(serve, test_model) -> None:  # type: ignore[no-untyped-def]
    s = serve(test_model, *KV)
    with draftd.Client(s.url) as c:
        c.wait_ready(30)
    with pytest.raises(ValueError, match=r"vocabulary of 512 tokens; the target's has 256"):
        DraftdProposer(config(s.url, vocab=256))
    DraftdProposer(config(s.url, vocab=512)).close()  # equal: fine
    DraftdProposer(config(s.url, vocab=None)).close()  # unknown target vocabulary: not checked


def test_permanent_4xx_is_logged_once_and_not_backed_off(serve, test_model, caplog) -> None:  # type: ignore[no-untyped-def]
    """--max-body-bytes 256: a step whose contexts make a larger body is
    answered 413 body_too_large (the request is wrong, not the server busy):
    one WARNING for all the steps, no back-off (each step tries its own
    request; a 413 costs a round trip, not a timeout), and steps whose body
    fits draft again at once."""
    s = serve(test_model, *KV, "--max-body-bytes", "256")
    with draftd.Client(s.url) as c:
        c.wait_ready(30)
    caplog.set_level(logging.WARNING, logger="draftd.vllm")
    p = DraftdProposer(config(s.url, k=4, backoff=60))
    r = Runner(p)
    r.requests = {"long": Req(list(range(8, 130)), 200, [9])}
    for _ in range(4):
        assert step(r) == [[]]
    st = p.stats
    assert (st.rejected, st.misses, st.backoff_steps) == (4, 4, 0), st
    assert len(warnings(caplog, "413")) == 1, [m.getMessage() for m in caplog.records]
    r.requests = {"short": Req([1, 2, 3], 200, [9])}
    assert step(r)[0] != [], p.stats  # not backing off: the next request that fits is served
    p.close()


def test_handshake_again_after_draftd_restarts(serve, test_model) -> None:  # type: ignore[no-untyped-def]
    """draftd restarted on the same address with a smaller --max-draft-len:
    once it answers again, the proposer has read its /v1/info again and
    drafts within the new limit (no item failing invalid_n)."""
    addr = f"127.0.0.1:{free_port()}"
    a = serve(test_model, *KV, "--max-draft-len", "6", "--draft-len", "6", addr=addr)
    with draftd.Client(a.url) as c:
        c.wait_ready(30)
    p = DraftdProposer(config(a.url, k=6, backoff=0.01))
    r = rows(p, 2)
    assert all(len(d) == 6 for d in step(r))
    assert a.stop() == 0
    b = serve(test_model, *KV, "--max-draft-len", "2", "--draft-len", "2", addr=addr)
    with draftd.Client(b.url) as c:
        c.wait_ready(30)
        drafted = p.stats.drafts
        for _ in range(200):  # bounded: the back-off after the failed step is 0.01 s
            got = step(r)
            if p.stats.drafts > drafted:
                break
            time.sleep(0.02)
        assert got == [c.draft(ctx(r, k), 2).tokens for k in r.requests], (got, p.stats)
        for _ in range(3):
            assert step(r) == [c.draft(ctx(r, k), 2).tokens for k in r.requests], p.stats
    # at most the first step after the restart lost its drafts to invalid_n
    assert p.stats.item_errors <= 2 and p.stats.handshakes >= 2, p.stats
    p.close()
