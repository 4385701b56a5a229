#!/usr/bin/env python3
"""End-to-end speed-up of a real target with draftd as its assistant.

The target (Qwen2.5-Coder-1.5B-Instruct, float32 in transformers on the CPU)
generates greedily, alone and with drafts from ``draftd serve`` on the
drafter (Qwen2.5-Coder-0.5B-Instruct GGUF) for each strategy, on the same
prompts; it reports target tokens/s, τ and whether each output equals plain
greedy. Runs alternate per prompt (alone with each thread count in use,
then each configuration and strategy), so a shared machine's drift spreads
over all variants alike. Threads: the target alone gets --baseline-threads
(and, for comparison, each T of --configs); with draftd, each --configs pair
T+D gives the target T torch threads and its own draftd serve --threads D.
The assisted loop is synchronous (the target waits for each draft, draftd
idles while the target verifies), so 2+2 on 2 cores time-shares them: each
side has both cores while it runs; 1+1 pins each to half the machine. On
an oversubscribed machine 2 torch threads can be much slower than 1 (each
parallel region waits for a descheduled thread): compare each assisted row
with the target alone at the same T (the table's last ratio column).

  ~/.cache/draftd/venv/bin/python clients/python/bench/speedup.py --configs 2+2,1+1 --out speedup.json

This is a measurement, not a test: nothing is asserted (the outputs' equality
is reported). The test of the same path is tests/test_hf_e2e.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

import draftd
from draftd._testing.realtarget import generate_near_tie as near_tie
from draftd._testing.realtarget import load_target, prompts
from draftd._testing.serve import DRAFTER_FILE, TARGET_FILE, build_draftd, real_models_dir, start_server
from draftd.hf import assisted_generate


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=real_models_dir(), help="directory of the real GGUF files ($DRAFTD_REAL_MODELS)")
    ap.add_argument("--draftd", type=Path, help="draftd binary (default: $DRAFTD_BIN, else go build the repository's)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--draft-len", type=int, default=8)
    ap.add_argument("--strategies", default="model,lookup,hybrid,pld")
    ap.add_argument("--baseline-threads", type=int, default=2, help="torch threads of the target alone")
    ap.add_argument("--configs", default="2+2",
                    help="comma-separated T+D pairs: target torch threads T beside draftd serve --threads D (one server per pair)")
    ap.add_argument("--session", action="store_true", help="draft through sessions (accepted+bonus) instead of whole contexts")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    a = ap.parse_args()

    configs: list[tuple[int, int]] = []
    for c in a.configs.split(","):
        t, _, d = c.partition("+")
        if not (t.isdigit() and d.isdigit() and int(t) > 0 and int(d) > 0):
            ap.error(f"--configs item {c!r} is not T+D with positive integers")
        configs.append((int(t), int(d)))
    binary = a.draftd or build_draftd(Path("/tmp") / f"draftd-speedup-{os.getpid()}")
    strategies = a.strategies.split(",")
    load_before = loadavg()
    t_load = time.perf_counter()
    model, tok = load_target(a.models / TARGET_FILE)
    print(f"target loaded in {time.perf_counter() - t_load:.1f} s", file=sys.stderr)
    ps = prompts(tok, a.prompts)
    servers = {d: start_server(binary, a.models / DRAFTER_FILE, "--threads", str(d), "--kv-cache-bytes", str(1 << 30))
               for d in sorted({d for _, d in configs})}
    rows: dict[str, dict[str, float]] = {}

    def add(name: str, tokens: int, secs: float, steps: int = 0, equal: bool = True) -> None:
        r = rows.setdefault(name, {"tokens": 0, "seconds": 0.0, "steps": 0, "equal": 0, "runs": 0})
        r["tokens"] += tokens
        r["seconds"] += secs
        r["steps"] += steps
        r["equal"] += int(equal)
        r["runs"] += 1

    alone_threads = sorted({a.baseline_threads, *(t for t, _ in configs)}, reverse=True)
    clients = {d: draftd.Client(s.url) for d, s in servers.items()}
    info = None
    try:
        for c in clients.values():
            c.wait_ready(300)
            info = c.info()
        # Warm-up: one short generate each way, not counted.
        model.generate(torch.tensor([ps[0][1]]), max_new_tokens=4, do_sample=False)
        for c in clients.values():
            assisted_generate(model, ps[0][1], c, a.draft_len, max_new_tokens=4)
        for sid, ids in ps:
            x = torch.tensor([ids])
            for threads in alone_threads:
                torch.set_num_threads(threads)
                t0 = time.perf_counter()
                plain = model.generate(x, max_new_tokens=a.new_tokens, do_sample=False,
                                       return_dict_in_generate=True, output_scores=True)
                dt = time.perf_counter() - t0
                n = plain.sequences.shape[1] - len(ids)
                add(f"alone/{threads}", n, dt, steps=n)
                print(f"{sid} alone/{threads}: {n} tokens, {n / dt:.2f} tok/s", file=sys.stderr)
                if threads == a.baseline_threads:
                    ref = plain
            for t, d in configs:
                torch.set_num_threads(t)
                for s in strategies:
                    t0 = time.perf_counter()
                    out, st = assisted_generate(model, ids, clients[d], a.draft_len, strategy=s, session=a.session,
                                                max_new_tokens=a.new_tokens, return_dict_in_generate=True, output_scores=True)
                    dt = time.perf_counter() - t0
                    ok, why = near_tie(ref, out, len(ids))
                    add(f"{s}/{t}+{d}", st.tokens, dt, steps=st.steps, equal=why == "equal")
                    print(f"{sid} {s} {t}+{d}: {st.tokens} tokens in {st.steps} steps, {st.tokens / dt:.2f} tok/s, {why}", file=sys.stderr)
    finally:
        for c in clients.values():
            c.close()
        for srv in servers.values():
            srv.stop()
    load_after = loadavg()

    base = rows[f"alone/{a.baseline_threads}"]
    base_tps = base["tokens"] / base["seconds"]
    print(f"load average (1, 5, 15 min) before: {load_before}; after: {load_after}")
    print(f"| variant | threads (target + draftd) | target tokens/s | vs alone, {a.baseline_threads} threads | vs alone, same target threads | τ | outputs equal to greedy |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        tps = r["tokens"] / r["seconds"]
        r["tokens_per_s"] = tps
        r["tau"] = r["tokens"] / r["steps"]
        what, threads = name.split("/")
        threads = f"{threads} + 0" if what == "alone" else threads.replace("+", " + ")
        label = "target alone" if what == "alone" else f"draftd `{what}`, n={a.draft_len}" + (", session" if a.session else "")
        same = rows[f"alone/{threads.split(' ')[0]}"]
        print(f"| {label} | {threads} | {tps:.2f} | {tps / base_tps:.2f}× | {tps / (same['tokens'] / same['seconds']):.2f}× "
              f"| {r['tau']:.2f} | {r['equal']}/{r['runs']} |")
    if a.out:
        a.out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "prompts": a.prompts, "new_tokens": a.new_tokens, "draft_len": a.draft_len,
            "baseline_threads": a.baseline_threads, "configs": a.configs, "session": a.session,
            "loadavg_before": load_before, "loadavg_after": load_after,
            "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "draftd": info.version if info else None, "rows": rows,
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
