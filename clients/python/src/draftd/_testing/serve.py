"""Building draftd from this checkout and running ``draftd serve``: the one
way the Python tests (tests/conftest.py), the benches (bench/*.py) and
testdata/realmodels do it.

Only in a checkout (the editable install scripts/pyenv makes): REPO is the
repository this file lies in. Environment: DRAFTD_BIN (use this binary
instead of building one), DRAFTD_REAL_MODELS (the real GGUF files, default
~/.cache/draftd/real, as scripts/realmodels names them).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

#: The repository this package is checked out in.
REPO = Path(__file__).resolve().parents[5]

#: The real pair's files in real_models_dir(): the drafter
#: (Qwen2.5-Coder-0.5B-Instruct: mostly Q5_0 with a Q8_0 head, quantized by
#: llama.cpp from Qwen's AWQ checkpoint) and the target
#: (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M).
DRAFTER_FILE = "qwen2.5-coder-0.5b-instruct.gguf"
TARGET_FILE = "qwen2.5-coder-1.5b-instruct.gguf"


def real_models_dir() -> Path:
    return Path(os.environ.get("DRAFTD_REAL_MODELS") or "~/.cache/draftd/real").expanduser()


def real_model(name: str) -> Path:
    """The path of a real model file in real_models_dir(), or a skip of the
    calling test (a failure under the strictness switch)."""
    from draftd._testing import need

    p = real_models_dir() / name
    need(p.is_file(), f"real model {p} is missing: run scripts/realmodels (or set DRAFTD_REAL_MODELS)")
    return p


def go() -> str:
    return shutil.which("go") or "/usr/local/go/bin/go"


def build_draftd(out: Path) -> Path:
    """The draftd binary: $DRAFTD_BIN if set, else ``CGO_ENABLED=0 go build``
    of REPO's ./cmd/draftd to out (a file path)."""
    if b := os.environ.get("DRAFTD_BIN"):
        return Path(b)
    if not (REPO / "go.mod").is_file():
        raise RuntimeError(f"{REPO} is not a draftd checkout: set DRAFTD_BIN to a draftd binary")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([go(), "build", "-o", str(out), "./cmd/draftd"], cwd=REPO,
                   env=dict(os.environ, CGO_ENABLED="0"), check=True)
    return out


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[str]
    log: list[str]

    def stop(self) -> int:
        """SIGTERM, then the exit code (a kill after 60 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def wait_healthy(self, timeout: float = 300) -> None:
        """Returns once GET /health says ok (the model is loaded)."""
        import draftd

        with draftd.Client(self.url) as c:
            c.wait_ready(timeout)


_LISTENING = re.compile(r"msg=listening addr=(\S+)")


def start_server(draftd_bin: Path, model: Path, *flags: str, addr: str = "127.0.0.1:0",
                 cpus: str | None = None) -> Server:
    """Starts ``draftd serve`` on addr (default a free loopback port),
    pinned to cpus (taskset -c) if given, and returns once it listens (not
    once it is healthy: Server.wait_healthy). It reads the address from the
    info-level "listening" log line: flags must not raise the log level."""
    if any(f.startswith("--log-level") for f in flags):
        raise ValueError("start_server reads the info-level 'listening' line: do not pass --log-level")
    cmd = [str(draftd_bin), "serve", "--model", str(model), "--addr", addr, *flags]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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


