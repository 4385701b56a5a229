#!/usr/bin/env python3
"""Whole requests, interleaved: llama.cpp (llama-cpp-python, the Q4_K_M
Qwen2.5-Coder-1.5B target, 2 threads) alone and with draftd's draft model, as
a user sees a request — the prompt's pass, draftd's prefill of the prompt
beside it on the same 2 cores, and the decode.

llamacpp_speedup.py compares decode tokens/s, each configuration in its own
process one after another; on a long prompt the prompt's pass is most of a
request, and the host's speed drifts by a tenth between runs, more than the
differences measured here. So one process holds one Llama (made with
logits_all, as a draft model needs) and every configuration runs each
request in turn, alone first (``llama.draft_model = None``; the prompt's
pass of every configuration computes its last position's logits alone, as
llama.cpp alone does: draftd.llamacpp.generate). Each repetition's prompts
start with a line of their own ("# request r"), so draftd's prefix cache
misses as for a new request, and each draftd configuration has a draftd
server of its own (none finds a prompt another one left in its cache).

Configurations: alone; draftd ``model`` with a fixed draft length --n; with
--adaptive also the adaptive policy (n ≤ --n: drafting stops where it does
not pay, and a whole generation drafts nothing when its expected saving
would not cover draftd's prefill of its prompt; ``shared_cores``); each
draftd configuration also with ``context=W`` for each W of --context. --drafter
and --serve choose every draftd server's drafter file and further flags.

Columns: the requests' total seconds, whole-request speed-up over alone (the
sum of alone's seconds over the sum of the configuration's, and the median
of the per-request ratios with their range), τ, generations that drafted
nothing (skipped), outputs equal to alone's (near-tie rule: each run's
logits of the row that chose each token).

  ~/.cache/draftd/venv/bin/python clients/python/bench/llamacpp_requests.py --prompts long --reps 3 \\
      --adaptive --context 256 --out /tmp/req

A measurement, not a test (nothing asserted).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from draftd._testing.neartie import from_rows, gap_for, near_tie
from draftd._testing.serve import DRAFTER_FILE, TARGET_FILE, build_draftd, real_models_dir, start_server

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llamacpp_speedup import add_draftd_flags, long_prompt_texts, loadavg, prompt_texts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, default=real_models_dir())
    ap.add_argument("--draftd", type=Path, help="draftd binary (default: go build the repository's)")
    ap.add_argument("--prompts", choices=("short", "long"), default="long")
    ap.add_argument("--per-kind", type=int, default=1, help="prompts of each kind")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of every request")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--n", type=int, default=3, help="draft length of the fixed configuration, the adaptive's most")
    ap.add_argument("--adaptive", action="store_true", help="also the adaptive policy")
    ap.add_argument("--context", default="", type=lambda v: [int(x) for x in v.split(",") if x],
                    help="also each draftd configuration with context=W for each W of this comma-separated list")
    add_draftd_flags(ap, "the draftd servers' drafter GGUF (default: the real 0.5B file)")
    ap.add_argument("--out", type=Path, required=True, help="directory for table.md and results.json")
    a = ap.parse_args()
    if a.n < 1 or a.tokens < 2 or a.reps < 1 or a.per_kind < 1 or any(w < 1 for w in a.context):
        ap.error("--n ≥ 1, --tokens ≥ 2, --reps ≥ 1, --per-kind ≥ 1, --context values ≥ 1")
    a.out.mkdir(parents=True, exist_ok=True)
    log = lambda *x: print(*x, file=sys.stderr, flush=True)  # noqa: E731

    from llama_cpp import Llama

    from draftd.llamacpp import DraftdDraftModel, generate

    texts = prompt_texts(a.per_kind) if a.prompts == "short" else long_prompt_texts(a.per_kind)
    draftd_bin = a.draftd or build_draftd(a.out / "draftd")
    servers: list[Any] = []

    def server() -> str:
        """A draftd of its own for each configuration: none finds a prompt
        another one's request left in the prefix cache."""
        srv = start_server(draftd_bin, a.drafter or a.models / DRAFTER_FILE, "--threads", "2", "--kv-cache-bytes",
                           str(1 << 30), "--strategy", "model", *shlex.split(a.serve))
        servers.append(srv)
        srv.wait_healthy(300)
        return str(srv.url)

    try:
        tok = Llama(model_path=str(a.models / TARGET_FILE), vocab_only=True, verbose=False)
        prompts = [[(sid, tok.tokenize(f"# request {r}\n{text}".encode(), add_bos=False, special=True))
                    for sid, text in texts] for r in range(a.reps)]
        longest = max(len(ids) for rep in prompts for _, ids in rep)
        n_ctx = max(2048, 1 << (longest + a.tokens + 2 * a.n).bit_length())
        llama = Llama(model_path=str(a.models / TARGET_FILE), n_ctx=n_ctx, n_threads=2, n_threads_batch=2, seed=0,
                      verbose=False, logits_all=True)
        confs: dict[str, Any] = {"llama.cpp alone": None}
        for w in [None, *a.context]:
            ctx = "" if w is None else f", context {w}"
            confs[f"draftd model, n = {a.n}{ctx}"] = DraftdDraftModel(server(), n=a.n, strategy="model", timeout=30,
                                                                        context=w)
            if a.adaptive:
                confs[f"draftd model, adaptive n ≤ {a.n}{ctx}"] = DraftdDraftModel(
                    server(), n=a.n, strategy="model", timeout=30, context=w, adaptive=True)
        log(f"{a.prompts} prompts: {', '.join(f'{sid} {len(ids)}' for sid, ids in prompts[0])} tokens (+ the "
            f"request line); n_ctx {n_ctx}; load {loadavg()}")
        # warm-up: a process's first pass over a long prompt is slower (seen: 29 s, then 21 s; its buffers)
        llama.draft_model = None
        generate(llama, max((ids for _, ids in prompts[0]), key=len), 4)
        res: dict[str, list[dict[str, Any]]] = {k: [] for k in confs}
        for r, rep in enumerate(prompts):
            for sid, ids in rep:
                for name, dm in confs.items():
                    llama.draft_model = dm
                    skipped = dm.skipped_generations if dm is not None else 0
                    t = time.perf_counter()
                    g = generate(llama, ids, a.tokens)
                    s = time.perf_counter() - t
                    rows = np.array(llama.scores[len(ids) - 1: len(ids) - 1 + len(g.tokens)], copy=True)
                    res[name].append({"id": sid, "rep": r, "s": s, "tokens": g.tokens, "rows": rows,
                                      "steps": g.acceptance.steps, "skipped": dm is not None
                                      and dm.skipped_generations > skipped})
                    log(f"rep {r} {sid} {name}: {s:.2f} s, {g.acceptance.steps} steps; load {loadavg()}")
        llama.draft_model = None
    finally:
        for srv in servers:
            srv.stop()

    gap = gap_for("llama.cpp")
    base = res["llama.cpp alone"]
    table = [f"{a.prompts} prompts ({', '.join(f'{sid} {len(ids)}' for sid, ids in prompts[0])} tokens) × "
             f"{a.reps} repetitions, {a.tokens} tokens each, greedy; whole requests (the prompt's pass included), "
             "each configuration in turn per request.", "",
             "| configuration | seconds | × alone (sums) | × alone per request: median (min–max) | τ | skipped | = alone |",
             "|---|---:|---:|---|---:|---:|---|"]
    out: dict[str, Any] = {}
    for name, xs in res.items():
        total = sum(x["s"] for x in xs)
        ratios = [b["s"] / x["s"] for x, b in zip(xs, base)]
        toks = sum(len(x["tokens"]) for x in xs)
        steps = sum(x["steps"] for x in xs)
        ties = [near_tie(b["tokens"], x["tokens"], from_rows(b["rows"]), from_rows(x["rows"]), gap)
                for x, b in zip(xs, base)]
        equal = sum(ok for ok, _ in ties)
        near = sum(ok and why != "equal" for ok, why in ties)
        for x, (ok, why) in zip(xs, ties):
            if not ok:
                log(f"{name} {x['id']} rep {x['rep']}: NOT a near-tie: {why}")
        tau = f"{toks / steps:.2f}" if steps else "–"  # tokens per verification step, the prompt's pass one
        table.append(f"| {name} | {total:.1f} | {sum(b['s'] for b in base) / total:.2f}× | "
                     f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) | {tau} | "
                     f"{sum(x['skipped'] for x in xs)}/{len(xs)} | {equal}/{len(xs)}"
                     + (f" ({near} near-tie)" if near else "") + " |")
        out[name] = [{k: v for k, v in x.items() if k != "rows"} for x in xs]
    md = "\n".join(table) + "\n"
    (a.out / "table.md").write_text(md)
    (a.out / "results.json").write_text(json.dumps(out, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
