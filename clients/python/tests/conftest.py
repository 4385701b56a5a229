"""Fixtures: a draftd binary built from this repository with ``go build``,
random test models from ``draftd testmodel``, real ``draftd serve``
processes on free loopback ports, and the real model files.

Environment: DRAFTD_BIN (use this binary instead of building one),
DRAFTD_REAL_MODELS (the real GGUF files, default ~/.cache/draftd/real, as
scripts/realmodels names them), DRAFTD_STRICT (the strictness switch,
draftd._testing.strict: under it every skip is a failure).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from draftd._testing import need
from draftd._testing.pytest_strict import *  # noqa: F401,F403  (the switch's hooks)

REPO = Path(__file__).resolve().parents[3]

DRAFTER_FILE = "qwen2.5-coder-0.5b-instruct.gguf"
TARGET_FILE = "qwen2.5-coder-1.5b-instruct.gguf"


def real_models_dir() -> Path:
    return Path(os.environ.get("DRAFTD_REAL_MODELS") or "~/.cache/draftd/real").expanduser()


def real_model(name: str) -> Path:
    """The path of a real model file, or a skip (a failure under the
    strictness switch)."""
    p = real_models_dir() / name
    need(p.is_file(), f"real model {p} is missing: run scripts/realmodels (or set DRAFTD_REAL_MODELS)")
    return p


@pytest.fixture(scope="session")
def draftd_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if b := os.environ.get("DRAFTD_BIN"):
        return Path(b)
    go = shutil.which("go") or "/usr/local/go/bin/go"
    out = tmp_path_factory.mktemp("bin") / "draftd"
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run([go, "build", "-o", str(out), "./cmd/draftd"], cwd=REPO, env=env, check=True)
    return out


@pytest.fixture(scope="session")
def target() -> tuple[object, object]:
    """(model, tokenizer) of the real target, Qwen2.5-Coder-1.5B-Instruct in
    float32 (realtarget.load_target), loaded once per pytest session: the
    load (transformers dequantizes the GGUF in Python) is the largest fixed
    cost of the end-to-end tests. Skips (fails under the strictness switch) without the
    file; torch and transformers are imported only here."""
    from realtarget import load_target

    return load_target(real_model(TARGET_FILE))


@pytest.fixture(scope="session")
def test_model(draftd_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen2 GGUF (``draftd testmodel --shape tiny-qwen2``)."""
    p = tmp_path_factory.mktemp("models") / "tiny-qwen2.gguf"
    subprocess.run([str(draftd_bin), "testmodel", "--shape", "tiny-qwen2", "--gguf", str(p)], check=True,
                   stdout=subprocess.DEVNULL)
    return p


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[str]
    log: list[str]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


_LISTENING = re.compile(r"msg=listening addr=(\S+)")


def start_server(draftd_bin: Path, model: Path, *flags: str, addr: str = "127.0.0.1:0") -> Server:
    """Starts ``draftd serve`` on ``addr`` (default a free loopback port) and
    returns once it listens (not once it is healthy: see Client.wait_ready).
    It reads the address from the info-level "listening" log line: flags
    must not raise the log level above info."""
    if any(f.startswith("--log-level") for f in flags):
        raise ValueError("start_server reads the info-level 'listening' line: do not pass --log-level")
    proc = subprocess.Popen(
        [str(draftd_bin), "serve", "--model", str(model), "--addr", addr, *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    log: list[str] = []
    for line in proc.stderr:
        log.append(line)
        if m := _LISTENING.search(line):
            srv = Server(f"http://{m.group(1)}", proc, log)
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: log.extend(proc.stderr or ()), daemon=True).start()
            return srv
    proc.wait()
    raise RuntimeError(f"draftd serve exited {proc.returncode} before listening:\n{''.join(log)}")


@pytest.fixture
def serve(draftd_bin: Path) -> Iterator[object]:
    """serve(model, *flags, addr=...) starts a server that is stopped after
    the test."""
    started: list[Server] = []

    def _serve(model: Path, *flags: str, addr: str = "127.0.0.1:0") -> Server:
        s = start_server(draftd_bin, model, *flags, addr=addr)
        started.append(s)
        return s

    yield _serve
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def real_drafter(draftd_bin: Path) -> Iterator[Server]:
    """One ``draftd serve`` on the real drafter (Qwen2.5-Coder-0.5B GGUF),
    one thread, for every end-to-end test of the session (they name the
    strategy in each request). Skips (fails under the strictness switch) without the file;
    the server must exit 0."""
    import draftd

    s = start_server(draftd_bin, real_model(DRAFTER_FILE), "--threads", "1", "--kv-cache-bytes", str(1 << 30))
    try:
        with draftd.Client(s.url) as c:
            c.wait_ready(300)
        yield s
    finally:
        rc = s.stop()
    assert rc == 0, "".join(s.log)
