"""draftd.vllm.DraftdProposer's sessions over a request's life in vLLM's
model runner, against a real ``draftd serve`` on the random tiny Qwen2: a
request that leaves the batch (preempted or not scheduled) but stays in the
runner's ``requests`` keeps its session; a request gone from ``requests``
(finished, aborted) loses it; a request sent again under the same id gets a
new session that no late DELETE of the old one can remove; a renamed vLLM
attribute never raises inside the engine step. The runner is
test_vllm_proposer's stand-in (the attributes the proposer reads, as vLLM
0.32's ``GPUModelRunner._update_states`` keeps them: preempted and
unscheduled requests leave ``input_batch`` and stay in ``requests``);
test_vllm_serve.py runs the same under vLLM itself. The reference of every
draft is a plain ``POST /draft`` of the whole context."""

from __future__ import annotations

import logging
import random
import threading
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

np = pytest.importorskip("numpy")

import draftd  # noqa: E402
from draftd.vllm import DraftdProposer  # noqa: E402

from test_sessions import step, tiny  # noqa: E402,F401 (tiny: a fixture)
from test_vllm_proposer import EOS, K, Req, Runner, config  # noqa: E402


def sessions_held(url: str) -> int:
    """draftd_sessions from the server's /metrics."""
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("draftd_sessions "):
            return int(float(line.split()[1]))
    raise AssertionError("no draftd_sessions in /metrics")


def flush(p: DraftdProposer) -> None:
    """Waits until the proposer's background DELETEs have run (they run in
    order on one thread)."""
    p._deleter.submit(lambda: None).result(timeout=60)


class Target:
    """Drives a Runner like vLLM's scheduler: a step verifies each row's
    last draft (the target accepts some of it and adds a token), then asks
    the proposer for the next drafts and checks each against /draft on the
    whole context."""

    def __init__(self, runner: Runner, client: draftd.Client, seed: int) -> None:
        self.r, self.c, self.rng = runner, client, random.Random(seed)
        self.sampled: dict[str, list[int]] = {}
        self.pending: dict[str, list[int] | None] = {}  # the draft a row's next step verifies

    def add(self, rid: str, prompt_len: int, max_tokens: int = 200) -> None:
        q = Req([self.rng.randrange(8, 512) for _ in range(prompt_len)], max_tokens=max_tokens)
        q.output.append(self.rng.randrange(8, 512))  # the prefill step's token
        self.r.requests[rid] = q
        self.sampled[rid] = list(q.output)
        self.pending[rid] = None

    def resume(self, rid: str) -> None:
        """A preempted request scheduled again: its last draft was never
        verified; vLLM recomputes its context and samples one token."""
        t = self.rng.randrange(8, 512)
        self.r.requests[rid].output.append(t)
        self.sampled[rid] = [t]
        self.pending[rid] = None

    def step(self, rows: list[str]) -> None:
        for k in rows:
            d = self.pending[k]
            if d is not None:
                q = self.r.requests[k]
                ctx, _, _ = step(self.rng, q.prompt + q.output, d)
                self.sampled[k] = ctx[len(q.prompt) + len(q.output):]
                q.output += self.sampled[k]
        got = self.r.step(rows, [self.sampled[k] for k in rows])
        for k, d in zip(rows, got):
            q = self.r.requests[k]
            want = list(self.c.draft(q.prompt + q.output, K).tokens)
            if self.r.drafter.tuner is not None:
                want = want[: len(d)]  # the adaptive policy chose the length: the draft is /draft's prefix
            if d or not self.r.drafter._priming.get(k):
                assert d == want, f"{k}: draft {d}; /draft says {want}"
            self.pending[k] = d


def test_preempted_request_keeps_its_session(tiny) -> None:  # type: ignore[no-untyped-def]
    """b leaves the batch for two steps (preempted: vLLM keeps it in
    requests) and comes back: its session is not deleted, and it sends its
    context once in all — no whole-context resend."""
    p = DraftdProposer(config(tiny.url))
    with draftd.Client(tiny.url) as c:
        t = Target(Runner(p), c, 1)
        for rid, n in (("a", 20), ("b", 35), ("c", 9)):
            t.add(rid, n)
        t.step(["a", "b", "c"])
        t.step(["c", "a", "b"])
        t.step(["a", "c"])  # b preempted
        t.step(["c", "a"])
        flush(p)
        assert sessions_held(tiny.url) == 3, "b's session was deleted while b was only preempted"
        t.resume("b")
        t.step(["a", "b", "c"])
        t.step(["b", "a", "c"])
    st = p.stats
    assert st.misses == 0 and st.item_errors == 0, st
    assert (st.full, st.resends, st.deleted) == (3, 0, 0), st
    p.close()


def test_aborted_request_loses_session_and_pending(tiny) -> None:  # type: ignore[no-untyped-def]
    """c is aborted mid-generation (gone from requests, with no stop token):
    its session is deleted at the next step and it leaves _pending (the
    adaptive length's drafts awaiting their verification)."""
    from test_vllm_proposer import Scripted

    p = DraftdProposer(config(tiny.url, adaptive=True))
    # the adaptive path (drafts awaiting verification in _pending) at length K
    # every step: a step the real policy gives no draft would make the next
    # one send its whole context (counted in resends), which is not what this
    # test is about
    p.tuner = Scripted([K] * 8)  # type: ignore[assignment]
    with draftd.Client(tiny.url) as c:
        t = Target(Runner(p), c, 2)
        for rid, n in (("a", 12), ("b", 30), ("c", 17)):
            t.add(rid, n)
        t.step(["a", "b", "c"])
        t.step(["a", "b", "c"])
        del t.r.requests["c"]  # aborted: vLLM drops it from requests and the batch
        t.step(["a", "b"])
        flush(p)
        assert sessions_held(tiny.url) == 2
        assert "c" not in p._pending, f"aborted request left in _pending: {p._pending}"
        t.step(["b", "a"])
    assert (p.stats.full, p.stats.resends, p.stats.deleted) == (3, 0, 1), p.stats
    p.close()


def test_late_delete_never_removes_a_newer_session(tiny) -> None:  # type: ignore[no-untyped-def]
    """a is aborted and sent again under the same id (an OpenAI client's
    own request id, a retry): the old a's DELETE runs late, after the new
    a's first draft (held back here by blocking the proposer's delete
    thread), and must not remove the new a's session. Also a request
    aborted and resubmitted between two steps (vLLM: the same id, a new
    request state) gets a new session."""
    p = DraftdProposer(config(tiny.url))
    gate = threading.Event()
    p._deleter.submit(gate.wait, 60)
    with draftd.Client(tiny.url) as c:
        t = Target(Runner(p), c, 3)
        t.add("a", 15)
        t.add("b", 22)
        t.step(["a", "b"])
        t.step(["b", "a"])
        del t.r.requests["a"]
        t.step(["b"])  # a gone: its DELETE is queued (and held)
        t.add("a", 26)  # a again, a new request
        t.step(["a", "b"])
        gate.set()
        flush(p)
        t.step(["a", "b"])
        t.step(["b", "a"])
        assert sessions_held(tiny.url) == 2
        t.add("b", 8)  # b aborted and resubmitted between two steps
        t.step(["a", "b"])
        t.step(["a", "b"])
        flush(p)
        assert sessions_held(tiny.url) == 2
    st = p.stats
    assert st.misses == 0 and st.item_errors == 0, st
    assert (st.full, st.resends, st.deleted) == (4, 0, 2), st
    p.close()


class Renamed:
    """A request state from a vLLM release that renamed what _want reads:
    no num_prompt_tokens, sampling params without stop_token_ids and whose
    max_tokens raises."""

    def __init__(self, prompt: list[int], output: list[int]) -> None:
        self.prompt, self.output = prompt, output

    class _Params:
        eos_token_id = EOS
        stop_ids: list[int] = []

        @property
        def max_tokens(self) -> int:
            raise RuntimeError("max_tokens moved to .limits")

    sampling_params = _Params()


def test_renamed_vllm_attributes_never_raise(tiny, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """propose() on states whose attributes were renamed drafts as without
    the end-of-request rule (n = K) and logs each unreadable attribute once."""
    p = DraftdProposer(config(tiny.url))
    r = Runner(p)
    rng = random.Random(4)
    r.requests = {"a": Renamed([rng.randrange(8, 512) for _ in range(10)], [9]),  # type: ignore[dict-item]
                  "b": Renamed([rng.randrange(8, 512) for _ in range(20)], [10])}  # type: ignore[dict-item]
    caplog.set_level(logging.WARNING, logger="draftd.vllm")
    with draftd.Client(tiny.url) as c:
        sampled = {"a": [9], "b": [10]}
        for _ in range(3):
            got = r.step(["a", "b"], [sampled["a"], sampled["b"]])
            for k, d in zip(["a", "b"], got):
                q: Any = r.requests[k]
                assert d == list(c.draft(q.prompt + q.output, K).tokens)
                q.output += [11]  # none of the draft accepted (no stop token reaches sampled)
                sampled[k] = [11]
    warned = [m.getMessage() for m in caplog.records if "cannot read vLLM's" in m.getMessage()]
    assert len(warned) == 2, warned
    assert any("stop_token_ids" in w for w in warned) and any("max_tokens" in w for w in warned), warned
    p.close()


def test_renamed_num_prompt_tokens(tiny, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """A state without num_prompt_tokens: the max_tokens rule cannot be
    applied, so the draft is K, and nothing raises."""
    p = DraftdProposer(config(tiny.url))
    r = Runner(p)
    q = SimpleNamespace(prompt=[21, 22, 23], output=[24],
                        sampling_params=SimpleNamespace(eos_token_id=EOS, stop_token_ids=[], max_tokens=3))
    r.requests = {"a": q}  # type: ignore[dict-item]
    caplog.set_level(logging.WARNING, logger="draftd.vllm")
    got = r.step(["a"], [[24]])
    with draftd.Client(tiny.url) as c:
        assert got == [list(c.draft([21, 22, 23, 24], K).tokens)]
    assert [m.getMessage() for m in caplog.records if "num_prompt_tokens" in m.getMessage()]
    p.close()


@pytest.mark.realmodel
def test_with_vllms_own_runner_state(tiny, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same life cycle through vLLM's own classes (CachedRequestState,
    SamplingParams, InputBatch; vllm_runner_check.py, run by vLLM's python):
    drafts equal /draft; a preempted request keeps its session; an aborted
    one and a finished one lose theirs; the aborted id sent again gets a new
    session; every request sent its context once; every attribute the
    proposer reads exists under the name it reads."""
    import json
    import subprocess
    from pathlib import Path

    from test_vllm_e2e import vllm_python

    from draftd._testing.vllmserve import engine_env

    out = tmp_path / "check.json"
    env = engine_env()
    r = subprocess.run([str(vllm_python()), str(Path(__file__).with_name("vllm_runner_check.py")), tiny.url, str(out)],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    rep = json.loads(out.read_text())
    assert rep["mismatches"] == [], rep["mismatches"][:3]
    assert rep["unreadable"] == [], f"vLLM attributes the proposer could not read: {rep['unreadable']}"
    assert rep["held_while_preempted"] == 3, rep
    assert rep["held_at_end"] == 2, rep
    st = rep["stats"]
    assert (st["full"], st["resends"], st["deleted"], st["misses"]) == (4, 0, 2, 0), st


def test_long_context_goes_in_the_background(tiny, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A new request whose context is longer than PRIME_TOKENS (16 here;
    256 by default, below a real prompt) is sent to draftd in the
    background, not in the step's call, where draftd's prefill of it would
    hold up every row (and vLLM's step) past the timeout: it drafts nothing
    until its session holds the context, then goes on as accepted + bonus;
    the others draft meanwhile. A request that ends while its context is on
    its way has its session deleted after the send that makes it."""
    import draftd.vllm as dv

    monkeypatch.setattr(dv, "PRIME_TOKENS", 16, raising=False)
    p = DraftdProposer(config(tiny.url))
    gate = threading.Event()
    with draftd.Client(tiny.url) as c:
        t = Target(Runner(p), c, 6)
        t.add("short", 10)
        t.add("long", 40)
        p._primer.submit(gate.wait, 60)  # hold the background sends back
        got = t.r.step(["short", "long"], [t.sampled["short"], t.sampled["long"]])
        q = t.r.requests["short"]
        assert got[0] == list(c.draft(q.prompt + q.output, K).tokens)
        assert got[1] == [], f"the long context's first draft came in the step's call: {got[1]}"
        t.pending = {"short": got[0], "long": None}
        t.sampled["long"] = [t.rng.randrange(8, 512)]
        t.r.requests["long"].output += t.sampled["long"]
        t.step(["short", "long"])  # long still on its way: no draft (Target checks /draft only where drafted)
        gate.set()
        p._primer.submit(lambda: None).result(60)
        t.pending["long"] = None
        t.sampled["long"] = [t.rng.randrange(8, 512)]
        t.r.requests["long"].output += t.sampled["long"]
        t.step(["long", "short"])
        t.step(["short", "long"])
        # a long request that ends while its context is on its way
        gate2 = threading.Event()
        p._primer.submit(gate2.wait, 60)
        t.add("gone", 50)
        t.step(["short", "long", "gone"])
        del t.r.requests["gone"]
        t.step(["short", "long"])
        gate2.set()
        p._primer.submit(lambda: None).result(60)
        flush(p)
        assert sessions_held(tiny.url) == 2
    st = p.stats
    assert st.misses == 0 and st.item_errors == 0, st
    # long moved on two tokens while its context was on its way: then
    # accepted + bonus, the bonus the list of tokens since (no whole context
    # sent again).
    assert (st.primed, st.resends, st.full) == (2, 0, 3), st
    p.close()
