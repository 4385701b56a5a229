"""End to end with vLLM's CPU build: vLLM generates greedily on a real target
(a Hugging Face directory that ``draftd export`` wrote from the real GGUF,
scripts/hfexport), once alone and once with draftd as its speculative
proposer (draftd.vllm.DraftdProposer, ``method: custom_class``) on the real
drafter GGUF in ``draftd serve``. Checks:

1. lossless: every output equals vLLM's plain greedy output, up to a
   near-tie (draftd._testing.neartie's rule, applied to vLLM's top-2
   log-probabilities at the first differing position in both runs, with the
   gap of the dtype the target runs in: 0.25 for bf16, whose ties are 0.125
   apart);
2. the acceptance vLLM counts (``LLM.get_metrics()``: drafts, draft tokens,
   accepted tokens, accepted per position) equals what ``draftd eval
   --clip-n`` reports on the same continuations (vLLM's first token comes
   from the prompt's prefill, not a draft: the eval prompt includes it);
3. the proposer sent each request's context once and then accepted+bonus,
   with no miss.

vLLM runs in its own venv (scripts/vllmenv; $DRAFTD_VLLM_PYTHON overrides),
one process per run (bench/vllm_run.py). Cost (CI): the target is the 0.5B
itself (what is checked is the path, not the speed-up; its bf16 numerics
differ from the drafter GGUF's (mostly Q5_0 with a Q8_0 head, from Qwen's AWQ
checkpoint), so drafts are still rejected now and then),
2 prompts × 32 tokens, one thread each side, so a run is mostly vLLM's
start-up. bf16 where the CPU has BF16 instructions, else float32 (vLLM's
bf16 fallback on AVX2 is several times slower and checks nothing more).
Without the venv or the model directory the test skips, or fails under
the strictness switch (DRAFTD_STRICT).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import draftd
from draftd._testing.neartie import gap_for
from draftd._testing.realtarget import vllm_near_tie as near_tie
from draftd._testing.serve import REPO, Server
from draftd._testing.vllmserve import dtype, engine_env, hf_dir, vllm_python  # noqa: F401 (vllm_python: test_vllm_lifecycle's)

pytestmark = pytest.mark.realmodel

BENCH = REPO / "clients/python/bench"
HF_NAME = "qwen2.5-coder-0.5b-instruct"
NEW_TOKENS, K = 32, 4


def vllm_run(out: Path, *args: str) -> dict[str, Any]:
    env = engine_env(OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind", VLLM_LOGGING_LEVEL="WARNING",
                     VLLM_ENABLE_V1_MULTIPROCESSING="0")
    log = out.with_suffix(".log")
    with log.open("w") as f:
        rc = subprocess.run([str(vllm_python()), str(BENCH / "vllm_run.py"), "--out", str(out), *args],
                            env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    assert rc == 0, f"vllm_run exited {rc}:\n{log.read_text()[-4000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = hf_dir(HF_NAME)  # first: its absence is the message, not an import error
    from transformers import AutoTokenizer

    from draftd._testing.realtarget import prompts as real_prompts

    tok = AutoTokenizer.from_pretrained(str(model))
    p = tmp_path_factory.mktemp("vllm") / "prompts.json"
    p.write_text(json.dumps([{"id": i, "prompt": ids} for i, ids in real_prompts(tok, 2, short_code=True)]))
    return p


@pytest.fixture(scope="module")
def drafter(real_drafter: Server) -> Server:
    return real_drafter


def test_vllm_with_draftd_is_greedy_and_acceptance_is_evals(prompts: Path, drafter: Server, draftd_bin: Path,
                                                            tmp_path: Path) -> None:
    model = str(hf_dir(HF_NAME))
    common = ["--model", model, "--prompts", str(prompts), "--max-tokens", str(NEW_TOKENS), "--logprobs",
              "--ignore-eos", "--dtype", dtype()]
    plain = vllm_run(tmp_path / "plain.json", *common)
    assisted = vllm_run(tmp_path / "draftd.json", *common, "--method", "draftd", "--k", str(K), "--draftd-url",
                        drafter.url, "--strategy", "model")

    data = tmp_path / "data.jsonl"
    with data.open("w") as f:
        for p in json.loads(prompts.read_text()):
            sid = p["id"]
            ok, why = near_tie(plain, assisted, sid, gap_for(dtype()))
            assert ok, f"{sid}: vLLM with draftd is not greedy: {why}"
            out = assisted["outputs"][sid]
            assert len(out) == NEW_TOKENS
            f.write(json.dumps({"id": sid, "prompt": p["prompt"] + out[:1], "continuation": out[1:]}) + "\n")

    report = tmp_path / "eval.json"
    subprocess.run([str(draftd_bin), "eval", "--url", drafter.url, "--data", str(data), "--n", str(K), "--clip-n",
                    "--strategy", "model", "--concurrency", "1", "--json", str(report)], check=True,
                   stdout=subprocess.DEVNULL)
    r = json.loads(report.read_text())
    assert r["failures"] == 0, r.get("first_error")
    m = assisted["metrics"]
    have = (m["drafts"], m["draft_tokens"], m["accepted_tokens"], m["accepted_per_pos"])
    want = (r["requests"], r["draft_tokens"], sum(r["position_accepted"]), r["position_accepted"])
    assert have == want, f"vLLM counted (drafts, draft tokens, accepted, per position) {have}; draftd eval {want}"
    assert m["drafts"] > 0 and m["accepted_tokens"] > 0

    st = assisted["proposer"]
    n = len(json.loads(prompts.read_text())) + 1  # + vllm_run's warm-up request
    assert st["misses"] == 0 and st["item_errors"] == 0, st
    assert st["full"] == n, f"whole contexts sent {st['full']}; want one per request ({n})"
    assert st["incremental"] == st["drafts"] - n, st


def test_vllm_processes_import_this_checkouts_proposer() -> None:
    """A vLLM process started with engine_env imports draftd from this
    checkout, whatever checkout the vLLM venv's editable install names (after
    CI's doc-commands step: a clone since deleted, and every draftd row of
    bench/vllm_speedup.py failed with "No module named 'draftd'")."""
    r = subprocess.run([str(vllm_python()), "-c", "import draftd.vllm, draftd; print(draftd.__file__)"],
                       env=engine_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert Path(r.stdout.strip()).resolve() == (REPO / "clients/python/src/draftd/__init__.py").resolve(), r.stdout
