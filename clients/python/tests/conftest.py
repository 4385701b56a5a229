"""Fixtures: a draftd binary built from this repository, random test
models from ``draftd testmodel``, real ``draftd serve`` processes on free
loopback ports, and the real model files. Building and starting draftd is
draftd._testing.serve's (the benches use it too).

Environment: DRAFTD_BIN (use this binary instead of building one),
DRAFTD_REAL_MODELS (the real GGUF files, default ~/.cache/draftd/real, as
scripts/realmodels names them), DRAFTD_STRICT (the strictness switch,
draftd._testing.strict: under it every skip is a failure).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from draftd._testing.pytest_strict import *  # noqa: F401,F403  (the switch's hooks)
from draftd._testing.serve import (DRAFTER_FILE, REPO, TARGET_FILE, Server, build_draftd, real_model,
                                   real_models_dir, start_server)

# Test files import these from here too; they are draftd._testing.serve's.
__all__ = ["DRAFTER_FILE", "REPO", "TARGET_FILE", "Server", "real_model", "real_models_dir", "start_server"]


@pytest.fixture(scope="session")
def draftd_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_draftd(tmp_path_factory.mktemp("bin") / "draftd")


@pytest.fixture(scope="session")
def target() -> tuple[object, object]:
    """(model, tokenizer) of the real target, Qwen2.5-Coder-1.5B-Instruct in
    float32 (realtarget.load_target), loaded once per pytest session: the
    load (transformers dequantizes the GGUF in Python) is the largest fixed
    cost of the end-to-end tests. Skips (fails under the strictness switch)
    without the file; torch and transformers are imported only here."""
    from draftd._testing.realtarget import load_target

    return load_target(real_model(TARGET_FILE))


@pytest.fixture(scope="session")
def test_model(draftd_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen2 GGUF (``draftd testmodel --shape tiny-qwen2``)."""
    p = tmp_path_factory.mktemp("models") / "tiny-qwen2.gguf"
    subprocess.run([str(draftd_bin), "testmodel", "--shape", "tiny-qwen2", "--gguf", str(p)], check=True,
                   stdout=subprocess.DEVNULL)
    return p


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
    strategy in each request). Skips (fails under the strictness switch)
    without the file; the server must exit 0."""
    s = start_server(draftd_bin, real_model(DRAFTER_FILE), "--threads", "1", "--kv-cache-bytes", str(1 << 30))
    try:
        s.wait_healthy(300)
        yield s
    finally:
        rc = s.stop()
    assert rc == 0, "".join(s.log)
