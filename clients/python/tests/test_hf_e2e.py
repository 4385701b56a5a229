"""End to end with real parts: a real target (Qwen2.5-Coder-1.5B-Instruct,
float32 in transformers) verifies drafts that ``draftd serve`` makes on the
real drafter (Qwen2.5-Coder-0.5B-Instruct GGUF), through
draftd.hf.assisted_generate. Checks, per strategy:

1. lossless: the assisted output equals the target's plain greedy output,
   up to a near-tie (draftd._testing.neartie states the rule; float32's gap);
2. the acceptance the client counted equals ``draftd eval``'s: the
   assisted continuations become a docs/evaluation.md dataset, ``draftd eval
   --concurrency 1 --strategy S`` replays it against the same server, and
   each sample's step and token counts (and so τ) must be the client's.

The ``hybrid`` run drafts through a session (draftd.hf's ``session=True``:
the prompt once, then accepted + bonus each step), so check 2 also shows
that session drafts are the whole-context drafts ``draftd eval`` gets;
it also checks that the session went incrementally (one whole context per
prompt, never resent).

Cost (CI): the target is loaded once per pytest session (conftest's
``target`` fixture) and plain greedy runs once per prompt for all
strategies; one ``draftd serve`` serves every strategy (the strategy is a
request field). Default: 3 prompts (code, chat, prose; the short code
prompt, ~110 tokens) × 24 new tokens, strategies model and hybrid.
DRAFTD_E2E_FULL=1: 8 prompts × 64 tokens, all four strategies (hybrid and
pld through sessions). The model files come from $DRAFTD_REAL_MODELS
(draftd._testing.serve.real_model); without them (or without torch and transformers) the
test skips, a failure under the strictness switch (DRAFTD_STRICT).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import draftd  # noqa: E402
from draftd.hf import assisted_generate  # noqa: E402

from draftd._testing.realtarget import INSTRUCTIONS, chat_text, prompts  # noqa: E402
from draftd._testing.realtarget import generate_near_tie as near_tie  # noqa: E402
from draftd._testing.serve import TARGET_FILE, Server, real_model  # noqa: E402

FULL = os.environ.get("DRAFTD_E2E_FULL") == "1"
N_PROMPTS, NEW_TOKENS = (8, 64) if FULL else (3, 24)
# strategy → whether its assisted runs draft through a session
STRATEGIES = {"model": False, "lookup": False, "hybrid": True, "pld": True} if FULL else {"model": False, "hybrid": True}
DRAFT_LEN = 8

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def drafter(real_drafter: Server) -> Server:
    return real_drafter


@pytest.fixture(scope="module")
def greedy(target: tuple[Any, Any]) -> dict[str, tuple[list[int], Any]]:
    """Plain greedy generate() of each prompt: id → (prompt ids, output)."""
    model, tok = target
    out = {}
    for sid, ids in prompts(tok, N_PROMPTS, short_code=not FULL):
        out[sid] = (ids, model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                        return_dict_in_generate=True, output_scores=True))
    return out


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_assisted_is_greedy_and_acceptance_is_evals(strategy: str, target: tuple[Any, Any],
                                                    greedy: dict[str, tuple[list[int], Any]], drafter: Server,
                                                    draftd_bin: Path, tmp_path: Path) -> None:
    model, _ = target
    use_session = STRATEGIES[strategy]
    data = tmp_path / "data.jsonl"
    client_steps: dict[str, int] = {}
    client_tokens: dict[str, int] = {}
    with draftd.Client(drafter.url) as c, data.open("w") as f:
        for sid, (ids, plain) in greedy.items():
            out, st = assisted_generate(model, ids, c, DRAFT_LEN, strategy=strategy, session=use_session,
                                        max_new_tokens=NEW_TOKENS, return_dict_in_generate=True, output_scores=True)
            ok, why = near_tie(plain, out, len(ids))
            assert ok, f"{sid} ({strategy}): assisted output is not greedy: {why}"
            cont = out.sequences[0, len(ids):].tolist()
            assert st.tokens == len(cont), f"{sid}: the client counted {st.tokens} tokens; generate() made {len(cont)}"
            assert all(0 <= a <= d for a, d in zip(st.accepted, st.drafted))
            if use_session:
                assert st.session == draftd.SessionStats(tokens=1, incremental=st.requests - 1, resent=0), st.session
            else:
                assert st.session is None
            client_steps[sid], client_tokens[sid] = st.steps, st.tokens
            # The dataset's continuation is what the target produced here
            # (equal to plain greedy, or at a near-tie the assisted one, which
            # is what these drafts were verified against).
            f.write(json.dumps({"id": sid, "prompt": ids, "continuation": cont}) + "\n")

    report = tmp_path / "eval.json"
    subprocess.run(
        [str(draftd_bin), "eval", "--url", drafter.url, "--data", str(data), "--n", str(DRAFT_LEN),
         "--strategy", strategy, "--concurrency", "1", "--json", str(report)],
        check=True, stdout=subprocess.DEVNULL,
    )
    r = json.loads(report.read_text())
    assert r["failures"] == 0, r.get("first_error")
    eval_tokens = {s["id"]: s["tokens"] for s in r["per_sample"]}
    eval_steps = {s["id"]: s["steps"] for s in r["per_sample"]}
    assert eval_tokens == client_tokens
    assert eval_steps == client_steps, f"steps per sample: draftd eval {eval_steps}; client {client_steps}"


def test_chat_text_is_the_models_template() -> None:
    """realtarget.chat_text, the one copy of Qwen2.5's chat template written
    out (for llama.cpp, which takes text), renders as the target's own
    template does (its tokenizer only: no weights loaded)."""
    from transformers import AutoTokenizer

    path = real_model(TARGET_FILE)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for q in INSTRUCTIONS:
        want = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        assert chat_text(q) == want
