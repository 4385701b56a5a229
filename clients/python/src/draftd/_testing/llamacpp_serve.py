"""``python -m draftd.llamacpp_server`` as docs/serving.md starts it, for
tests/test_llamacpp_server.py and bench/llamacpp_serve_load.py: the command
read from that page (its ``sh`` block), run with the given target file, a
free port and with or without ``--draftd``; requests sent one at a time or
with a number in flight; two streamed outputs compared with the near-tie
rule on the top-2 log-probabilities the server returns.

Not the server itself (draftd.llamacpp_server) and not a client of it
(draftd._testing.openai_stream). httpx is imported where it is used.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from draftd._testing import neartie
from draftd._testing.neartie import gap_for
from draftd._testing.openai_stream import Stream, complete
from draftd._testing.serve import REPO

SERVING_MD = REPO / "docs/serving.md"
#: llama.cpp's gap (its batched quantized kernels, draftd._testing.neartie);
#: the rule runs on log-probabilities (their differences are the logits').
NEAR_TIE_GAP = gap_for("llama.cpp")
#: The target path and draftd URL as the documented command writes them.
DOC_TARGET = "~/.cache/draftd/real/qwen2.5-coder-1.5b-instruct.gguf"
DOC_URL = "http://127.0.0.1:8080"

#: {id: (path, body)}: a request to /v1/completions or /v1/chat/completions.
Requests = dict[str, tuple[str, dict[str, Any]]]


def doc_command() -> list[str]:
    """argv of the ``python -m draftd.llamacpp_server`` command in
    docs/serving.md (from the python before ``-m``)."""
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
    """The documented command with ``target`` for its model, this Python,
    a free port on 127.0.0.1, ``--draftd draftd_url`` (None: the flag is
    left out, the same server alone) and ``extra`` flags after it; output
    to ``log``. draftd is imported from this checkout (PYTHONPATH)."""

    def __init__(self, target: Path, draftd_url: str | None, log: Path, extra: tuple[str, ...] = ()) -> None:
        words = doc_command()
        argv = [sys.executable]
        it = iter(words[1:])
        self.port = free_port()
        for w in it:
            if w == DOC_TARGET:
                argv.append(str(target))
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
        assert str(target) in argv, f"the documented command does not serve {DOC_TARGET}: {words}"
        argv += ["--host", "127.0.0.1", *extra]
        self.argv = argv
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.f = log.open("w")
        env = dict(os.environ, PYTHONPATH=str(REPO / "clients/python/src"))
        self.proc = subprocess.Popen(argv, env=env, stdout=self.f, stderr=subprocess.STDOUT)

    def wait_ready(self, limit: float = 600) -> None:
        import httpx

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

    def stop(self) -> int:
        """SIGTERM, then the exit code (a kill after 60 s); 0 for a graceful
        shutdown: uvicorn re-raises the SIGTERM it handled once its shutdown
        is complete (exit -15 after "Finished server process" in the log)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.f.closed:
            self.f.close()
        rc = self.proc.returncode
        if rc == -signal.SIGTERM and "Finished server process" in self.log.read_text(errors="replace"):
            return 0
        return rc


def send(url: str, reqs: Requests, concurrency: int = 1, on_chunk: Any = None) -> dict[str, Stream]:
    """Every request of reqs, streamed, at most ``concurrency`` in flight
    (1: one after another, in order); {id: Stream}. ``on_chunk(stream)``
    after every chunk of every stream (openai_stream.complete's)."""
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency} must be ≥ 1")
    if concurrency == 1:
        return {k: complete(url, b, path=path, on_chunk=on_chunk) for k, (path, b) in reqs.items()}
    got: dict[str, Stream] = {}
    todo = list(reqs)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                k = todo.pop(0)
            path, b = reqs[k]
            s = complete(url, b, path=path, on_chunk=on_chunk)
            with lock:
                got[k] = s

    ts = [threading.Thread(target=worker, name=f"client-{i}") for i in range(min(concurrency, len(reqs)))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {k: got[k] for k in reqs}


def near_tie(a: Stream, b: Stream, gap: float = NEAR_TIE_GAP) -> tuple[bool, str]:
    """a (the reference) and b equal token for token, or first different
    where both runs' own top-2 log-probabilities put the two tokens within
    gap (draftd._testing.neartie); where the server named no tokens, the
    texts equal."""
    if not a.tokens or not b.tokens:
        return a.text == b.text and a.text != "", f"texts {a.text!r} and {b.text!r}"

    def scores(s: Stream) -> neartie.Score:
        return lambda i, t: dict(s.top[i]).get(t)

    return neartie.near_tie(a.tokens, b.tokens, scores(a), scores(b), gap)
