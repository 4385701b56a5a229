#!/usr/bin/env python3
"""llama.cpp with draftd: fixed draft lengths against the adaptive length
policy (draftd.policy.LengthPolicy, ``DraftdDraftModel(adaptive=True)``), on
the real pair — the target Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) in
llama-cpp-python, the drafter the 0.5B GGUF in ``draftd serve`` (`model`
strategy), both on the same cores (2 + 2 threads), greedy, one request at a
time.

Rows: llama.cpp alone (2 threads); draftd at each fixed length of --fixed;
draftd adaptive with n ≤ --n-max. Every row runs in a process of its own with
a fresh ``draftd serve`` (nothing cached from another row), the rows
interleaved over --rounds rounds (the order rotated each round), since the
machine is shared and its speed drifts. Reported per row: output tokens/s of
each round (decode: first generated token to last, as
llamacpp_speedup.py counts it), their median and spread, × alone (the
same round's), τ, the mean draft length, the policy's length histogram, and
outputs equal to plain greedy (llamacpp_speedup.near_tie's rule).

  ~/.cache/draftd/venv/bin/python clients/python/bench/llamacpp_policy.py --rounds 3 --out /tmp/policy

A measurement, not a test (nothing asserted).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the bench modules beside this one, as vllm_run.py does

import llamacpp_speedup as sbs  # noqa: E402

from draftd._testing.serve import DRAFTER_FILE, REPO, TARGET_FILE, real_models_dir  # noqa: E402


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["kind"] == "plain":
        return sbs.worker_plain(spec)
    from draftd.llamacpp import DraftdDraftModel

    dm = DraftdDraftModel(spec["url"], n=spec["n"], strategy="model", timeout=30.0, adaptive=spec["adaptive"])
    llama = sbs._llama(spec["target"], spec["threads"], True, draft_model=dm)
    res = []
    for sid, ids in spec["prompts"]:
        out, _, t0, t1, acc = sbs._timed_generate(llama, ids, spec["tokens"])
        res.append({"id": sid, "tokens": out, "decode_s": t1 - t0, "drafted": acc.drafted, "accepted": acc.accepted,
                    "top2": sbs._top2(llama, ids, out)})
    pol = dm._adaptive
    state = None
    if pol is not None:
        state = {"t_verify_ms": {k: round(1000 * v, 1) for k in range(1, spec["n"] + 2)
                                 if (v := pol.t_verify(k)) is not None},
                 "t_draft_ms": {n: round(1000 * v, 1) for n in range(1, spec["n"] + 1)
                                if (v := pol.t_draft(n)) is not None},
                 "q": [round(q, 3) for q in pol.acceptance()], "best": pol.best()}
    dm.close()
    return {"samples": res, "misses": dm.misses, "policy": state}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker"], input=json.dumps(spec),
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"worker failed ({p.returncode}):\n{p.stderr[-3000:]}")
    r: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--models", type=Path, default=real_models_dir())
    ap.add_argument("--draftd", type=Path, help="draftd binary (default: go build the repository's)")
    ap.add_argument("--per-kind", type=int, default=1, help="prompts of each kind (code, chat, prose)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--fixed", default="4,8", help="the fixed draft lengths")
    ap.add_argument("--n-max", type=int, default=8, help="the adaptive rows' longest draft")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, required=False)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(json.loads(sys.stdin.read()))))
        return 0
    if a.out is None:
        ap.error("--out DIR is required")
    a.out.mkdir(parents=True, exist_ok=True)
    target, drafter = a.models / TARGET_FILE, a.models / DRAFTER_FILE
    bin_ = a.draftd
    if bin_ is None:
        bin_ = a.out / "draftd"
        go = shutil.which("go") or "/usr/local/go/bin/go"
        subprocess.run([go, "build", "-o", str(bin_), "./cmd/draftd"], cwd=REPO, check=True,
                       env={**__import__("os").environ, "CGO_ENABLED": "0"})
    from llama_cpp import Llama

    tok = Llama(model_path=str(target), vocab_only=True, verbose=False)
    prompts = [(sid, tok.tokenize(t.encode(), add_bos=False, special=True)) for sid, t in sbs.prompt_texts(a.per_kind)]
    del tok
    base = {"target": str(target), "prompts": prompts, "tokens": a.tokens, "threads": 2}
    rows: list[tuple[str, dict[str, Any]]] = [("alone", {"kind": "plain"})]
    rows += [(f"draftd n = {n}", {"kind": "draftd", "n": n, "adaptive": False}) for n in map(int, a.fixed.split(","))]
    rows += [(f"draftd adaptive n ≤ {a.n_max}", {"kind": "draftd", "n": a.n_max, "adaptive": True})]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in rows}
    loads = []
    for rnd in range(a.rounds):
        order = rows[rnd % len(rows):] + rows[: rnd % len(rows)]
        for name, spec in order:
            loads.append(sbs.loadavg())
            print(f"round {rnd + 1}, {name}, load {loads[-1]}", file=sys.stderr, flush=True)
            t = time.time()
            if spec["kind"] == "plain":
                r = run({**base, **spec})
            else:
                srv = sbs._start_draftd(bin_, drafter, ["--threads", "2", "--kv-cache-bytes", str(1 << 30),
                                                        "--strategy", "model"], None)
                try:
                    r = run({**base, **spec, "url": srv.url})
                finally:
                    srv.stop()
            r["wall_s"] = time.time() - t
            results[name].append(r)
    loads.append(sbs.loadavg())
    (a.out / "results.json").write_text(json.dumps({"results": results, "loads": loads}, indent=1))

    plain = {s["id"]: (s["tokens"], s["top2"]) for s in results["alone"][0]["samples"]}

    def tok_s(r: dict[str, Any]) -> float:
        return sum(len(s["tokens"]) - 1 for s in r["samples"]) / sum(s["decode_s"] for s in r["samples"])

    alone = [tok_s(r) for r in results["alone"]]
    lines = [f"{len(prompts)} prompts × {a.tokens} tokens, {a.rounds} rounds interleaved; load {loads[0]} … {loads[-1]}",
             "", "| row | tokens/s per round | median | × alone (per round) | τ | mean draft | lengths used | = greedy |",
             "|---|---|---:|---|---:|---:|---|---:|"]
    for name, _ in rows:
        rs = results[name]
        ts = [tok_s(r) for r in rs]
        x = [t / al for t, al in zip(ts, alone)]
        eq = sum(sbs.near_tie(plain[s["id"]][0], plain[s["id"]][1], s["tokens"], s["top2"])[0]
                 for r in rs for s in r["samples"])
        n_s = sum(len(r["samples"]) for r in rs)
        if name == "alone":
            tau = md = "–"
            used = ""
        else:
            steps = [(d, acc) for r in rs for s in r["samples"] for d, acc in zip(s["drafted"][1:], s["accepted"][1:])]
            tau = f"{sum(acc + 1 for _, acc in steps) / len(steps):.2f}"
            md = f"{statistics.mean(d for d, _ in steps):.2f}"
            used = " ".join(f"{k}:{v}" for k, v in sorted(Counter(d for d, _ in steps).items()))
        lines.append(f"| {name} | {' / '.join(f'{t:.2f}' for t in ts)} | {statistics.median(ts):.2f} | "
                     f"{' / '.join(f'{v:.2f}' for v in x)} (median {statistics.median(x):.2f}) | {tau} | {md} | "
                     f"{used} | {eq}/{n_s} |")
    for name, _ in rows:
        for i, r in enumerate(results[name]):
            if r.get("policy"):
                lines.append(f"\n{name}, round {i + 1}, the policy at the end: {json.dumps(r['policy'])}")
    md_text = "\n".join(lines) + "\n"
    (a.out / "table.md").write_text(md_text)
    print(md_text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
