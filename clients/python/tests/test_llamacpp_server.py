"""``python -m draftd.llamacpp_server`` (llama-cpp-python's OpenAI-compatible
server with draftd as its draft model), run as docs/serving.md shows it (the
command read from there), on the real target (Qwen2.5-Coder-1.5B-Instruct
Q4_K_M) with the real 0.5B in ``draftd serve``:

- completions and chat completions sent at once (the server queues them),
  streamed, greedy, among them a prompt of ~2,000 tokens: every output
  equals the same request to the same server without ``--draftd``, up to a
  near-tie (at the first differing token, both runs' top-2 log-probabilities
  within NEAR_TIE_GAP: batched verification rounds differently from one-token
  decoding), and draftd drafted (its /metrics);
- then draftd is stopped and the same requests sent again: each still
  answers, with the same outputs (a draftd that is down costs drafts, never a
  request) — and, since every generation evaluates its whole prompt, the
  same outputs although other requests ran before them.

Also ``draftd.llamacpp.generate``: its first token's logits are the same,
bit for bit, whatever generation ran before (llama-cpp-python's prompt-prefix
reuse is off).

Needs llama_cpp with its server extra in the venv (scripts/llamacpp-python;
under CI=true its absence fails) and the real models."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

# Absent, the module skips: a failure under the strictness switch (DRAFTD_STRICT).
pytest.importorskip("llama_cpp")
pytest.importorskip("llama_cpp.server.app")

from conftest import DRAFTER_FILE, REPO, TARGET_FILE, Server, real_model  # noqa: E402
from openai_stream import Stream, complete, metric, metrics  # noqa: E402

from draftd._testing import neartie  # noqa: E402
from draftd._testing.neartie import gap_for  # noqa: E402

pytestmark = pytest.mark.realmodel

SERVING_MD = REPO / "docs/serving.md"
NEAR_TIE_GAP = gap_for("float32")  # llama.cpp's logits are f32; on log-probabilities (their differences are the logits')
DOC_TARGET = "~/.cache/draftd/real/qwen2.5-coder-1.5b-instruct.gguf"
DOC_URL = "http://127.0.0.1:8080"


def doc_command() -> list[str]:
    """argv of the ``python -m draftd.llamacpp_server`` command in
    docs/serving.md."""
    for block in re.findall(r"```sh\n(.*?)```", SERVING_MD.read_text(), re.S):
        if "-m draftd.llamacpp_server" in block:
            words = shlex.split(block.replace("\\\n", " "), comments=True)
            i = words.index("-m")
            return words[i - 1:]
    raise AssertionError(f"{SERVING_MD}: no sh block with `python -m draftd.llamacpp_server`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    def __init__(self, draftd_url: str | None, log: Path) -> None:
        words = doc_command()
        argv = [sys.executable]
        it = iter(words[1:])
        self.port = free_port()
        for w in it:
            if w == DOC_TARGET:
                argv.append(str(real_model(TARGET_FILE)))
            elif w == "--port":
                argv += [w, str(self.port)]
                next(it)
            elif w == "--draftd":
                v = next(it)
                assert v == DOC_URL, words
                if draftd_url is not None:
                    argv += [w, draftd_url]
            else:
                argv.append(w)
        assert str(real_model(TARGET_FILE)) in argv, f"the documented command does not serve {DOC_TARGET}: {words}"
        argv += ["--n_ctx", "4096", "--host", "127.0.0.1"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.f = log.open("w")
        env = dict(os.environ, PYTHONPATH=str(REPO / "clients/python/src"))
        self.proc = subprocess.Popen(argv, env=env, stdout=self.f, stderr=subprocess.STDOUT)

    def wait_ready(self, limit: float = 600) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited {self.proc.returncode}:\n{self.log.read_text()[-6000:]}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)  # polling start-up, not ordering
        raise AssertionError(f"not ready after {limit} s:\n{self.log.read_text()[-6000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.f.close()


@pytest.fixture
def servers() -> Iterator[list[LlamaServer]]:
    started: list[LlamaServer] = []
    yield started
    for s in started:
        s.stop()


def requests() -> dict[str, tuple[str, dict[str, Any]]]:
    """{id: (path, body)}: completions of text prompts (code, prose, a
    ~2,000-token RAG-style prompt over docs/protocol.md) and chat
    completions; greedy, top-2 log-probabilities, fixed lengths."""
    code = (REPO / "testdata/reference/quantize_ref.py").read_text().splitlines()
    doc = (REPO / "docs/protocol.md").read_text()[:7600]
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
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for k, p in comp.items():
        out[k] = ("/v1/completions", {"prompt": p, "max_tokens": 24, "temperature": 0, "logprobs": 2, "seed": 0})
    for k, q in chats.items():
        out[k] = ("/v1/chat/completions", {"messages": [{"role": "user", "content": q}], "max_tokens": 24,
                                           "temperature": 0, "logprobs": True, "top_logprobs": 2, "seed": 0})
    return out


def send_all(url: str, reqs: dict[str, tuple[str, dict[str, Any]]], at_once: bool) -> dict[str, Stream]:
    if not at_once:
        return {k: complete(url, b, path=path) for k, (path, b) in reqs.items()}
    import threading

    got: dict[str, Stream] = {}

    def one(k: str) -> None:
        path, b = reqs[k]
        got[k] = complete(url, b, path=path)

    ts = [threading.Thread(target=one, args=(k,)) for k in reqs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return got


def near_tie(a: Stream, b: Stream) -> tuple[bool, str]:
    """a and b (token strings) equal, or first different at a near-tie;
    where the server named no tokens, their texts equal."""
    if not a.tokens or not b.tokens:
        return a.text == b.text and a.text != "", f"texts {a.text!r} and {b.text!r}"

    def scores(s: Stream) -> neartie.Score:
        return lambda i, t: dict(s.top[i]).get(t)

    return neartie.near_tie(a.tokens, b.tokens, scores(a), scores(b), NEAR_TIE_GAP)


@pytest.mark.served
def test_llamacpp_server_with_draftd(serve: Any, servers: list[LlamaServer], tmp_path: Path) -> None:
    import draftd

    drafter: Server = serve(real_model(DRAFTER_FILE), "--threads", "1")
    with draftd.Client(drafter.url) as c:
        c.wait_ready(300)
    reqs = requests()

    plain = LlamaServer(None, tmp_path / "plain.log")
    servers.append(plain)
    plain.wait_ready()
    ref = send_all(plain.url, reqs, at_once=False)
    for k, s in ref.items():
        assert s.error is None and s.text, (k, s.error)
        assert not s.tokens or len(s.tokens) == reqs[k][1]["max_tokens"], (k, len(s.tokens), s.finish)
    plain.stop()

    assisted = LlamaServer(drafter.url, tmp_path / "draftd.log")
    servers.append(assisted)
    assisted.wait_ready()
    got = send_all(assisted.url, reqs, at_once=True)
    for k in reqs:
        assert got[k].error is None, (k, got[k].error)
        ok, why = near_tie(ref[k], got[k])
        assert ok, f"{k}: with draftd differs from the server alone: {why}"
    dm = metrics(drafter.url)
    assert metric(dm, "draftd_session_requests_total", form="accepted") > 0, "draftd drafted nothing"

    assert drafter.stop() == 0
    again = send_all(assisted.url, reqs, at_once=True)
    for k in reqs:
        assert again[k].error is None, f"{k} failed with draftd down: {again[k].error}"
        ok, why = near_tie(ref[k], again[k])
        assert ok, f"{k}: with draftd down differs from the server alone: {why}"
