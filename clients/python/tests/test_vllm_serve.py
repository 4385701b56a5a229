"""``vllm serve`` (its engine in another process, the OpenAI API) with draftd
as its speculative proposer, run with the command docs/serving.md shows (read
from it here: ``python -m vllm.entrypoints.openai.api_server``, the same
server, as the CPU build's ``vllm`` command does not start), on the real 0.5B as its own target (small and fast; what is
checked is the path) and the real 0.5B GGUF in ``draftd serve``:

- six streaming completions of prompts from ~20 to ~2,050 tokens (a
  RAG-style chat prompt over a fixed excerpt of docs/protocol.md) and of different lengths:
  the two long ones at once, the four short ones once both stream, one of
  them abandoned by its client mid-stream (vLLM aborts it);
- a KV cache of exactly the two long prompts' blocks and two more
  (``--num-gpu-blocks-override``; the CPU build's ``VLLM_CPU_KVCACHE_SPACE``
  is whole GiB, far too large for a 0.5B), so that vLLM admits both and
  must preempt as they grow (blocks_for says why):
  ``vllm:num_preemptions`` must be > 0;
- each output equals the same request to the same ``vllm serve`` without
  draftd, sent alone (greedy; realtarget's near-tie rule on the top-2
  log-probabilities of both runs) — the abandoned one over what arrived;
- afterwards draftd holds no session (its /metrics), and every session sent
  its whole context once (``draftd_session_requests_total`` of form
  ``tokens`` equals the sessions made and deleted, one per request; none
  answered ``unknown_session``): no whole-context resend for a request
  preempted, unscheduled, or whose prompt went in the background.

vLLM's venv (scripts/vllmenv) and the exported 0.5B (scripts/hfexport) are
needed: without them the test skips, or fails when CI=true.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import DRAFTER_FILE, REPO, Server, real_model
from draftd._testing.neartie import gap_for
from draftd._testing.openai_stream import Stream, complete, metric, metrics
from draftd._testing.realtarget import vllm_near_tie
from draftd._testing.vllmserve import VLLM, dtype, free_port, hf_dir, serve_argv

pytestmark = pytest.mark.realmodel

HF_NAME = "qwen2.5-coder-0.5b-instruct"
MAX_MODEL_LEN = 2560
BLOCK = 32  # tokens (the CPU build's default is 128: requests that grow by a few dozen tokens seldom need a block)
SLACK = 2  # blocks beyond the two long prompts': room to admit both, not for them to grow by GROW tokens
GROW = 96  # new tokens of each long request: 3 blocks more than its prompt's, more than SLACK
LONG = ("rag", "code-1")


def argv(model: Path, draftd_url: str | None, blocks: int) -> tuple[dict[str, str], list[str]]:
    """The documented command for this test: the 0.5B, a free port, 96M
    of KV cache (≥ blocks blocks of the 0.5B, 3 MiB each in float32; free
    on a busy machine) cut to exactly blocks blocks of BLOCK tokens."""
    return serve_argv(model, free_port(), draftd_url, kv_bytes="96M",
                      # a step may wait long for its drafts on a loaded machine: a
                      # failed call would resend contexts, which the test counts
                      draftd={"timeout": 120},
                      extra=["--max-model-len", str(MAX_MODEL_LEN), "--block-size", str(BLOCK),
                             "--num-gpu-blocks-override", str(blocks), "--seed", "0"])


@pytest.fixture
def drafter(serve: Any) -> Server:
    """A draftd serve of this test alone (its session counters are this
    run's), one thread."""
    import draftd

    s: Server = serve(real_model(DRAFTER_FILE), "--threads", "1")
    with draftd.Client(s.url) as c:
        c.wait_ready(300)
    return s


def requests(tok: Any, model: Path) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """The six requests (token-id prompts, greedy, top-2 log-probabilities,
    a fixed length) and which is abandoned after how many tokens: two long
    ones (LONG: a RAG-style chat prompt of ~2,050 tokens over
    testdata/prompts/served-rag-document.txt — a fixed excerpt of docs/protocol.md — and ~830 tokens of code) that grow by GROW tokens each,
    and four short ones of different lengths."""
    from draftd._testing.realtarget import prompts

    ps = dict(prompts(tok, 5))  # code-0 (~520 tokens), chat-0, prose-0, code-1 (~830), chat-1
    doc = tok((REPO / "testdata/prompts/served-rag-document.txt").read_text(), add_special_tokens=False)["input_ids"][:2000]
    rag = tok.apply_chat_template(
        [{"role": "system", "content": "Answer from this document:\n" + tok.decode(doc)},
         {"role": "user", "content": "What does a 409 unknown_session answer mean, and what should a client do?"}],
        tokenize=False, add_generation_prompt=True)
    ps["rag"] = tok(rag, add_special_tokens=False)["input_ids"]
    lengths = {"rag": GROW, "code-1": GROW, "code-0": 48, "chat-0": 40, "prose-0": 24, "chat-1": 160}
    bodies = {k: {"model": str(model), "prompt": ps[k], "max_tokens": n, "temperature": 0, "logprobs": 2,
                  "ignore_eos": True, "return_tokens_as_token_ids": True} for k, n in lengths.items()}
    return bodies, {"chat-1": 6}


def blocks_for(bodies: dict[str, dict[str, Any]]) -> int:
    """The KV cache's blocks: the two long prompts' and SLACK more. vLLM
    admits a request when its prompt fits the free blocks
    (``scheduler_reserve_full_isl``: its whole prompt, not only its first
    chunk, with no watermark by default), then gives it blocks as it grows
    (the verified tokens and K draft slots a step) and preempts the last
    admitted when a running request's next step does not fit. Started
    together, both long requests are admitted (each prompt fits beside the
    other); either of them growing by GROW tokens alone needs more than
    SLACK blocks beyond both prompts, so vLLM must preempt before either
    finishes, whatever the drafts' acceptance. The short requests, sent
    once both long ones stream, wait or are preempted in turn. Each request
    alone fits (the reference runs them one at a time)."""
    n = sum(math.ceil(len(bodies[k]["prompt"]) / BLOCK) for k in LONG) + SLACK
    assert all(math.ceil((len(bodies[k]["prompt"]) + GROW) / BLOCK) > math.ceil(len(bodies[k]["prompt"]) / BLOCK) + SLACK
               for k in LONG)
    assert all(math.ceil((len(b["prompt"]) + b["max_tokens"]) / BLOCK) <= n for b in bodies.values())
    return n


def run_load(url: str, bodies: dict[str, dict[str, Any]], abandon: dict[str, int]) -> dict[str, Stream]:
    """The long requests at once, then — once both stream (vLLM runs them
    both) — the short ones; one thread each; {id: Stream}."""
    got: dict[str, Stream] = {}
    streaming = {k: threading.Event() for k in LONG}

    def one(k: str) -> None:
        def seen(s: Stream) -> None:
            if s.tokens and k in streaming:
                streaming[k].set()

        got[k] = complete(url, bodies[k], stop_after=abandon.get(k), on_chunk=seen)
        if k in streaming:
            streaming[k].set()  # (failed: the check below names it)

    threads = [threading.Thread(target=one, args=(k,), name=f"req-{k}") for k in LONG]
    for t in threads:
        t.start()
    for e in streaming.values():
        e.wait()
    for k in bodies:
        if k not in LONG:
            threads.append(threading.Thread(target=one, args=(k,), name=f"req-{k}"))
            threads[-1].start()
    for t in threads:
        t.join()
    return got


def as_run(streams: dict[str, Stream]) -> dict[str, Any]:
    """streams in bench/vllm_run.py's result form, for realtarget.vllm_near_tie."""
    return {"outputs": {k: s.tokens for k, s in streams.items()},
            "logprobs": {k: [[[t, lp] for t, lp in top] for top in s.top] for k, s in streams.items()}}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(hf_dir(HF_NAME)))


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[VLLM]]:
    procs: list[VLLM] = []
    yield procs
    for p in procs:
        p.stop()


@pytest.mark.served
def test_vllm_serve_with_draftd(drafter: Server, tokenizer: Any, started: list[VLLM], tmp_path: Path) -> None:
    model = hf_dir(HF_NAME)
    bodies, abandon = requests(tokenizer, model)
    assert max(len(b["prompt"]) for b in bodies.values()) >= 2000, "the long prompt is under 2,000 tokens"

    blocks = blocks_for(bodies)

    # Both servers start at once; the reference (the same server without
    # draftd, each request alone) runs first.
    plain = VLLM(*argv(model, None, blocks), tmp_path / "plain.log")
    started.append(plain)
    served = VLLM(*argv(model, drafter.url, blocks), tmp_path / "draftd.log")
    started.append(served)
    plain.wait_ready()
    # (the abandoned request's reference only as far as its client reads)
    ref = {k: complete(plain.url, dict(b, max_tokens=abandon.get(k, b["max_tokens"]))) for k, b in bodies.items()}
    for k, s in ref.items():
        assert s.error is None and len(s.tokens) == abandon.get(k, bodies[k]["max_tokens"]), (k, s.error, len(s.tokens))
    plain.stop()

    served.wait_ready()
    got = run_load(served.url, bodies, abandon)
    log = served.log.read_text()
    for k, s in got.items():
        assert s.error is None, f"{k}: {s.error}\n{log[-4000:]}"
        if k in abandon:
            assert s.finish == "abandoned" and len(s.tokens) >= abandon[k], (k, s.finish, len(s.tokens))
            s.tokens, s.top = s.tokens[: abandon[k]], s.top[: abandon[k]]
        else:
            assert len(s.tokens) == bodies[k]["max_tokens"], (k, len(s.tokens), s.finish)
    # One more request after the abandoned one's abort, so that a step runs
    # in which the runner no longer holds it.
    last = complete(served.url, dict(bodies["prose-0"], max_tokens=8))
    assert last.error is None, last.error

    gap = gap_for(dtype())
    a, b = as_run(ref), as_run(got)
    for k in bodies:
        ok, why = vllm_near_tie(a, b, k, gap)
        assert ok, f"{k}: vllm serve with draftd differs from vllm serve alone: {why}"

    vm = metrics(served.url)
    assert metric(vm, "vllm:num_preemptions_total") > 0, "vLLM preempted nothing: the KV cache was not small enough"
    assert metric(vm, "vllm:spec_decode_num_drafts_total") > 0, "vLLM verified no draft"
    assert metric(vm, "vllm:spec_decode_num_accepted_tokens_total") > 0

    # No draftd call failed (a failure costs drafts and makes sessions send
    # their contexts again, as it must; with the long timeout none should).
    failed = re.findall(r"draftd at \S+ failed.*", served.log.read_text())
    assert not failed, f"draftd calls failed: {failed[:3]}"

    # draftd: every session deleted, each having sent its context once.
    end = time.monotonic() + 60
    while True:
        dm = metrics(drafter.url)
        held = metric(dm, "draftd_sessions")
        if held == 0 or time.monotonic() > end:
            break
        time.sleep(0.5)  # the proposer's DELETEs run in the background after the step
    made = metric(dm, "draftd_sessions_deleted_total")
    whole = metric(dm, "draftd_session_requests_total", form="tokens")
    assert held == 0, f"draftd still holds {held} sessions after the run"
    # One session per request (the six and the last): a preempted request
    # that lost its session would have made another.
    assert made == len(bodies) + 1, f"sessions made and deleted {made}; want one per request ({len(bodies) + 1})"
    assert metric(dm, "draftd_session_requests_total", outcome="unknown_session") == 0
    # Each session sent its context whole once: preempted, unscheduled, its
    # prompt on its way in the background (PRIME_TOKENS) or let through
    # steps without drafts, a request goes on as accepted + bonus. (A
    # failed call, which the proposer logs, would make its sessions send
    # their contexts again, as it must: none may fail here.)
    assert whole == made, f"whole contexts sent {whole} for {made} sessions: a request sent its context again"
    assert metric(dm, "draftd_session_requests_total", form="accepted") > 0
