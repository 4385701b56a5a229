"""``vllm serve`` (its engine in another process, the OpenAI API) with draftd
as its speculative proposer, run with the command docs/serving.md shows (read
from it here: ``python -m vllm.entrypoints.openai.api_server``, the same
server, as the CPU build's ``vllm`` command does not start), on the real 0.5B as its own target (small and fast; what is
checked is the path) and the real 0.5B GGUF in ``draftd serve``:

- five streaming completions at once, of prompts from ~20 to ~2,000 tokens (a
  RAG-style chat prompt over docs/protocol.md) and of different lengths, one
  of them abandoned by its client mid-stream (vLLM aborts it);
- a KV cache too small for them all (``--num-gpu-blocks-override``; the CPU
  build's ``VLLM_CPU_KVCACHE_SPACE`` is whole GiB, far too large for a
  0.5B), so vLLM preempts: its ``vllm:num_preemptions`` counter must be > 0;
- each output equals the same request to the same ``vllm serve`` without
  draftd, sent alone (greedy; realtarget's near-tie rule on the top-2
  log-probabilities of both runs) — the abandoned one over what arrived;
- afterwards draftd holds no session (its /metrics), every session sent its
  whole context once (``draftd_session_requests_total`` of form ``tokens``
  equals the sessions made and deleted; none answered ``unknown_session``):
  no whole-context resend for the preempted requests (a session deleted
  and made again would show as one more session than requests).

vLLM's venv (scripts/vllmenv) and the exported 0.5B (scripts/hfexport) are
needed: without them the test skips, or fails when CI=true.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import DRAFTER_FILE, REPO, Server, real_model
from draftd._testing.openai_stream import Stream, complete, metric, metrics, run_all
from draftd._testing.neartie import gap_for
from draftd._testing.realtarget import vllm_near_tie
from test_vllm_e2e import HF_NAME, dtype, hf_dir, vllm_python

pytestmark = pytest.mark.realmodel

SERVING_MD = REPO / "docs/serving.md"
DOC_MODEL = "~/.cache/draftd/hf/qwen2.5-coder-1.5b-instruct"
DOC_PYTHON = "~/.cache/draftd/vllm-venv/bin/python"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # `vllm serve`; vllm-cpu's `vllm` command does not start
DOC_URL = "http://127.0.0.1:8080"
MAX_MODEL_LEN = 2560
BLOCK = 32  # tokens (the CPU build's default is 128: requests that grow by a few dozen tokens seldom need a block)
BLOCKS = 84  # room for the five prompts (~81 blocks: the long one 65), not for them as they grow: vLLM preempts


def doc_command() -> tuple[dict[str, str], list[str]]:
    """(environment, argv) of the ``vllm serve`` command in docs/serving.md's
    sh block that starts it with draftd."""
    for block in re.findall(r"```sh\n(.*?)```", SERVING_MD.read_text(), re.S):
        if SERVER_MODULE in block and "draftd.vllm.DraftdProposer" in block:
            words = shlex.split(block.replace("\\\n", " "), comments=True)
            env: dict[str, str] = {}
            while words and re.match(r"[A-Z_][A-Z0-9_]*=", words[0]):
                k, _, v = words.pop(0).partition("=")
                env[k] = v
            assert words[:3] == [DOC_PYTHON, "-m", SERVER_MODULE], words
            return env, words
    raise AssertionError(f"{SERVING_MD}: no sh block with `{SERVER_MODULE} … draftd.vllm.DraftdProposer`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_argv(model: Path, port: int, draftd_url: str | None) -> tuple[dict[str, str], list[str]]:
    """The documented command for this test: its model, port and draftd URL;
    without draftd_url the same command without the speculative flags."""
    env, words = doc_command()
    argv: list[str] = []
    it = iter(words)
    for w in it:
        if w == DOC_PYTHON:
            argv.append(str(vllm_python()))
        elif w == DOC_MODEL:
            argv.append(str(model))
        elif w == "--port":
            argv += [w, str(port)]
            next(it)
        elif w == "--dtype":
            argv += [w, dtype()]  # float32 where the CPU has no bf16 instructions
            next(it)
        elif w == "--kv-cache-memory-bytes":
            argv += [w, "96M"]  # ≥ BLOCKS blocks of the 0.5B (3 MiB each in float32); free on a busy machine
            next(it)
        elif w in ("--speculative-config", "--additional-config"):
            v = json.loads(next(it))
            if draftd_url is None:
                continue
            if w == "--additional-config":
                assert v["draftd"]["url"] == DOC_URL, v
                v["draftd"]["url"] = draftd_url
            argv += [w, json.dumps(v)]
        else:
            argv.append(w)
    assert str(model) in argv, f"the documented command does not serve {DOC_MODEL}: {words}"
    argv += ["--max-model-len", str(MAX_MODEL_LEN), "--block-size", str(BLOCK), "--num-gpu-blocks-override", str(BLOCKS),
             "--seed", "0"]
    return env, argv


class VLLM:
    def __init__(self, env: dict[str, str], argv: list[str], log: Path) -> None:
        port = argv[argv.index("--port") + 1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        full = dict(os.environ, **env, VLLM_LOGGING_LEVEL="INFO",
                    PYTHONPATH=str(REPO / "clients/python/src"))  # this checkout's draftd in the engine process
        full.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the engine in its own process, as served
        self.f = log.open("w")
        self.proc = subprocess.Popen(argv, env=full, stdout=self.f, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, limit: float = 900) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"vllm serve exited {self.proc.returncode}:\n{self.log.read_text()[-6000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)  # polling start-up, not ordering
        raise AssertionError(f"vllm serve not ready after {limit} s:\n{self.log.read_text()[-6000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.f.close()


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
    """The five requests (token-id prompts, greedy, top-2 log-probabilities,
    a fixed length) and which is abandoned after how many tokens."""
    from draftd._testing.realtarget import prompts

    ps = dict(prompts(tok, 5))  # code-0 (~380 tokens), chat-0, prose-0, code-1 (~800: not sent), chat-1
    doc = tok((REPO / "docs/protocol.md").read_text(), add_special_tokens=False)["input_ids"][:2000]
    rag = tok.apply_chat_template(
        [{"role": "system", "content": "Answer from this document:\n" + tok.decode(doc)},
         {"role": "user", "content": "What does a 409 unknown_session answer mean, and what should a client do?"}],
        tokenize=False, add_generation_prompt=True)
    ps["rag"] = tok(rag, add_special_tokens=False)["input_ids"]
    lengths = {"code-0": 48, "chat-0": 64, "prose-0": 32, "chat-1": 160, "rag": 24}
    bodies = {k: {"model": str(model), "prompt": ps[k], "max_tokens": n, "temperature": 0, "logprobs": 2,
                  "ignore_eos": True, "return_tokens_as_token_ids": True} for k, n in lengths.items()}
    return bodies, {"chat-1": 6}


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

    # The reference: the same server without draftd, each request alone.
    plain = VLLM(*serve_argv(model, free_port(), None), tmp_path / "plain.log")
    started.append(plain)
    plain.wait_ready()
    # (the abandoned request's reference only as far as its client reads)
    ref = {k: complete(plain.url, dict(b, max_tokens=abandon.get(k, b["max_tokens"]))) for k, b in bodies.items()}
    for k, s in ref.items():
        assert s.error is None and len(s.tokens) == abandon.get(k, bodies[k]["max_tokens"]), (k, s.error, len(s.tokens))
    plain.stop()

    served = VLLM(*serve_argv(model, free_port(), drafter.url), tmp_path / "draftd.log")
    started.append(served)
    served.wait_ready()
    got = run_all(served.url, bodies, stop_after=abandon)
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
    # One session per request (the five and the last): a preempted request
    # that lost its session would have made another.
    assert made == len(bodies) + 1, f"sessions made and deleted {made}; want one per request ({len(bodies) + 1})"
    assert metric(dm, "draftd_session_requests_total", outcome="unknown_session") == 0
    # Each session sent its context whole once, except that a prompt longer
    # than PRIME_TOKENS goes in the background and, if its request moved on
    # more than one token meanwhile, once more (through draftd's prefix cache).
    from draftd.vllm import PRIME_TOKENS

    # A failed call (draftd too slow for the proposer's timeout on a busy
    # machine: the proposer logs it) makes its sessions send their contexts
    # again, as it must; the bound holds for a run without one.
    primed = sum(len(b["prompt"]) > PRIME_TOKENS for b in bodies.values())
    failed = len(re.findall(r"draftd at \S+ failed", served.log.read_text()))
    assert made <= whole, (made, whole)
    if failed == 0:
        assert whole <= made + primed, f"whole contexts sent {whole} for {made} sessions ({primed} primed)"
    assert metric(dm, "draftd_session_requests_total", form="accepted") > 0
