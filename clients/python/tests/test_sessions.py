"""Batched and incremental drafting through the client (docs/protocol.md,
batched and incremental drafting) against real ``draftd serve`` processes on
the random tiny Qwen2 (vocab 512, max context 256), over loopback sockets:
``POST /v1/drafts`` items equal single ``/draft`` answers, session chains
(accepted + bonus) equal ``/draft`` on the whole context, a lost session
(deleted, evicted, the server restarted) is answered 409 and the helper
resends the context, and every error is typed. The reference of every
draft is a plain ``POST /draft`` of the whole context (and, for the
``model`` strategy, ``draftd generate`` through the CLI)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import httpx
import pytest

import draftd
from test_client import KV, generate, metric, slow_model  # noqa: F401 (slow_model: a fixture)


@pytest.fixture
def tiny(serve, test_model):  # type: ignore[no-untyped-def]
    s = serve(test_model, *KV)
    with draftd.Client(s.url) as c:
        c.wait_ready(30)
    return s


def prompts(count: int, seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randrange(1, 40))] for _ in range(count)]


def step(rng: random.Random, ctx: list[int], draft: list[int]) -> tuple[list[int], int, int]:
    """A target's verification of draft after ctx: accepts k of it (0, all,
    or in between) and adds a bonus token. Returns the new whole context, k
    and the bonus."""
    k = rng.choice([0, len(draft), rng.randrange(len(draft) + 1)])
    bonus = rng.randrange(512)
    return ctx + draft[:k] + [bonus], k, bonus


def test_batch_items_equal_single_drafts(tiny) -> None:  # type: ignore[no-untyped-def]
    ps = prompts(6)
    reqs = [
        draftd.DraftRequest(tokens=ps[0], n=8, strategy="model", id="a"),
        draftd.DraftRequest(tokens=ps[1], n=3, id="b"),
        draftd.DraftRequest(tokens=[1, 2, 512], n=4, id="bad-token"),
        draftd.DraftRequest(tokens=ps[2], n=16, strategy="hybrid"),  # no id
        draftd.DraftRequest(tokens=ps[3] * 3, n=5, strategy="lookup", id="c"),
        draftd.DraftRequest(tokens=ps[4], n=8, strategy="beam", id="bad-strategy"),
        draftd.DraftRequest(tokens=[7] * 250, n=16, strategy="model", id="short"),
        draftd.DraftRequest(tokens=ps[5], n=8, strategy="pld", id="d"),
    ]
    with draftd.Client(tiny.url) as c:
        got = c.drafts(reqs)
        want: list[draftd.Draft | draftd.APIError] = []
        for r in reqs:
            assert r.tokens is not None
            try:
                want.append(c.draft(r.tokens, r.n, strategy=r.strategy))
            except draftd.APIError as e:
                want.append(e)
    assert [g.id for g in got] == [r.id for r in reqs]
    for r, g, w in zip(reqs, got, want):
        if isinstance(w, draftd.Draft):
            assert g.ok and g.error is None and g.draft == w and g.result() == w, r.id
        else:
            assert not g.ok and g.draft is None
            assert type(g.error) is type(w) and g.error is not None
            assert (g.error.status, g.error.code) == (w.status, w.code), r.id
            with pytest.raises(type(w)):
                g.result()
    assert got[2].error is not None and (got[2].error.status, got[2].error.code) == (400, "token_out_of_range")
    assert got[5].error is not None and got[5].error.code == "invalid_strategy"
    assert got[6].draft is not None and len(got[6].draft.tokens) == 6  # max_context 256 leaves room for 6


def test_batch_model_item_is_generate(tiny, draftd_bin: Path, test_model: Path) -> None:  # type: ignore[no-untyped-def]
    ps = prompts(3, seed=7)
    with draftd.Client(tiny.url) as c:
        got = c.drafts([draftd.DraftRequest(tokens=p, n=10, strategy="model", id=str(i)) for i, p in enumerate(ps)])
    for p, g in zip(ps, got):
        assert g.result().tokens == generate(draftd_bin, test_model, p, 10)


def test_batch_call_errors(serve, test_model) -> None:  # type: ignore[no-untyped-def]
    s = serve(test_model, *KV, "--max-batch-items", "2")
    with draftd.Client(s.url) as c:
        c.wait_ready(30)
        with pytest.raises(draftd.BadRequestError) as ei:
            c.drafts([draftd.DraftRequest(tokens=[1, 2])] * 3)
        assert (ei.value.status, ei.value.code) == (400, "too_many_items")
        assert [r.ok for r in c.drafts([draftd.DraftRequest(tokens=[1, 2])] * 2)] == [True, True]
        with pytest.raises(ValueError, match="empty"):
            c.drafts([])
        with pytest.raises(TypeError, match=r"requests\[1\]"):
            c.drafts([draftd.DraftRequest(tokens=[1]), {"tokens": [1]}])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="sequence"):
            c.drafts(draftd.DraftRequest(tokens=[1]))  # type: ignore[arg-type]


def test_session_chain_equals_full_context(tiny, draftd_bin: Path, test_model: Path) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(3)
    with draftd.Client(tiny.url) as c:
        for strategy in ("model", "hybrid", "lookup"):
            before = metric(tiny.url, "draftd_session_requests_total", form="accepted", outcome="ok")
            s = c.session(f"chain-{strategy}", n=6, strategy=strategy)
            ctx = prompts(1, seed=11)[0] * 2
            steps = 0
            while len(ctx) < 200:
                d = s.draft(ctx)
                assert d == c.draft(ctx, 6, strategy=strategy), (strategy, len(ctx))
                steps += 1
                ctx, _, _ = step(rng, ctx, d.tokens)
            assert s.stats == draftd.SessionStats(tokens=1, incremental=steps - 1, resent=0)
            after = metric(tiny.url, "draftd_session_requests_total", form="accepted", outcome="ok")
            assert after - before == steps - 1
            if strategy == "model":
                assert s.draft(ctx).tokens == generate(draftd_bin, test_model, ctx, 6)
            # a context that does not extend the last one goes whole
            ctx = [ctx[0] ^ 1, *ctx[1:]]
            assert s.draft(ctx) == c.draft(ctx, 6, strategy=strategy)
            assert s.stats.tokens == 2


def test_session_draft_n_per_request(tiny) -> None:  # type: ignore[no-untyped-def]
    """Session.draft(tokens, n=k) asks k tokens for that step only (the
    session's n otherwise), incrementally, and equals /draft with that n."""
    rng = random.Random(5)
    with draftd.Client(tiny.url) as c:
        s = c.session("per-request-n", n=6, strategy="model")
        ctx = prompts(1, seed=12)[0]
        for k in (6, 2, 1, 6, 3):
            d = s.draft(ctx, n=k)
            assert d == c.draft(ctx, k, strategy="model"), (k, len(ctx))
            ctx, _, _ = step(rng, ctx, d.tokens)
        assert s.draft(ctx) == c.draft(ctx, 6, strategy="model")
        assert s.stats == draftd.SessionStats(tokens=1, incremental=5, resent=0)


def test_extend_by_hand(tiny) -> None:  # type: ignore[no-untyped-def]
    p = prompts(1, seed=5)[0]
    with draftd.Client(tiny.url) as c:
        d0 = c.draft(p, 4, strategy="model", session="conv-1")
        assert d0 == c.draft(p, 4, strategy="model")
        d1 = c.extend("conv-1", 2, 77, 4, strategy="model")
        ctx = p + d0.tokens[:2] + [77]
        assert d1 == c.draft(ctx, 4, strategy="model")
        # accepted beyond the last draft: typed, and the session is unchanged
        with pytest.raises(draftd.InvalidAcceptedError) as ei:
            c.extend("conv-1", 5, 1, 4, strategy="model")
        e = ei.value
        assert isinstance(e, draftd.BadRequestError) and (e.status, e.code) == (400, "invalid_accepted")
        assert draftd.CODES[e.code] == 400
        d2 = c.extend("conv-1", 4, 9, 4, strategy="model")
        assert d2 == c.draft(ctx + d1.tokens + [9], 4, strategy="model")
        # every accepted in [0, len] is fine, 0 included
        d3 = c.extend("conv-1", 0, 3, 4, strategy="model")
        assert d3 == c.draft(ctx + d1.tokens + [9] + [3], 4, strategy="model")
        with pytest.raises(draftd.UnknownSessionError) as ui:
            c.extend("never-made", 0, 1)
        u = ui.value
        assert (u.status, u.code) == (409, "unknown_session") and isinstance(u, draftd.APIError)
        # bonus outside the vocabulary: the server's code for an id
        with pytest.raises(draftd.BadRequestError) as bi:
            c.extend("conv-1", 0, 512)
        assert bi.value.code == "token_out_of_range"


def test_client_side_validation() -> None:
    # Nothing listens on port 9: a request that went out would be a ConnectError.
    with draftd.Client("http://127.0.0.1:9") as c:
        for bad in ["", "a b", "a/b", "é", "x" * 129, "conv\n"]:
            with pytest.raises(ValueError, match="session"):
                c.extend(bad, 0, 1)
            with pytest.raises(ValueError, match="session"):
                c.draft([1], session=bad)
            with pytest.raises(ValueError, match="session"):
                c.delete_session(bad)
            with pytest.raises(ValueError, match="session"):
                c.session(bad)
        with pytest.raises(TypeError, match="session"):
            c.extend(5, 0, 1)  # type: ignore[arg-type]
        long = "x" * 10_000 + "/"
        with pytest.raises(ValueError) as ei:
            c.delete_session(long)
        assert len(str(ei.value)) < 200, "the message quotes a bounded part of the input"
        with pytest.raises(ValueError, match="accepted"):
            c.extend("s", -1, 1)
        with pytest.raises(TypeError, match="accepted"):
            c.extend("s", 1.0, 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="bonus"):
            c.extend("s", 1, True)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not both"):
            draftd.DraftRequest(tokens=[1], session="s", accepted=0, bonus=1)
        with pytest.raises(ValueError, match="give session"):
            draftd.DraftRequest(accepted=0, bonus=1)
        with pytest.raises(ValueError, match="together"):
            draftd.DraftRequest(session="s", accepted=0)
        with pytest.raises(ValueError, match="bonus is empty"):
            draftd.DraftRequest(session="s", accepted=0, bonus=[])
        with pytest.raises(TypeError, match=r"bonus\[1\]"):
            draftd.DraftRequest(session="s", accepted=0, bonus=[1, True])
        assert draftd.DraftRequest(session="s", accepted=0, bonus=[5]).to_json()["bonus"] == 5
        assert draftd.DraftRequest(session="s", accepted=1, bonus=(5, 6)).to_json()["bonus"] == [5, 6]
        with pytest.raises(ValueError, match="give tokens"):
            draftd.DraftRequest(session="s")
        with pytest.raises(TypeError, match="id"):
            draftd.DraftRequest(tokens=[1], id=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"tokens\[1\]"):
            c.session("s").draft([1, 2.0])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="n is"):
            c.session("s", n=2.0)  # type: ignore[arg-type]
        s1 = c.session("s")
        with pytest.raises(ValueError, match="twice"):
            c.session_drafts([(s1, [1]), (s1, [1, 2])])
        with draftd.Client("http://127.0.0.1:9") as other:
            with pytest.raises(ValueError, match="another client"):
                c.session_drafts([(other.session("t"), [1])])
        with pytest.raises(ValueError, match="non-empty"):
            c.session_drafts([])
        # a valid request does go out
        with pytest.raises(draftd.ConnectError):
            c.extend("A-z_0.9:x" + "y" * 119, 0, 1)
    assert draftd.MAX_SESSION_ID_LEN == 128


def test_delete_then_the_helper_resends(tiny) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(8)
    with draftd.Client(tiny.url) as c:
        s = c.session(n=5, strategy="model")
        assert s.id.startswith("py-") and len(s.id) <= 128
        ctx = prompts(1, seed=2)[0]
        d = s.draft(ctx)
        ctx, k, t = step(rng, ctx, d.tokens)
        c.delete_session(s.id)
        c.delete_session(s.id)  # 204 also when unknown
        with pytest.raises(draftd.UnknownSessionError):
            c.extend(s.id, k, t, 5, strategy="model")
        before = metric(tiny.url, "draftd_session_requests_total", form="accepted", outcome="unknown_session")
        d = s.draft(ctx)
        assert metric(tiny.url, "draftd_session_requests_total", form="accepted", outcome="unknown_session") - before == 1
        assert d == c.draft(ctx, 5, strategy="model")
        assert s.stats == draftd.SessionStats(tokens=2, incremental=1, resent=1)
        ctx, _, _ = step(rng, ctx, d.tokens)
        assert s.draft(ctx) == c.draft(ctx, 5, strategy="model")
        assert s.stats.incremental == 2
        with s:
            pass  # close() deletes it
        with pytest.raises(draftd.UnknownSessionError):
            c.extend(s.id, 0, 1)


def test_evicted_session_is_resent(serve, test_model) -> None:  # type: ignore[no-untyped-def]
    srv = serve(test_model, *KV, "--max-sessions", "1")
    rng = random.Random(4)
    with draftd.Client(srv.url) as c:
        c.wait_ready(30)
        a, b = c.session("a", n=4), c.session("b", n=4)
        ca, cb = prompts(2, seed=9)
        da = a.draft(ca)
        db = b.draft(cb)  # evicts a
        ca, _, _ = step(rng, ca, da.tokens)
        cb, _, _ = step(rng, cb, db.tokens)
        assert a.draft(ca) == c.draft(ca, 4)  # 409, resent; evicts b
        assert a.stats.resent == 1
        assert b.draft(cb) == c.draft(cb, 4)
        assert b.stats.resent == 1
        assert metric(srv.url, "draftd_session_evictions_total", reason="count") >= 2


def test_restarted_server_unknown_session_resend(serve, test_model) -> None:  # type: ignore[no-untyped-def]
    first = serve(test_model, *KV)
    addr = first.url.removeprefix("http://")
    rng = random.Random(6)
    with draftd.Client(first.url) as c:
        c.wait_ready(30)
        s = c.session("conv-restart", n=6, strategy="model")
        ctx = prompts(1, seed=13)[0]
        for _ in range(3):
            d = s.draft(ctx)
            ctx, _, _ = step(rng, ctx, d.tokens)
        assert s.stats.incremental == 2
        assert first.stop() == 0
        serve(test_model, *KV, addr=addr)  # the same address: the replica restarted
        c.wait_ready(30)
        with pytest.raises(draftd.UnknownSessionError):
            c.extend(s.id, 0, 1)
        d = s.draft(ctx)  # 409 unknown_session, then the whole context
        assert s.stats == draftd.SessionStats(tokens=2, incremental=3, resent=1)
        assert d == c.draft(ctx, 6, strategy="model")
        ctx, _, _ = step(rng, ctx, d.tokens)
        assert s.draft(ctx) == c.draft(ctx, 6, strategy="model")
        assert s.stats.incremental == 4


def test_session_drafts_batch(tiny) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(10)
    with draftd.Client(tiny.url) as c:
        strategies = ["model", "hybrid", "lookup", None]
        ss = [c.session(f"b{i}", n=5, strategy=st) for i, st in enumerate(strategies)]
        ctxs = prompts(len(ss), seed=21)
        for round_ in range(6):
            if round_ == 3:
                c.delete_session("b1")  # lost between steps: resent inside the call
            res = c.session_drafts(list(zip(ss, ctxs)))
            assert [r.id for r in res] == [s.id for s in ss]
            for i, r in enumerate(res):
                assert r.result() == c.draft(ctxs[i], 5, strategy=strategies[i]), (round_, i)
                ctxs[i], _, _ = step(rng, ctxs[i], r.result().tokens)
        assert [s.stats.tokens for s in ss] == [1, 2, 1, 1]
        assert [s.stats.incremental for s in ss] == [5, 5, 5, 5]
        assert ss[1].stats.resent == 1
        # a failed item is typed and fails only itself
        bad = c.session("bad", n=5)
        res = c.session_drafts([(ss[0], ctxs[0]), (bad, [1, 600])])
        assert res[0].ok and res[0].result() == c.draft(ctxs[0], 5, strategy="model")
        assert isinstance(res[1].error, draftd.BadRequestError) and res[1].error.code == "token_out_of_range"
        assert bad.context is None


def test_session_header_is_sent(tiny) -> None:  # type: ignore[no-untyped-def]
    seen: list[tuple[str, str | None]] = []

    def hook(req: httpx.Request) -> None:
        seen.append((req.url.path, req.headers.get("x-draftd-session")))

    http = httpx.Client(event_hooks={"request": [hook]})
    with draftd.Client(tiny.url, http_client=http) as c:
        s = c.session("hdr-1", n=3)
        d = s.draft([1, 2, 3])
        s.draft([1, 2, 3, *d.tokens[:1], 4])
        c.drafts([draftd.DraftRequest(tokens=[1, 2], session="hdr-2")])
        c.drafts([draftd.DraftRequest(tokens=[1, 2], session="hdr-3"), draftd.DraftRequest(tokens=[3], session="hdr-4")])
        c.draft([1, 2])
        c.delete_session("hdr-1")
    http.close()
    seen = [s for s in seen if s[0] != "/v1/info"]  # the client reads it once, to check drafts against its vocab_size
    assert seen == [("/draft", "hdr-1"), ("/draft", "hdr-1"), ("/v1/drafts", "hdr-2"), ("/v1/drafts", None),
                    ("/draft", None), ("/v1/sessions/hdr-1", "hdr-1")]


def test_lost_answer_resends_tokens(serve, slow_model) -> None:  # type: ignore[no-untyped-def]
    """After a failed connection the server may or may not have extended
    the session: the helper's next request sends the whole context."""
    srv = serve(slow_model, *KV, "--threads", "1")
    rng = random.Random(12)
    with draftd.Client(srv.url) as c, draftd.Client(srv.url, timeout=httpx.Timeout(5.0, read=0.001)) as hasty:
        c.wait_ready(60)
        s = c.session("lost", n=64, strategy="model")
        ctx = list(range(1, 300))
        d = s.draft(ctx)
        ctx, _, _ = step(rng, ctx, d.tokens)
        s.client = hasty
        with pytest.raises(draftd.TimeoutError):
            s.draft(ctx)
        assert s.context is None
        s.client = c
        ctx += [5]  # the target moved on; the server holds the old or the timed-out context
        assert s.draft(ctx) == c.draft(ctx, 64, strategy="model")
        assert s.stats == draftd.SessionStats(tokens=2, incremental=1, resent=0)


def test_async_batch_and_sessions(tiny) -> None:  # type: ignore[no-untyped-def]
    ps = prompts(4, seed=31)
    rng = random.Random(14)
    with draftd.Client(tiny.url) as c:
        want = c.drafts([draftd.DraftRequest(tokens=p, n=7, id=f"i{i}") for i, p in enumerate(ps)])
        wants_err = c.drafts([draftd.DraftRequest(session="a-none", accepted=0, bonus=1, id="x")])

    async def run() -> None:
        async with draftd.AsyncClient(tiny.url) as ac:
            got = await ac.drafts([draftd.DraftRequest(tokens=p, n=7, id=f"i{i}") for i, p in enumerate(ps)])
            assert got == want
            err = await ac.drafts([draftd.DraftRequest(session="a-none", accepted=0, bonus=1, id="x")])
            assert isinstance(err[0].error, draftd.UnknownSessionError) and isinstance(wants_err[0].error, draftd.UnknownSessionError)
            # concurrent sessions, each a chain
            sessions = [ac.session(f"async-{i}", n=6, strategy="model") for i in range(len(ps))]
            ctxs = [list(p) for p in ps]

            async def chain(i: int) -> None:
                for _ in range(4):
                    d = await sessions[i].draft(ctxs[i])
                    assert d == await ac.draft(ctxs[i], 6, strategy="model")
                    ctxs[i], _, _ = step(rng, ctxs[i], d.tokens)

            await asyncio.gather(*(chain(i) for i in range(len(ps))))
            assert all(s.stats == draftd.SessionStats(tokens=1, incremental=3) for s in sessions)
            await ac.delete_session(sessions[0].id)
            res = await ac.session_drafts(list(zip(sessions, ctxs)))
            for i, r in enumerate(res):
                assert r.result() == await ac.draft(ctxs[i], 6, strategy="model")
            assert [s.stats.resent for s in sessions] == [1, 0, 0, 0]
            async with sessions[1]:
                pass
            with pytest.raises(draftd.UnknownSessionError):
                await ac.extend(sessions[1].id, 0, 1)
            with pytest.raises(draftd.InvalidAcceptedError):
                await ac.extend(sessions[2].id, 7, 1, 6, strategy="model")

    asyncio.run(run())


def test_codes_with_classes() -> None:
    assert isinstance(draftd.errors.error_for(400, "invalid_accepted", "m"), draftd.InvalidAcceptedError)
    assert type(draftd.errors.error_for(400, "invalid_n", "m")) is draftd.BadRequestError
    assert isinstance(draftd.errors.error_for(409, "unknown_session", "m"), draftd.UnknownSessionError)
    e = draftd.errors.item_error_for("some_new_code", "m")
    assert type(e) is draftd.APIError and e.status == 0
    assert draftd.errors.item_error_for("unknown_session", "m").status == 409
