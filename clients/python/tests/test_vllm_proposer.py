"""draftd.vllm.DraftdProposer against real ``draftd serve`` processes on the
random tiny Qwen2 (vocab 512, max context 256), called as vLLM's model runner
calls it: ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)``
from a method of an object with ``input_batch.req_ids`` and ``requests``
(the attributes the proposer reads; vLLM itself drives it in
test_vllm_e2e.py). No vLLM is needed here. The reference of every draft is a
plain ``POST /draft`` of the whole context."""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

np = pytest.importorskip("numpy")

import draftd  # noqa: E402
from draftd.vllm import DraftdProposer  # noqa: E402

from test_confidence import fake, url  # noqa: E402,F401 (fake: a fixture)
from test_sessions import step, tiny  # noqa: E402,F401 (tiny: a fixture)

K = 6
EOS = 7


def config(url: str, k: int = K, **draftd_cfg: Any) -> Any:
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=256),
        additional_config={"draftd": {"url": url, **draftd_cfg}},
    )


@dataclass
class Req:
    prompt: list[int]
    max_tokens: int
    output: list[int] = field(default_factory=list)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt)

    @property
    def sampling_params(self) -> Any:
        return SimpleNamespace(eos_token_id=EOS, stop_token_ids=[], max_tokens=self.max_tokens)


class Runner:
    """What the proposer reads of vLLM's model runner: the batch's request
    ids in row order, and their states. ``step`` calls the proposer from a
    method of this object, as vLLM's runner does."""

    def __init__(self, proposer: DraftdProposer) -> None:
        self.drafter = proposer
        self.requests: dict[str, Req] = {}
        self.input_batch = SimpleNamespace(req_ids=[])

    def step(self, rows: list[str], sampled: list[list[int]]) -> list[list[int]]:
        self.input_batch.req_ids = list(rows)
        ctxs = [self.requests[r].prompt + self.requests[r].output for r in rows]
        width = max(len(c) for c in ctxs) + 8
        tok = np.zeros((len(rows) + 2, width), dtype=np.int32)  # spare rows, as vLLM's buffer has
        for i, c in enumerate(ctxs):
            tok[i, : len(c)] = c
        lens = np.array([len(c) for c in ctxs] + [0, 0], dtype=np.int32)
        return self.drafter.propose(sampled, lens, tok)


def reference(c: draftd.Client, ctx: list[int], n: int) -> list[int]:
    return list(c.draft(ctx, n).tokens)


def test_sessions_batch_and_end_of_request(tiny) -> None:  # type: ignore[no-untyped-def]
    """Three requests through one proposer, rows reordered between steps and
    one request leaving early: every draft equals /draft on the whole
    context with n = min(K, tokens left − 1); a request whose step ended it
    (a stop token, or max_tokens) gets no draft and its session is deleted;
    after the first step each request goes as accepted + bonus."""
    rng = random.Random(3)
    p = DraftdProposer(config(tiny.url))
    r = Runner(p)
    prompts = {"a": [rng.randrange(8, 512) for _ in range(20)], "b": [rng.randrange(8, 512) for _ in range(9)],
               "c": [rng.randrange(8, 512) for _ in range(30)]}
    r.requests = {k: Req(v, max_tokens=m) for (k, v), m in zip(prompts.items(), (40, 9, 25))}
    last: dict[str, list[int]] = {}
    sampled = {k: [rng.randrange(8, 512)] for k in r.requests}  # the prefill step's token
    for k in r.requests:
        r.requests[k].output += sampled[k]
    steps = 0
    with draftd.Client(tiny.url) as c:
        while r.requests:
            rows = list(r.requests)
            rng.shuffle(rows)
            got = r.step(rows, [sampled[k] for k in rows])
            steps += 1
            for k, d in zip(rows, got):
                q = r.requests[k]
                left = q.max_tokens - len(q.output)
                if left <= 0 or EOS in sampled[k]:
                    assert d == [], f"{k}: request ended; drafted {d}"
                    del r.requests[k]
                    continue
                want = reference(c, q.prompt + q.output, min(K, left - 1)) if left > 1 else []
                assert d == want, f"step {steps} {k}: draft {d}; /draft says {want}"
                # the target accepts some of it and adds one token (EOS now and then)
                ctx, acc, bonus = step(rng, q.prompt + q.output, d)
                if rng.random() < 0.1:
                    bonus = EOS
                    ctx = ctx[:-1] + [EOS]
                new = ctx[len(q.prompt) + len(q.output):][: max(left, 0)]
                q.output += new
                sampled[k] = new
                last[k] = d
    p.close()
    st = p.stats
    assert st.misses == 0 and st.item_errors == 0, st
    assert st.full == 3, f"whole contexts sent: {st.full}; want one per request"
    assert st.incremental == st.drafts + st.item_errors - st.full, st
    assert st.deleted == 3, f"sessions deleted: {st.deleted}; want 3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_down_server_costs_empty_drafts_and_backs_off() -> None:
    """Nothing listens at the URL: every step's drafts are empty (plain
    decoding goes on), the failure is counted, and while backing off the
    proposer does not call at all."""
    p = DraftdProposer(config(f"http://127.0.0.1:{free_port()}", backoff=3600))
    r = Runner(p)
    r.requests = {"a": Req([11, 12, 13], 50, [14]), "b": Req([21, 22], 50, [23])}
    for _ in range(5):
        assert r.step(["a", "b"], [[14], [23]]) == [[], []]
    st = p.stats
    assert (st.misses, st.calls, st.backoff_steps, st.steps) == (1, 0, 4, 5), st
    p.close()


def test_no_runner_drafts_whole_contexts(tiny) -> None:  # type: ignore[no-untyped-def]
    """Called from no model runner (another vLLM layout): drafts still equal
    /draft, sent as whole contexts."""
    p = DraftdProposer(config(tiny.url))
    ctx = [[31, 32, 33, 34], [41, 42]]
    tok = np.zeros((2, 16), dtype=np.int32)
    for i, c in enumerate(ctx):
        tok[i, : len(c)] = c
    got = p.propose([[34], [42]], np.array([4, 2]), tok)
    with draftd.Client(tiny.url) as c:
        assert got == [reference(c, ctx[0], K), reference(c, ctx[1], K)]
    assert p.stats.full == 2 and p.stats.incremental == 0
    p.close()


@pytest.mark.parametrize("cfg, env, msg", [
    ({"timeout": "soon"}, {}, "timeout"),
    ({"timeout": 0}, {}, "must be > 0"),
    ({"color": "red"}, {}, "unknown keys"),
    ({}, {"DRAFTD_BACKOFF": "-1"}, "DRAFTD_BACKOFF"),
    ({"min_confidence": 1.5}, {}, "min_confidence"),
    ({}, {"DRAFTD_MIN_CONFIDENCE": "high"}, "min_confidence"),
    ({"adaptive": "maybe"}, {}, "adaptive"),
    ({"context": 0}, {}, "must be ≥ 1"),
    ({"context": 2.5}, {}, "context.*whole number"),
    ({"context": True}, {}, "context.*whole number"),
    ({}, {"DRAFTD_CONTEXT": "-3"}, "DRAFTD_CONTEXT.*whole number"),
    ({"shared_cores": "sometimes"}, {}, "shared_cores"),
])
def test_bad_options_are_named(cfg: dict[str, Any], env: dict[str, str], msg: str,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    vc = config("http://127.0.0.1:1")
    vc.additional_config["draftd"].update(cfg)
    with pytest.raises(ValueError, match=msg):
        DraftdProposer(vc)


class Scripted:
    """A policy stub for the proposer's ``tuner``: the lengths of a script,
    in order; it records what the proposer tells it."""

    def __init__(self, script: list[int], bounds: list[float] | None = None) -> None:
        self.script = list(script)
        self.bounds = list(bounds) if bounds is not None else None
        self.bound = 0.0
        self.observed: list[tuple[int, int]] = []
        self.evidence: list[tuple[float | None, list[float] | None, bool]] = []  # (bound, confidences, stopped)
        self.verified: list[int] = []
        self.timed: list[int] = []
        self.batches: list[int] = []
        self.asked: list[tuple[int, int]] = []  # draft_generation(prompt_tokens, new_tokens) calls
        self.pays: Any = lambda prompt_tokens, new_tokens: True
        self.prefills: list[int] = []  # tokens of the prefill_time reports
        self.begun = 0  # begin_generation() calls

    def batch(self, rows: int) -> None:
        self.batches.append(rows)

    def choose(self) -> int:
        if self.bounds is not None:
            self.bound = self.bounds.pop(0)
        return self.script.pop(0)

    def observe(self, drafted: int, accepted: int, *, confidences: list[float] | None = None,
                bound: float | None = None, stopped: bool = False) -> None:
        self.observed.append((drafted, accepted))
        self.evidence.append((bound, confidences, stopped))

    def draft_time(self, seconds: float, tokens: int) -> None:
        self.timed.append(tokens)

    def verify_time(self, seconds: float, k: int) -> None:
        self.verified.append(k)

    def prefill_time(self, seconds: float, tokens: int) -> None:
        assert seconds > 0
        self.prefills.append(tokens)

    def begin_generation(self) -> None:
        self.begun += 1

    def draft_generation(self, prompt_tokens: int, new_tokens: int) -> bool:
        self.asked.append((prompt_tokens, new_tokens))
        return bool(self.pays(prompt_tokens, new_tokens))


def test_adaptive_lengths_and_steps_without_a_draft(tiny) -> None:  # type: ignore[no-untyped-def]
    """``adaptive``: each step's drafts have the policy's length; a step it
    gives n = 0 calls draftd not at all and returns an empty draft for every
    row; the policy hears each row's acceptance, each incremental call's length and the
    target's time keyed by the longest draft returned + 1; after steps
    without drafts the sessions go on without sending their contexts again
    (drafts equal /draft of the whole context)."""
    from draftd.batchpolicy import BatchPolicy

    p = DraftdProposer(config(tiny.url, adaptive=True))
    assert isinstance(p.tuner, BatchPolicy)
    script = [4, 0, 0, 2, K]
    pol = Scripted(script)
    p.tuner = pol  # type: ignore[assignment]
    r = Runner(p)
    rng = random.Random(5)
    r.requests = {"a": Req([rng.randrange(8, 512) for _ in range(12)], 100, [300]),
                  "b": Req([rng.randrange(8, 512) for _ in range(7)], 100, [301])}
    sampled = {"a": [300], "b": [301]}
    accepted: list[tuple[int, int]] = []
    with draftd.Client(tiny.url) as c:
        for n in script:
            calls = p.stats.calls
            got = r.step(["a", "b"], [sampled["a"], sampled["b"]])
            for k, d in zip(["a", "b"], got):
                q = r.requests[k]
                want = reference(c, q.prompt + q.output, n) if n else []
                assert d == want, f"n = {n}, {k}: draft {d}; want {want}"
                if d:
                    ctx, acc, _ = step(rng, q.prompt + q.output, d)
                    accepted.append((len(d), acc))
                else:
                    ctx = q.prompt + q.output + [rng.randrange(8, 512)]
                new = ctx[len(q.prompt) + len(q.output):]
                q.output += new
                sampled[k] = new
            assert p.stats.calls == calls + (1 if n else 0), f"n = {n}: {p.stats.calls - calls} draftd calls"
    assert pol.verified == [5, 1, 1, 3], pol.verified
    # After steps without a draft a session's context has grown by more than
    # accepted + bonus: the next request still goes as accepted + bonus,
    # the bonus a list of every token since (no whole context sent again).
    # Whole-context calls' times (prefill) are not the policy's draft times,
    # nor are the catch-ups' (their bonus lists' prefill): the n = 2 step.
    assert (p.stats.full, p.stats.incremental, p.stats.resends, p.stats.catchup) == (2, 4, 0, 2), p.stats
    assert pol.timed == [K], pol.timed
    assert pol.observed == accepted[:4], (pol.observed, accepted)
    assert p.stats.undrafted == 2 and p.stats.misses == 0, p.stats
    assert pol.batches == [2] * len(script), pol.batches  # each step's batch size, before its choice
    p.close()


def test_min_confidence_goes_with_every_request(fake) -> None:  # type: ignore[no-untyped-def]
    """``min_confidence``: sent with every draft request, session items and
    whole contexts alike (a loopback server that answers as the protocol
    says: test_confidence.py); the bounded drafts reach vLLM as answered."""
    p = DraftdProposer(config(url(fake), min_confidence=0.5))
    r = Runner(p)
    r.requests = {"a": Req([11, 12, 13], 50, [14])}
    assert r.step(["a"], [[14]]) == [[100, 101, 102]]  # confidences 0.9, 0.8, 0.6, then 0.3 < 0.5
    tok = np.zeros((1, 8), dtype=np.int32)
    tok[0, :2] = [41, 42]
    q = DraftdProposer(config(url(fake)))
    q._runner_searched = True  # as from no model runner: whole contexts
    assert q.propose([[42]], np.array([2]), tok) == [[100, 101, 102, 103, 104, 105]]
    items = [b["requests"] for path, b in fake.bodies]
    assert [[i.get("min_confidence") for i in it] for it in items] == [[0.5], [None]], items
    assert "session" in items[0][0] and "session" not in items[1][0]
    p.close()
    q.close()


def test_adaptive_bound_goes_with_the_length(fake) -> None:  # type: ignore[no-untyped-def]
    """``adaptive`` against a draftd that reports confidences
    (``confidence_signal`` in /v1/info): each step sends the policy's bound
    as every item's ``min_confidence`` and asks for confidences; a chain
    stopped on the bound reaches vLLM short, the policy hears its bound,
    confidences and stop with the acceptance, and the call's passes are its
    tokens + 1 (the pass that found the unsure token). Against a draftd
    without the signal the bound is not sent."""
    from hostile import INFO

    fake.info = {**INFO, "confidence_signal": "top1_prob", "min_confidence": 0}
    p = DraftdProposer(config(url(fake), adaptive=True))
    assert p.confidence_signal == "top1_prob"
    pol = Scripted([6, 6, 6, 0], bounds=[0.5, 0.5, 0.0, 0.0])
    p.tuner = pol  # type: ignore[assignment]
    r = Runner(p)
    q = Req([11, 12, 13], 50, [14])
    r.requests = {"a": q}
    got = r.step(["a"], [[14]])
    assert got == [[100, 101, 102]], got  # confidences 0.9, 0.8, 0.6, then 0.3 < 0.5
    q.output += [100, 101, 9]  # two accepted, the target's own 9
    assert r.step(["a"], [[100, 101, 9]]) == [[100, 101, 102]]
    q.output += [8]  # none accepted
    assert r.step(["a"], [[8]]) == [[100, 101, 102, 103, 104, 105]]  # bound 0: the whole chain
    q.output += [100, 101, 102, 103, 104, 105, 6]
    assert r.step(["a"], [[100, 101, 102, 103, 104, 105, 6]]) == [[]]
    conf = [0.9, 0.8, 0.6]
    assert pol.observed == [(3, 2), (3, 0), (6, 6)], pol.observed
    assert pol.evidence == [(0.5, conf, True), (0.5, conf, True), (0.0, [0.9, 0.8, 0.6, 0.3, 0.2, 0.9], False)], \
        pol.evidence
    assert pol.timed == [4, 6], pol.timed  # the first call sent the whole prompt: its time is the prefill's
    items = [b["requests"] for path, b in fake.bodies]
    assert [(i[0]["min_confidence"], i[0]["confidences"]) for i in items] == [(0.5, True), (0.5, True), (0.0, True)]
    p.close()

    fake.bodies.clear()
    fake.info = INFO
    p = DraftdProposer(config(url(fake), adaptive=True))
    assert p.confidence_signal is None
    p.tuner = Scripted([6], bounds=[0.5])  # type: ignore[assignment]
    r = Runner(p)
    r.requests = {"a": Req([11, 12, 13], 50, [14])}
    assert r.step(["a"], [[14]]) == [[100, 101, 102, 103, 104, 105]]
    assert [b["requests"][0].get("min_confidence") for _, b in fake.bodies] == [None]
    p.close()


def run_requests(r: Runner, c: draftd.Client, rng: random.Random, steps: int,
                 want: Any) -> dict[str, list[list[int]]]:
    """``steps`` steps of every request in ``r.requests`` (each already holds
    its first output token); each row's draft is checked against
    ``want(request id, its whole context)`` and verified by ``step``.
    Returns each request's drafts."""
    drafts: dict[str, list[list[int]]] = {k: [] for k in r.requests}
    sampled = {k: q.output[-1:] for k, q in r.requests.items()}
    for _ in range(steps):
        rows = list(r.requests)
        got = r.step(rows, [sampled[k] for k in rows])
        for k, d in zip(rows, got):
            q = r.requests[k]
            assert d == want(k, q.prompt + q.output), f"{k} after {len(q.output)} tokens: draft {d}"
            drafts[k].append(d)
            ctx = step(rng, q.prompt + q.output, d)[0] if d else q.prompt + q.output + [rng.randrange(8, 512)]
            new = ctx[len(q.prompt) + len(q.output):]
            q.output += new
            sampled[k] = new
    return drafts


def test_context_window_is_fixed_per_request(tiny, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``context`` = W: a request's drafts are /draft of its context from a
    start fixed at its first draft (its length then − W, or 0), every step;
    its session still goes as accepted + bonus (one whole context per
    request), a window longer than PRIME_TOKENS goes in the background, and
    a request sent again under the same id gets a window of its own."""
    monkeypatch.setattr("draftd.vllm.PRIME_TOKENS", 12)
    W = 16
    p = DraftdProposer(config(tiny.url, context=W))
    assert p.context == W
    r = Runner(p)
    rng = random.Random(11)
    r.requests = {"long": Req([rng.randrange(8, 512) for _ in range(40)], 200, [300]),
                  "short": Req([rng.randrange(8, 512) for _ in range(5)], 200, [301])}
    starts = {"long": 41 - W, "short": 0}
    with draftd.Client(tiny.url) as c:
        primed = r.step(["long", "short"], [[300], [301]])
        # "long" sends its window (16 > PRIME_TOKENS) in the background: no draft this step
        assert primed == [[], reference(c, r.requests["short"].prompt + [301], K)], primed
        p._priming["long"].result(timeout=30)
        r.requests["short"].output += [302]  # each step adds a token, drafted or not
        r.requests["long"].output += [305]
        drafts = run_requests(r, c, rng, 6, lambda k, ctx: reference(c, ctx[starts[k]:], K))
        assert all(drafts["long"]) and all(drafts["short"])
        assert (p.stats.full, p.stats.primed, p.stats.resends) == (2, 1, 0), p.stats
        assert p.stats.prime_seconds > 0 and p.stats.draft_seconds > 0, p.stats  # the background send timed apart
        # the same id, a new request (vLLM's state object): a new session and window
        r.requests["long"] = Req([rng.randrange(8, 512) for _ in range(20)], 200, [303])
        del r.requests["short"]
        r.step(["long"], [[303]])  # its window (16 tokens) primes in the background
        p._priming["long"].result(timeout=30)
        r.requests["long"].output += [306]
        starts["long"] = 21 - W
        run_requests(r, c, rng, 3, lambda k, ctx: reference(c, ctx[starts[k]:], K))
    assert p.stats.full == 3 and p.stats.primed == 2 and p.stats.skipped_generations == 0, p.stats
    p.close()


def test_a_request_whose_prefill_would_not_pay_drafts_nothing(tiny, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``adaptive`` with ``shared_cores`` (the default): before a request's
    first draft the policy is asked whether drafting pays for what draftd
    would take in (its window) and the tokens still to come; a request it
    says no to gets no draft for its whole life and never reaches draftd,
    the others draft as before, and the background sends' times reach the
    policy as prefills. ``shared_cores=False``: never asked."""
    monkeypatch.setattr("draftd.vllm.PRIME_TOKENS", 12)
    p = DraftdProposer(config(tiny.url, adaptive=True, context=24))
    pol = Scripted([K] * 8)
    pol.pays = lambda prompt_tokens, new_tokens: prompt_tokens < 20
    p.tuner = pol  # type: ignore[assignment]
    r = Runner(p)
    rng = random.Random(12)
    r.requests = {"big": Req([rng.randrange(8, 512) for _ in range(60)], 50, [300]),
                  "mid": Req([rng.randrange(8, 512) for _ in range(14)], 140, [301]),
                  "small": Req([rng.randrange(8, 512) for _ in range(6)], 130, [302])}
    with draftd.Client(tiny.url) as c:
        first = r.step(["big", "mid", "small"], [[300], [301], [302]])
        assert first[0] == [] and first[1] == [], first  # "big" skipped; "mid" (15 > 12) primes
        p._priming["mid"].result(timeout=30)
        for k in ("mid", "small"):
            r.requests[k].output.append(303)
        r.requests["big"].output.append(304)
        run_requests(r, c, rng, 5, lambda k, ctx: [] if k == "big" else reference(c, ctx, K))
    # what draftd would take in: big's window (24 of 61), mid's 15, small's 7;
    # the tokens still to come, + 1 (draft_generation counts the first as the prompt pass's)
    assert pol.asked == [(24, 50 - 1 + 1), (15, 140 - 1 + 1), (7, 130 - 1 + 1)], pol.asked
    assert p.stats.skipped_generations == 1 and "big" not in p._sessions, p.stats
    assert pol.prefills == [15], pol.prefills  # mid's background send; small's went in the step's call
    assert p.stats.full == 2, p.stats
    p.close()

    q = DraftdProposer(config(tiny.url, adaptive=True, shared_cores=False))
    pol = Scripted([K] * 2)
    pol.pays = lambda prompt_tokens, new_tokens: False
    q.tuner = pol  # type: ignore[assignment]
    r = Runner(q)
    r.requests = {"a": Req([21, 22, 23, 24], 50, [25])}
    with draftd.Client(tiny.url) as c:
        assert r.step(["a"], [[25]]) == [reference(c, [21, 22, 23, 24, 25], K)]
    assert pol.asked == [] and q.stats.skipped_generations == 0
    q.close()
