#!/usr/bin/env python3
"""One vLLM run: a target generating greedily from token-id prompts, alone or
with one speculative method, timed, in this process (run it with the vLLM
venv's python, scripts/vllmenv). The end-to-end test
(tests/test_vllm_e2e.py) and the side-by-side (bench/vllm_speedup.py) start
one of these per configuration, so that every configuration gets a fresh
engine and the same threads.

  vllm_run.py --model DIR --prompts P.json --max-tokens N --out R.json
              [--method none|draftd|ngram|draft_model|oracle] [--k K]
              [--draft-model DIR] [--draftd-url URL] [--strategy S] [--adaptive]
              [--concurrency C] [--logprobs] [--ignore-eos]

P.json: [{"id": str, "prompt": [ids]}, …]. With --concurrency 1 the prompts
run one after the other (one generate() each, timed apart); with C > 1 in
groups of C submitted together. R.json: {"outputs": {id: [ids]},
"seconds": {id: s} (c = 1), "wall_s", "tokens", "startup_s", "metrics"
(vLLM's speculative counters over the timed runs: drafts, draft tokens,
accepted tokens, accepted per position), "proposer" (the draftd
proposer's counters), "logprobs" ({id: [[[token, logprob], …] per position]}
with --logprobs: the top 2 at each output position)}.

--method oracle drafts the known continuation (--oracle R.json of a plain
run, K tokens each step, all accepted): it measures the target's
K+1-position verification step, a component of the predicted speed-up; it
is a timing probe, not a drafter.

Threads and binding come from the environment the caller sets
(OMP_NUM_THREADS, VLLM_CPU_OMP_THREADS_BIND, KMP_BLOCKTIME, LD_PRELOAD).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def spec_config(a: argparse.Namespace) -> dict[str, Any] | None:
    if a.method == "none":
        return None
    if a.method == "draftd":
        return {"method": "custom_class", "model": "draftd.vllm.DraftdProposer", "num_speculative_tokens": a.k}
    if a.method == "oracle":
        return {"method": "custom_class", "model": "vllm_oracle.OracleProposer", "num_speculative_tokens": a.k}
    if a.method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": a.k, "prompt_lookup_max": a.lookup_max,
                "prompt_lookup_min": a.lookup_min}
    if a.method == "draft_model":
        if not a.draft_model:
            raise SystemExit("--method draft_model needs --draft-model DIR")
        return {"method": "draft_model", "model": a.draft_model, "num_speculative_tokens": a.k}
    raise SystemExit(f"--method {a.method!r}: want none, draftd, ngram, draft_model or oracle")


def spec_metrics(llm: Any) -> dict[str, Any]:
    """vLLM's speculative-decoding counters now (get_metrics())."""
    out: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_pos": []}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
             "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos"}
    for m in llm.get_metrics():
        key = names.get(m.name)
        if key is None:
            continue
        if hasattr(m, "values"):
            out[key] = [int(v) for v in m.values]
        else:
            out[key] = int(m.value)
    return out


def diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in after.items():
        b = before.get(k)
        if isinstance(v, list):
            b = b or [0] * len(v)
            d[k] = [x - y for x, y in zip(v, b + [0] * (len(v) - len(b)))]
        else:
            d[k] = v - (b or 0)
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, type=Path)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--method", default="none")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--draft-model")
    ap.add_argument("--draftd-url")
    ap.add_argument("--strategy")
    ap.add_argument("--adaptive", action="store_true", help="the draftd proposer's adaptive draft length")
    ap.add_argument("--context", type=int, help="the draftd proposer's context window (the most prompt tokens it sends)")
    ap.add_argument("--lookup-max", type=int, default=4)
    ap.add_argument("--lookup-min", type=int, default=1)
    ap.add_argument("--oracle", type=Path)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--logprobs", action="store_true")
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()

    prompts = json.loads(a.prompts.read_text())
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    if a.method == "oracle":
        if not a.oracle:
            raise SystemExit("--method oracle needs --oracle R.json (a plain run)")
        os.environ["DRAFTD_ORACLE"] = str(a.oracle)
        os.environ["DRAFTD_ORACLE_PROMPTS"] = str(a.prompts)
        sys.path.insert(0, str(HERE))
    draftd_cfg: dict[str, Any] = {}
    if a.draftd_url:
        draftd_cfg["url"] = a.draftd_url
    if a.strategy:
        draftd_cfg["strategy"] = a.strategy
    if a.adaptive:
        draftd_cfg["adaptive"] = True
    if a.context:
        draftd_cfg["context"] = a.context

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    kw: dict[str, Any] = {}
    if draftd_cfg:
        kw["additional_config"] = {"draftd": draftd_cfg}
    llm = LLM(model=a.model, dtype=a.dtype, max_model_len=a.max_model_len, enforce_eager=True,
              disable_log_stats=False, seed=0, speculative_config=spec_config(a), **kw)
    sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=a.ignore_eos,
                        logprobs=2 if a.logprobs else None)
    # Warm-up: one short generation with the same sampling parameters
    # (first-call allocations, the log-probabilities' first use: ~4 s, the
    # proposer's first connection), not timed and not in the counters'
    # difference.
    llm.generate([TokensPrompt(prompt_token_ids=prompts[0]["prompt"][:16])],
                 SamplingParams(temperature=0.0, max_tokens=4, logprobs=sp.logprobs), use_tqdm=False)
    startup = time.perf_counter() - t0

    before = spec_metrics(llm)
    outputs: dict[str, list[int]] = {}
    logprobs: dict[str, list[list[list[float]]]] = {}
    seconds: dict[str, float] = {}
    w0 = time.perf_counter()
    c = max(1, a.concurrency)
    for g in range(0, len(prompts), c):
        group = prompts[g:g + c]
        s0 = time.perf_counter()
        res = llm.generate([TokensPrompt(prompt_token_ids=p["prompt"]) for p in group], sp, use_tqdm=False)
        dt = time.perf_counter() - s0
        for p, r in zip(group, res):
            o = r.outputs[0]
            outputs[p["id"]] = list(o.token_ids)
            if c == 1:
                seconds[p["id"]] = dt
            if a.logprobs and o.logprobs is not None:
                logprobs[p["id"]] = [[[int(t), float(lp.logprob)] for t, lp in sorted(pos.items(), key=lambda kv: -kv[1].logprob)][:2]
                                     for pos in o.logprobs]
    wall = time.perf_counter() - w0
    metrics = diff(spec_metrics(llm), before)

    proposer: dict[str, Any] = {}
    if a.method == "draftd":
        from dataclasses import asdict

        import draftd.vllm as dv

        ps = dv.proposers()
        if ps:
            proposer = asdict(ps[0].stats)
            ps[0].close()
    result = {"method": a.method, "k": a.k, "concurrency": c, "outputs": outputs, "seconds": seconds, "wall_s": wall,
              "tokens": sum(len(v) for v in outputs.values()), "startup_s": startup, "metrics": metrics,
              "proposer": proposer, "logprobs": logprobs,
              "threads": os.environ.get("OMP_NUM_THREADS"), "bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND")}
    a.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
