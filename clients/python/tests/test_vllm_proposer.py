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
])
def test_bad_options_are_named(cfg: dict[str, Any], env: dict[str, str], msg: str,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    vc = config("http://127.0.0.1:1")
    vc.additional_config["draftd"].update(cfg)
    with pytest.raises(ValueError, match=msg):
        DraftdProposer(vc)


def test_length_tuner() -> None:
    """Worked cases: K until enough is seen; every token accepted and a
    cheap draft → K; the first token never accepted → 1; acceptance that
    stops after 3 tokens → 3 (E = 4 for every n ≥ 3, cost grows with n)."""
    from draftd.vllm import LengthTuner

    t = LengthTuner(8)
    assert t.best() == 8
    for _ in range(40):
        t.accept(8, 8)
    t.times(0.08, 8, 0.5)
    assert t.best() == 8
    t = LengthTuner(8)
    for _ in range(40):
        t.accept(8, 0)
    t.times(0.08, 8, 0.5)
    assert t.best() == 1
    t = LengthTuner(8)
    for _ in range(200):
        t.accept(8, 3)
    t.times(0.08, 8, 0.5)
    assert t.best() == 3
    # Drafts of 4, every token accepted, for long enough that positions 5–8
    # were last drafted long ago (decayed to 0.016 of a draft): they count as
    # accepted like position 4 (q ≈ 1), so a cheap draft (10 ms a token
    # against a 200 ms rest of the cycle) goes back to K: E(8) = 8.76,
    # 31.3 tokens/s against E(4) = 4.88, 20.3. With a fixed prior of ½ for
    # them, E(6) = 5.40 at 20.8 tokens/s beat E(8) = 5.57 at 19.9: 6.
    t = LengthTuner(8)
    for _ in range(8):
        t.accept(8, 8)
    for _ in range(200):
        t.accept(4, 4)
    t.times(0.04, 4, 0.2)
    assert t.best() == 8
