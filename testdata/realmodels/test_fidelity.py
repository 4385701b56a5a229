"""The fast real-weights fidelity check CI runs: draftd's greedy
continuations on the smallest real GGUF (SmolLM2-135M-Instruct, Q4_1) against
transformers' float32 run of the same file, margin-aware (see fidelity.py).
scripts/fidelity regenerates the full three-way table.

Without the model file the test skips, except under CI=true, where
scripts/test fetches it first and a missing file is a failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import fidelity

MODEL = "smollm2-135m"
PROMPTS = 8
N = 32
THRESHOLD = 0.5


def real_dir() -> Path:
    return Path(os.path.expanduser(os.environ.get("DRAFTD_REAL_MODELS") or "~/.cache/draftd/real"))


def test_draftd_matches_float_reference_on_real_weights() -> None:
    path = real_dir() / fidelity.MODELS[MODEL]
    if not path.is_file():
        msg = f"{path} missing: run scripts/realmodels --only {MODEL}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    res = fidelity.run([MODEL], PROMPTS, N, THRESHOLD, ["draftd"], 2, real_dir())
    m = res["models"][MODEL]
    pair = m["pairs"][0]
    assert pair["pair"] == "draftd vs transformers"
    bad = [d for d in m["divergences"]["draftd vs transformers"] if not d["near_tie"]]
    print(fidelity.markdown(res))
    assert not bad, f"draftd left the float reference's greedy path away from a near-tie (gap ≥ {THRESHOLD}): {bad}"
    assert pair["agree"] == pair["prompts"] == PROMPTS
