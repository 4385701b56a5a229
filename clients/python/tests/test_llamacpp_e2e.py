"""End to end with llama-cpp-python: the real target
(Qwen2.5-Coder-1.5B-Instruct, the Q4_K_M GGUF file, in llama.cpp) verifies
drafts that ``draftd serve`` makes on the real drafter (the 0.5B GGUF)
through draftd.llamacpp.DraftdDraftModel. Checks, per strategy:

1. lossless: the output of llama.cpp greedy with the draftd draft model
   equals plain llama.cpp greedy (the same Llama with no draft model), up
   to a near-tie: at the first differing position both runs' own logits
   rank the two tokens within float32's near-tie gap (draftd._testing.neartie:
   batched verification rounds differently from one-token decoding);
2. the acceptance llama.cpp's verification loop produced equals ``draftd
   eval``'s on the same continuations: the assisted outputs become a
   docs/evaluation.md dataset, ``draftd eval --n N --strategy S`` replays it
   against the same server, and each sample's steps, the histogram of
   accepted lengths and the per-position counts must be what the draft model
   counted. llama-cpp-python samples a generation's first token from the
   prompt's pass, before any draft, so a sample's prompt is the prompt plus
   that token and its continuation the rest (its first step is eval's
   first). That run drafts n tokens every step as eval does
   (``budget=False``); the budgeted run (the default: drafts never past
   max_tokens) must give the same output and the same steps with drafts
   that fit.

And the failure rule: a draftd that is down (connection refused) or does
not answer (a socket that accepts and never replies) costs empty drafts,
counted as misses, and the output is plain greedy's.

Cost (CI): one Llama of the target (n_ctx 1024, 2 threads), one ``draftd
serve`` (1 thread) for both strategies, 2 prompts × 32 tokens.
DRAFTD_E2E_FULL=1: 3 prompts (code, chat, prose) × 64 tokens. Needs
llama_cpp in the venv (scripts/llamacpp-python; under the strictness
switch its absence fails) and the real models (draftd._testing.serve.real_model).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Absent, the module skips: a failure under the strictness switch
# (scripts/test installs it with scripts/llamacpp-python).
pytest.importorskip("llama_cpp")

import numpy as np  # noqa: E402
from llama_cpp import Llama  # noqa: E402

from draftd.llamacpp import DraftdDraftModel, Generation, generate  # noqa: E402

import draftd  # noqa: E402
from draftd._testing.neartie import from_rows, gap_for  # noqa: E402
from draftd._testing.neartie import near_tie as _near_tie  # noqa: E402
from draftd._testing.realtarget import INSTRUCTIONS, PROSE, chat_text  # noqa: E402
from draftd._testing.serve import DRAFTER_FILE, REPO, TARGET_FILE, Server, real_model, start_server  # noqa: E402
from test_confidence import fake, url  # noqa: E402,F401 (fake: a fixture)
from test_sessions import tiny  # noqa: E402,F401 (a fixture)

FULL = os.environ.get("DRAFTD_E2E_FULL") == "1"
N_PROMPTS, NEW_TOKENS = (3, 64) if FULL else (2, 32)
STRATEGIES = ["model", "hybrid"]
DRAFT_LEN = 4
#: draftd._testing.neartie's gap for llama.cpp (its batched quantized kernels).
NEAR_TIE_GAP = gap_for("llama.cpp")

pytestmark = pytest.mark.realmodel

_CODE = (REPO / "testdata/reference/quantize_ref.py").read_text().splitlines()
PROMPTS = [
    ("code-s", "\n".join(_CODE[27:41]) + "\n"),
    ("chat-0", chat_text(INSTRUCTIONS[0])),
    ("prose-0", PROSE[0]),
][:N_PROMPTS]


@pytest.fixture(scope="module")
def drafter(draftd_bin: Path) -> Iterator[Server]:
    s = start_server(draftd_bin, real_model(DRAFTER_FILE), "--threads", "1", "--kv-cache-bytes", str(1 << 30))
    try:
        import draftd

        with draftd.Client(s.url) as c:
            c.wait_ready(300)
        yield s
    finally:
        rc = s.stop()
    assert rc == 0, "".join(s.log)


@pytest.fixture(scope="module")
def llama() -> Llama:
    # draft_model is set per run (a public attribute of Llama); a Llama made
    # with one keeps every position's logits, which the near-tie rule reads.
    m = Llama(model_path=str(real_model(TARGET_FILE)), n_ctx=1024, n_threads=2, n_threads_batch=2, seed=0,
              verbose=False, logits_all=True, draft_model=DraftdDraftModel("http://127.0.0.1:9", session=False))
    m.draft_model = None
    return m


def _run(llama: Llama, dm: DraftdDraftModel | None, ids: list[int], budget: bool = True, *,
         stop: list[int] | None = None, on_token: Callable[[int], None] | None = None) -> tuple[Generation, Any]:
    """One greedy generation; also the logits that chose each token.

    Every run starts from an empty cache: llama-cpp-python otherwise keeps
    the KV of the prompt prefix the previous run shares and re-evaluates only
    the rest, and a prompt's last position computed alone rounds differently
    from the same position in the prompt's batch, enough to flip a later
    near-tie (seen on an AVX-512 Xeon: token 27 of code-s)."""
    llama.reset()
    llama.draft_model = dm
    try:
        g = generate(llama, ids, NEW_TOKENS, budget=budget, stop=stop, on_token=on_token)
    finally:
        llama.draft_model = None
    rows = np.array(llama.scores[len(ids) - 1: len(ids) - 1 + len(g.tokens)], copy=True)
    return g, rows


@pytest.fixture(scope="module")
def greedy(llama: Llama) -> dict[str, tuple[list[int], list[int], Any]]:
    """Plain llama.cpp greedy of each prompt: id → (prompt ids, output, logits)."""
    out = {}
    for sid, text in PROMPTS:
        ids = llama.tokenize(text.encode(), add_bos=False, special=True)
        g, rows = _run(llama, None, ids)
        assert g.acceptance.steps == 0 and g.acceptance.tokens == len(g.tokens) == NEW_TOKENS
        out[sid] = (ids, g.tokens, rows)
    return out


def near_tie(plain: list[int], plain_rows: Any, got: list[int], got_rows: Any) -> tuple[bool, str]:
    """draftd._testing.neartie's rule on each run's own logit rows."""
    return _near_tie(plain, got, from_rows(plain_rows), from_rows(got_rows), NEAR_TIE_GAP)


def _eval(draftd_bin: Path, url: str, data: Path, strategy: str, out: Path) -> dict[str, Any]:
    subprocess.run(
        [str(draftd_bin), "eval", "--url", url, "--data", str(data), "--n", str(DRAFT_LEN), "--strategy", strategy,
         "--concurrency", "1", "--json", str(out)],
        check=True, stdout=subprocess.DEVNULL,
    )
    r: dict[str, Any] = json.loads(out.read_text())
    assert r["failures"] == 0, r.get("first_error")
    return r


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_llamacpp_greedy_and_acceptance_is_evals(strategy: str, llama: Llama, greedy: dict[str, Any],
                                                 drafter: Server, draftd_bin: Path, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    steps: dict[str, int] = {}
    hist = [0] * (DRAFT_LEN + 1)
    reached, accepted = [0] * DRAFT_LEN, [0] * DRAFT_LEN
    # A generous timeout: a miss would be an empty draft that draftd eval does
    # not have (CI machines are loaded); the failure rule has its own tests.
    with DraftdDraftModel(drafter.url, n=DRAFT_LEN, strategy=strategy, timeout=60) as dm, data.open("w") as f:
        for sid, (ids, plain, plain_rows) in greedy.items():
            free, free_rows = _run(llama, dm, ids, budget=False)
            ok, why = near_tie(plain, plain_rows, free.tokens, free_rows)
            print(f"{sid} ({strategy}): {why}; τ {free.acceptance.tau:.2f}")
            assert ok, f"{sid} ({strategy}): llama.cpp + draftd is not plain greedy: {why}"
            acc = free.acceptance
            assert acc.tokens == len(free.tokens) == NEW_TOKENS
            assert acc.drafted[0] == 0 and all(d == DRAFT_LEN for d in acc.drafted[1:]), acc.drafted
            assert all(0 <= a <= d for a, d in zip(acc.accepted, acc.drafted))
            # Each step adds its accepted tokens and one of the target's; the
            # last may be cut by max_tokens.
            assert sum(a + 1 for a in acc.accepted[:-1]) < acc.tokens <= sum(a + 1 for a in acc.accepted)

            # The budgeted run (the default) gives the same output and steps,
            # with no draft reaching past max_tokens.
            bud, _ = _run(llama, dm, ids)
            assert bud.tokens == free.tokens, f"{sid}: the budget changed the output"
            assert bud.acceptance.steps == acc.steps
            made = 0
            for d, a in zip(bud.acceptance.drafted, bud.acceptance.accepted):
                assert d <= NEW_TOKENS - made - 1, f"{sid}: a draft of {d} with {NEW_TOKENS - made} tokens left"
                made += a + 1

            steps[sid] = acc.steps - 1  # without the prompt's pass
            for a in acc.accepted[1:]:
                hist[a] += 1
            r, c = acc.by_position(DRAFT_LEN)
            reached = [x + y for x, y in zip(reached, r)]
            accepted = [x + y for x, y in zip(accepted, c)]
            out = free.tokens
            f.write(json.dumps({"id": sid, "prompt": ids + out[:1], "continuation": out[1:]}) + "\n")
        assert dm.unresolved == 0, "a step's context did not extend the last draft"
        # One session: each generation established it once, with its prompt
        # sent ahead (prime: tokens), then accepted+bonus every step; nothing
        # lost, nothing missed.
        assert dm.misses == 0 and dm.skipped == 0, dm.miss_kinds
        st = dm.session_stats
        assert st is not None and st.resent == 0 and st.tokens == dm.primes == 2 * len(greedy), st
        assert st.incremental == dm.requests - dm.primes

    r = _eval(draftd_bin, drafter.url, data, strategy, tmp_path / "eval.json")
    assert {s["id"]: s["steps"] for s in r["per_sample"]} == steps
    assert r["accept_hist"] == hist, f"accepted-length histogram: draftd eval {r['accept_hist']}; llama.cpp {hist}"
    assert r["position_reached"] == reached
    assert r["position_accepted"] == accepted, f"per position: draftd eval {r['position_accepted']}; llama.cpp {accepted}"
    print(f"{strategy}: τ (eval, after the first token) {r['tau']:.3f}; accepted by position {r['accept_by_position']}")


def test_llamacpp_adaptive_n_is_plain_greedy(llama: Llama, greedy: dict[str, Any], drafter: Server) -> None:
    """adaptive=True chooses each draft's length in [0, n] (never more, and
    each within the budget); the output is still plain greedy's."""
    with DraftdDraftModel(drafter.url, n=DRAFT_LEN, strategy="model", adaptive=True, timeout=60) as dm:
        lengths: set[int] = set()
        for sid, (ids, plain, plain_rows) in greedy.items():
            g, rows = _run(llama, dm, ids)
            ok, why = near_tie(plain, plain_rows, g.tokens, rows)
            assert ok, f"{sid} (adaptive): not plain greedy: {why}"
            assert all(d <= DRAFT_LEN for d in g.acceptance.drafted)
            lengths.update(g.acceptance.drafted[1:])
        assert dm.misses == 0 and dm.unresolved == 0
        print(f"adaptive draft lengths used: {sorted(lengths)}")


def test_llamacpp_prompt_pass_computes_the_last_row_alone(llama: Llama, greedy: dict[str, Any], drafter: Server) -> None:
    """generate() (verify_logits_only) has the target compute every
    position's logits only where it verifies a draft: the prompt's other
    rows are never written (llama-cpp-python's own path with a draft model
    computes and keeps all of them), and the row that chose each output token
    is kept (the near-tie rule reads it)."""
    sid, (ids, plain, plain_rows) = next(iter(greedy.items()))
    llama.scores[: len(ids) + NEW_TOKENS + DRAFT_LEN + 1] = np.nan
    with DraftdDraftModel(drafter.url, n=DRAFT_LEN, strategy="model", timeout=60) as dm:
        g, rows = _run(llama, dm, ids)
    assert max(g.acceptance.drafted) > 0 and sum(g.acceptance.accepted) > 0, "no draft verified: nothing shown"
    assert np.isnan(llama.scores[: len(ids) - 1]).all(), "the prompt's pass computed rows no token was chosen from"
    assert np.isfinite(rows).all(), "a row that chose an output token was not kept"
    assert rows.argmax(axis=1).tolist() == g.tokens
    ok, why = near_tie(plain, plain_rows, g.tokens, rows)
    assert ok, f"{sid}: not plain greedy: {why}"


def test_on_token_is_called_with_each_token_once_in_order(llama: Llama, greedy: dict[str, Any],
                                                         drafter: Server) -> None:
    """generate(on_token=f) calls f with exactly the tokens it returns, in
    order, once each: a verification step that accepts k draft tokens calls
    it k + 1 times, after the step's eval and before the next; a stop token
    inside an accepted draft is the last call, nothing verified past it
    follows; with no draft model, each token of plain greedy."""
    sid, (ids, plain, plain_rows) = next(iter(greedy.items()))
    seen: list[int] = []
    evals: list[int] = []  # per call of on_token: how many Llama.eval calls came before it
    count = 0
    real_eval = llama.eval

    def counted(tokens: Any) -> None:
        nonlocal count
        count += 1
        real_eval(tokens)

    def on_token(t: int) -> None:
        seen.append(t)
        evals.append(count)

    llama.eval = counted  # type: ignore[method-assign]  # generate() calls self.eval: the instance's
    try:
        with DraftdDraftModel(drafter.url, n=DRAFT_LEN, strategy="model", timeout=60) as dm:
            count = 0
            g, rows = _run(llama, dm, ids, on_token=on_token)
            assert seen == g.tokens, f"{sid}: on_token got {seen}; generate() returned {g.tokens}"
            ok, why = near_tie(plain, plain_rows, g.tokens, rows)
            assert ok, f"{sid}: not plain greedy: {why}"
            acc = g.acceptance
            assert max(acc.accepted) >= 1 and dm.unresolved == 0, f"no draft token accepted: nothing shown {acc}"
            # step s (its eval the (s+1)-th) emits its accepted tokens and the target's; the last may be cut
            made = [a + 1 for a in acc.accepted[:-1]]
            made.append(len(g.tokens) - sum(made))
            assert evals == [s + 1 for s, m in enumerate(made) for _ in range(m)], \
                f"{sid}: evals before each token {evals}; accepted per step {acc.accepted}"

            # Stop at an accepted draft token its step verified more after (the
            # next token came from the same eval), its first occurrence.
            first = list(evals)
            cuts = [i for i in range(len(first) - 1) if first[i] == first[i + 1] and g.tokens[i] not in g.tokens[:i]]
            assert cuts, f"{sid}: no accepted draft token to stop at: {g.tokens}, {acc.accepted}"
            i = cuts[0]
            seen.clear()
            evals.clear()
            count = 0
            cut, _ = _run(llama, dm, ids, stop=[g.tokens[i]], on_token=on_token)
            assert cut.tokens == g.tokens[: i + 1], f"{sid}: stop {g.tokens[i]} (token {i}): {cut.tokens}"
            assert seen == cut.tokens, f"{sid}: on_token got {seen}; generate() returned {cut.tokens}"
            assert evals == first[: i + 1], "the stop token did not come from the step that verified past it"

        seen.clear()
        alone, _ = _run(llama, None, ids, on_token=on_token)
        assert seen == alone.tokens == plain
    finally:
        del llama.eval


def test_adaptive_no_draft_steps(tiny) -> None:  # type: ignore[no-untyped-def]
    """The draft model called as llama-cpp-python calls it (the whole
    context each step), its policy scripted: a step the policy gives n = 0
    sends no request and returns an empty array; the policy hears each
    step's acceptance and the target's time keyed by the draft's length + 1
    (1 after a step without a draft); drafts equal /draft of the whole
    context, also after steps without one (the session's request carries
    the tokens since as its bonus list: a catch-up, whose time is not given
    to the policy as a draft call's)."""
    from test_vllm_proposer import Scripted

    from draftd.policy import LengthPolicy

    script = [3, 0, 0, 2, 4]
    with DraftdDraftModel(tiny.url, n=4, strategy="model", adaptive=True) as dm, draftd.Client(tiny.url) as c:
        assert isinstance(dm._adaptive, LengthPolicy)
        pol = Scripted(script)
        dm._adaptive = pol  # type: ignore[assignment]
        ctx = [5, 17, 300, 42, 9, 77]
        want_obs: list[tuple[int, int]] = []
        for i, n in enumerate(script):
            requests = dm.requests
            d = dm(np.asarray(ctx, dtype=np.intc))
            assert d.dtype == np.intc
            want = list(c.draft(ctx, n, strategy="model").tokens) if n else []
            assert d.tolist() == want, f"step {i}, n = {n}: draft {d.tolist()}; /draft says {want}"
            assert dm.requests == requests + (1 if n else 0)
            k = min(1, len(want))  # the target accepts the first token, then adds one of its own
            ctx = ctx + want[:k] + [400 + i]
            want_obs.append((len(want), k))
    assert pol.verified == [4, 1, 1, 3], pol.verified
    assert pol.observed == want_obs[:4], pol.observed
    # not the first (its time is the prompt's prefill), nor the n = 2 step's:
    # it carried the tokens of the two steps without a draft (a catch-up)
    assert pol.timed == [4], pol.timed
    assert dm.session_stats is not None and dm.session_stats.catchup == 1, dm.session_stats
    assert dm.misses == 0


def test_min_confidence_goes_with_every_request(fake) -> None:  # type: ignore[no-untyped-def]
    """``min_confidence``: sent with every draft request, through a session
    or not (a loopback server that answers as the protocol says:
    test_confidence.py); the bounded draft is what the target gets."""
    for session in (True, False):
        fake.bodies.clear()
        with DraftdDraftModel(url(fake), n=6, session=session, min_confidence=0.5) as dm:
            d = dm(np.asarray([5, 6, 7], dtype=np.intc))
            assert d.tolist() == [100, 101, 102] and d.dtype == np.intc
        sent = [b for path, b in fake.bodies if path == "/draft"]
        assert len(sent) == 1 and sent[0]["min_confidence"] == 0.5, fake.bodies
        assert ("session" in sent[0]) == session
    for bad in (1.5, -0.1, "0.5"):
        with pytest.raises((TypeError, ValueError), match="min_confidence"):
            DraftdDraftModel(url(fake), min_confidence=bad)  # type: ignore[arg-type]


def test_context_window_sends_the_prompt_tail(fake) -> None:  # type: ignore[no-untyped-def]
    """``context=W``: a generation's first request (the prime, or the first
    draft without one) carries the last W tokens of its prompt, every later
    one extends that window; a new generation starts its own."""
    for session in (True, False):
        fake.bodies.clear()
        prompt = list(range(1000, 1040))
        with DraftdDraftModel(url(fake), n=2, session=session, context=8) as dm:
            dm.prime(prompt)
            d = dm(np.asarray(prompt + [7], dtype=np.intc)).tolist()
            dm(np.asarray(prompt + [7] + d[:1] + [9], dtype=np.intc))
            dm(np.asarray([5, 6, 7], dtype=np.intc))  # a new generation shorter than the window: all of it
        sent = [b for path, b in fake.bodies if path == "/draft"]
        tail = prompt[-8:]
        if session:
            assert sent[0]["tokens"] == tail, sent[0]
            assert [b.get("accepted") for b in sent[1:3]] == [0, 1] and "tokens" not in sent[1], sent  # incremental
            assert sent[-1]["tokens"] == [5, 6, 7], sent[-1]
        else:
            assert [b["tokens"] for b in sent] == [tail, tail + [7], tail + [7] + d[:1] + [9], [5, 6, 7]], sent
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="context"):
            DraftdDraftModel(url(fake), context=bad)  # type: ignore[arg-type]


def test_context_window_drafts_are_the_windows(tiny) -> None:  # type: ignore[no-untyped-def]
    """Through a real draftd: each draft of a windowed generation equals
    /draft of the same window (the prompt's last W tokens and what followed)."""
    prompt = [(i * 37) % 500 + 3 for i in range(48)]
    with DraftdDraftModel(tiny.url, n=3, strategy="model", context=10) as dm, draftd.Client(tiny.url) as c:
        with dm.budget(len(prompt), 20):
            dm.prime(prompt)
            ctx = prompt + [400]
            for i in range(4):
                d = dm(np.asarray(ctx, dtype=np.intc)).tolist()
                want = list(c.draft(ctx[len(prompt) - 10:], 3, strategy="model").tokens)
                assert d == want, f"step {i}: {d}; /draft of the window {want}"
                ctx = ctx + d[:1] + [401 + i]
        assert dm.misses == 0


def test_adaptive_skips_a_generation_whose_prefill_would_not_pay(fake) -> None:  # type: ignore[no-untyped-def]
    """With ``adaptive`` and ``shared_cores`` (the default), budget() asks the
    policy whether drafting would win back draftd's prefill of the prompt
    (as draftd takes it in: ``context`` tokens at most); a generation that
    would not sends nothing — no prime, no draft — and counts in
    ``skipped_generations``. ``shared_cores=False`` drafts it."""
    from test_policy import _paying_policy

    long_prompt = list(range(1000, 2317))  # 1,317 tokens: a prefill of ~2.9 s for 64 tokens that save ≤ 2.2 s
    for shared, context, drafts in ((True, None, False), (False, None, True), (True, 256, True)):
        fake.bodies.clear()
        with DraftdDraftModel(url(fake), n=3, adaptive=True, shared_cores=shared, context=context) as dm:
            pol = _paying_policy()
            pol.prefill_time(0.66, 300)  # 2.2 ms per token
            dm._adaptive = pol
            with dm.budget(len(long_prompt), 64) as acc:
                dm.prime(long_prompt)
                d = dm(np.asarray(long_prompt + [7], dtype=np.intc)).tolist()
            sent = [b for path, b in fake.bodies if path == "/draft"]
            case = f"shared_cores={shared}, context={context}"
            assert (len(sent) == 2 and d != []) == drafts, f"{case}: sent {len(sent)}, draft {d}"
            assert dm.skipped_generations == (0 if drafts else 1), case
            assert acc.drafted == [0, len(d)]
            if drafts:  # the prime's time is a prefill of what draftd took in
                assert pol._prefills[-1][0] == min(len(long_prompt), context or len(long_prompt)), pol._prefills


def test_adaptive_begins_a_policy_generation_per_generation(fake) -> None:  # type: ignore[no-untyped-def]
    """With ``adaptive``, each generation begins one of the policy's
    (LengthPolicy.begin_generation: its own drafts count most): each
    budget(), and outside one (llama-cpp-python's server) each call whose
    context does not extend the last call's — not a step that extends it,
    drafted or not."""
    prompt = list(range(1000, 1040))
    with DraftdDraftModel(url(fake), n=3, adaptive=True) as dm:
        pol = dm._adaptive
        assert pol is not None and pol.generations == 0
        with dm.budget(len(prompt), 16):
            dm.prime(prompt)
            ctx = prompt + [7]
            for i in range(4):
                d = dm(np.asarray(ctx, dtype=np.intc)).tolist()
                ctx = ctx + d[:1] + [8 + i]
        assert pol.generations == 1
        steps = [prompt + [7], prompt + [7, 9], prompt + [7, 9, 10, 11],  # a generation, with and without drafts
                 [5, 6, 7], [5, 6, 7, 8],  # a new one
                 [5, 6, 7, 8]]  # the same context again: llama.cpp starting over
        for ctx in steps:
            dm(np.asarray(ctx, dtype=np.intc))
        assert pol.generations == 4, pol.generations


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def test_llamacpp_draftd_down_is_plain_greedy(llama: Llama, greedy: dict[str, Any]) -> None:
    sid, (ids, plain, _) = next(iter(greedy.items()))
    with DraftdDraftModel(f"http://127.0.0.1:{_closed_port()}", n=DRAFT_LEN, cooldown=0) as dm:
        g, _ = _run(llama, dm, ids)
        assert g.tokens == plain, f"{sid}: with draftd down the output is not plain greedy"
        # The prime and every step asked, but the last (no room: one token left).
        assert dm.calls == len(g.acceptance.drafted) - 1
        assert dm.requests == dm.misses == dm.calls > 1
        assert set(dm.miss_kinds) == {"ConnectError"}, dm.miss_kinds
        assert all(d == 0 for d in g.acceptance.drafted)


def test_llamacpp_draftd_silent_costs_a_timeout_then_cooldown(llama: Llama, greedy: dict[str, Any]) -> None:
    """A server that accepts connections and never answers: the first
    request (the prompt sent ahead) times out (a miss), and the cooldown
    (longer than the whole generation here) sends no other request."""
    sid, (ids, plain, _) = next(iter(greedy.items()))
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            held.append(c)  # read nothing, answer nothing

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.getsockname()[1]}"
        with DraftdDraftModel(url, n=DRAFT_LEN, timeout=0.2, first_timeout=0.2, cooldown=3600) as dm:
            g, _ = _run(llama, dm, ids)
            assert g.tokens == plain, f"{sid}: with draftd silent the output is not plain greedy"
            assert (dm.requests, dm.misses) == (1, 1), (dm.requests, dm.misses, dm.miss_kinds)
            assert set(dm.miss_kinds) == {"TimeoutError"}, dm.miss_kinds
            assert dm.skipped == dm.calls - 1  # all but the last (no room)
    finally:
        stop.set()
        srv.close()
        for c in held:
            c.close()


def test_draft_model_rejects_bad_settings() -> None:
    for kw in ({"n": 0}, {"n": 2.5}, {"timeout": 0}, {"first_timeout": -1}, {"cooldown": -1}):
        with pytest.raises(ValueError):
            DraftdDraftModel("http://127.0.0.1:9", **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="base_url"):
        DraftdDraftModel("127.0.0.1:9")


def test_adaptive_bound_goes_with_the_length(fake) -> None:  # type: ignore[no-untyped-def]
    """adaptive=True against a draftd that reports confidences: each draft
    request carries the policy's bound as ``min_confidence`` and asks for
    confidences, through a session or not; a chain stopped on the bound is
    the short draft the target gets, and the policy hears its bound,
    confidences and stop with the acceptance, and passes = tokens + 1. A
    draftd without the signal gets no bound."""
    from hostile import INFO
    from test_vllm_proposer import Scripted

    conf = [0.9, 0.8, 0.6]
    for session in (True, False):
        fake.bodies.clear()
        fake.info = {**INFO, "confidence_signal": "top1_prob", "min_confidence": 0}
        with DraftdDraftModel(url(fake), n=6, session=session, adaptive=True) as dm:
            assert dm.confidence_signal == "top1_prob"
            pol = Scripted([6, 6, 6], bounds=[0.5, 0.5, 0.0])
            dm._adaptive = pol  # type: ignore[assignment]
            ctx = [5, 6, 7]
            d = dm(np.asarray(ctx, dtype=np.intc))
            assert d.tolist() == [100, 101, 102], d.tolist()
            ctx += [100, 101, 9]
            assert dm(np.asarray(ctx, dtype=np.intc)).tolist() == [100, 101, 102]
            ctx += [8]
            assert dm(np.asarray(ctx, dtype=np.intc)).tolist() == [100, 101, 102, 103, 104, 105]
        assert pol.observed == [(3, 2), (3, 0)], pol.observed
        assert pol.evidence == [(0.5, conf, True), (0.5, conf, True)], pol.evidence
        assert pol.timed == [4, 6], pol.timed  # the first request sent the prompt: its time is the prefill's
        sent = [b for path, b in fake.bodies if path == "/draft"]
        assert [(b["min_confidence"], b["confidences"], "session" in b) for b in sent] == \
            [(0.5, True, session), (0.5, True, session), (0.0, True, session)], sent

    fake.bodies.clear()
    fake.info = INFO
    with DraftdDraftModel(url(fake), n=6, adaptive=True) as dm:
        assert dm.confidence_signal is None
        dm._adaptive = Scripted([6], bounds=[0.5])  # type: ignore[assignment]
        assert dm(np.asarray([5, 6, 7], dtype=np.intc)).tolist() == [100, 101, 102, 103, 104, 105]
    assert [b.get("min_confidence") for path, b in fake.bodies if path == "/draft"] == [None]
