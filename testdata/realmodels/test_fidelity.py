"""The fast real-weights fidelity check CI runs: draftd's greedy
continuations on the smallest real GGUF (SmolLM2-135M-Instruct, Q4_1) against
transformers' float32 run of the same file, margin-aware (see fidelity.py).
scripts/fidelity regenerates the full three-way table.

Without the model file the test skips, except under the strictness switch
(DRAFTD_STRICT; scripts/test fetches the file first), where it fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from draftd._testing import need

import fidelity

MODEL = "smollm2-135m"
PROMPTS = 8
N = 32
# Near-tie threshold d in logits. 0.5 until 2026-12-02; on the Xeon (AVX-512)
# after the Q4_1 tile kernels changed the summation order, prompt chat-3 left
# the reference at position 23 where its top-2 gap is 0.80, while the plain-Go
# kernels (DRAFTD_KERNELS=generic, the same int8 activations) stay on it: draftd's
# own two candidates are within rounding there, and the 0.8-logit distance to the
# float reference is the 8-bit activation quantization every path shares (as
# llama.cpp's). A broken kernel is caught by TOP1 below and by divergences at
# gaps of several logits; the kernels themselves are tested against their Go twins.
THRESHOLD = 1.0
# Teacher-forced: share of draftd's tokens that are the reference's argmax given
# draftd's own prefix (97.3–98.4 % measured on this set, 2026-12).
TOP1 = 0.95


def real_dir() -> Path:
    return Path(os.path.expanduser(os.environ.get("DRAFTD_REAL_MODELS") or "~/.cache/draftd/real"))


def test_draftd_matches_float_reference_on_real_weights() -> None:
    path = real_dir() / fidelity.MODELS[MODEL]
    need(path.is_file(), f"{path} missing: run scripts/realmodels --only {MODEL}")
    res = fidelity.run([MODEL], PROMPTS, N, THRESHOLD, ["draftd"], 2, real_dir())
    m = res["models"][MODEL]
    pair = m["pairs"][0]
    assert pair["pair"] == "draftd vs transformers"
    bad = [d for d in m["divergences"]["draftd vs transformers"] if not d["near_tie"]]
    print(fidelity.markdown(res))
    assert not bad, f"draftd left the float reference's greedy path away from a near-tie (gap ≥ {THRESHOLD}): {bad}"
    assert pair["agree"] == pair["prompts"] == PROMPTS
    top1 = m["teacher_forced"]["draftd"]["top1"]
    assert top1 >= TOP1, f"teacher-forced, {100 * top1:.1f} % of draftd's tokens are the reference's argmax; want ≥ {100 * TOP1:.0f} %"
