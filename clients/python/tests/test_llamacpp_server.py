"""``python -m draftd.llamacpp_server`` (llama-cpp-python's OpenAI-compatible
server with draftd as its draft model), run as docs/serving.md shows it (the
command read from there: draftd._testing.llamacpp_serve), on the real target
(Qwen2.5-Coder-1.5B-Instruct Q4_K_M) with the real 0.5B in ``draftd serve``:

- the reference: each request, one at a time, to the same server without
  ``--draftd``;
- completions and chat completions sent at once (the server queues them),
  streamed, greedy, among them a prompt of ~2,000 tokens: every output
  equals the reference up to a near-tie (at the first differing token, both
  runs' top-2 log-probabilities within the f32 gap: batched verification
  rounds differently from one-token decoding), and draftd drafted (its
  /metrics);
- then the same requests at once again, and draftd stopped while the first
  answer streams: each still answers, the same (a draftd that is down costs
  drafts, never a request), at least one of them started after draftd was
  down — and, since every generation evaluates its whole prompt, the
  outputs do not depend on the requests before them.

Needs llama_cpp with its server extra in the venv (scripts/llamacpp-python;
under the strictness switch its absence fails) and the real models."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Absent, the module skips: a failure under the strictness switch (DRAFTD_STRICT).
pytest.importorskip("llama_cpp")
pytest.importorskip("llama_cpp.server.app")

from conftest import DRAFTER_FILE, REPO, TARGET_FILE, Server, real_model  # noqa: E402

from draftd._testing.llamacpp_serve import LlamaServer, Requests, near_tie, send  # noqa: E402
from draftd._testing.openai_stream import Stream, metric, metrics  # noqa: E402

pytestmark = pytest.mark.realmodel

#: The context the server is started with: the ~2,000-token prompt and its tokens fit.
N_CTX = ("--n_ctx", "4096")


@pytest.fixture
def servers() -> Iterator[list[LlamaServer]]:
    started: list[LlamaServer] = []
    yield started
    for s in started:
        s.stop()


def requests() -> Requests:
    """{id: (path, body)}: completions of text prompts (code, prose, a
    ~2,000-token RAG-style prompt over
    testdata/prompts/served-rag-document.txt, a fixed excerpt of docs/protocol.md) and chat
    completions; greedy, top-2 log-probabilities, fixed lengths."""
    code = (REPO / "testdata/reference/quantize_ref.py").read_text().splitlines()
    doc = (REPO / "testdata/prompts/served-rag-document.txt").read_text()
    comp = {
        "code": "\n".join(code[27:41]) + "\n",
        "prose": "The printing press, invented by Johannes Gutenberg around 1440, changed Europe because",
        "rag": "<|im_start|>system\nAnswer from this document:\n" + doc + "<|im_end|>\n<|im_start|>user\n"
               "What does a 409 unknown_session answer mean, and what should a client do?<|im_end|>\n"
               "<|im_start|>assistant\n",
    }
    chats = {
        "chat-fib": "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
        "chat-mutex": "Explain in two sentences what a mutex is and when to use one.",
    }
    out: Requests = {}
    for k, p in comp.items():
        out[k] = ("/v1/completions", {"prompt": p, "max_tokens": 24, "temperature": 0, "logprobs": 2, "seed": 0})
    for k, q in chats.items():
        out[k] = ("/v1/chat/completions", {"messages": [{"role": "user", "content": q}], "max_tokens": 24,
                                           "temperature": 0, "logprobs": True, "top_logprobs": 2, "seed": 0})
    return out


def check_same(ref: dict[str, Stream], got: dict[str, Stream], what: str) -> None:
    for k, s in got.items():
        assert s.error is None, f"{k} failed {what}: {s.error}"
        ok, why = near_tie(ref[k], s)
        assert ok, f"{k}: {what} differs from the server alone: {why}"


@pytest.mark.served
def test_llamacpp_server_with_draftd(serve: Any, servers: list[LlamaServer], tmp_path: Path) -> None:
    import draftd

    target = real_model(TARGET_FILE)
    drafter: Server = serve(real_model(DRAFTER_FILE), "--threads", "1")
    with draftd.Client(drafter.url) as c:
        c.wait_ready(300)
    reqs = requests()

    # The reference: the same server without --draftd, one request at a time.
    plain = LlamaServer(target, None, tmp_path / "plain.log", N_CTX)
    servers.append(plain)
    plain.wait_ready()
    ref = send(plain.url, reqs)
    for k, s in ref.items():
        assert s.error is None and s.text, (k, s.error)
        assert len(s.tokens) == reqs[k][1]["max_tokens"] and all(s.top), \
            f"{k}: {len(s.tokens)} tokens with log-probabilities, finish {s.finish}"
    assert plain.stop() == 0

    # With draftd: every request sent at once (the server queues them).
    assisted = LlamaServer(target, drafter.url, tmp_path / "draftd.log", N_CTX)
    servers.append(assisted)
    assisted.wait_ready()
    check_same(ref, send(assisted.url, reqs, concurrency=len(reqs)), "with draftd")
    dm = metrics(drafter.url)
    assert metric(dm, "draftd_session_requests_total", form="accepted") > 0, "draftd drafted nothing"

    # Again, and draftd stopped once the first answer to stream has 4
    # tokens: the request in flight and those queued behind it lose their
    # drafts, never their answer.
    started = threading.Event()
    down: list[tuple[int, float]] = []

    def stop_draftd() -> None:
        started.wait()
        rc = drafter.stop()
        down.append((rc, time.perf_counter()))

    stopper = threading.Thread(target=stop_draftd)
    stopper.start()
    try:
        again = send(assisted.url, reqs, concurrency=len(reqs),
                     on_chunk=lambda s: len(s.tokens) >= 4 and started.set())
    finally:
        started.set()
        stopper.join()
    assert down and down[0][0] == 0, f"draftd serve exited {down}:\n{''.join(drafter.log)[-4000:]}"
    check_same(ref, again, "with draftd stopped mid-run")
    firsts = sorted(s.times[0] for s in again.values() if s.times)
    assert firsts and firsts[-1] > down[0][1], "every request had started before draftd was down: none ran without it"
    assert assisted.stop() == 0
