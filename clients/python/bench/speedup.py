#!/usr/bin/env python3
"""End-to-end speed-up of a real target with draftd as its assistant.

The target (Qwen2.5-Coder-1.5B-Instruct, float32 in transformers on the CPU)
generates greedily, alone and with drafts from ``draftd serve`` on the
drafter (Qwen2.5-Coder-0.5B-Instruct GGUF) for each strategy, on the same
prompts; it reports target tokens/s, τ and whether each output equals plain
greedy. Runs alternate per prompt (alone with T threads, alone with the
target's share, then each strategy), so a shared machine's drift spreads
over all variants alike. Threads: the target alone gets --baseline-threads;
with draftd the target gets --torch-threads and draftd --draftd-threads.

  ~/.cache/draftd/venv/bin/python clients/python/bench/speedup.py --out speedup.json

This is a measurement, not a test: nothing is asserted (the outputs' equality
is reported). The test of the same path is tests/test_hf_e2e.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import torch  # noqa: E402

import draftd  # noqa: E402
from draftd.hf import assisted_generate  # noqa: E402

from conftest import DRAFTER_FILE, REPO, TARGET_FILE, real_models_dir, start_server  # noqa: E402
from realtarget import load_target, near_tie, prompts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=real_models_dir(), help="directory of the real GGUF files ($DRAFTD_REAL_MODELS)")
    ap.add_argument("--draftd", type=Path, help="draftd binary (default: go build the repository's)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--draft-len", type=int, default=8)
    ap.add_argument("--strategies", default="model,lookup,hybrid,pld")
    ap.add_argument("--baseline-threads", type=int, default=2, help="torch threads of the target alone")
    ap.add_argument("--torch-threads", type=int, default=1, help="torch threads of the target beside draftd")
    ap.add_argument("--draftd-threads", type=int, default=1, help="draftd serve --threads")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    a = ap.parse_args()

    binary = a.draftd
    if binary is None:
        binary = Path("/tmp") / f"draftd-speedup-{os.getpid()}"
        go = shutil.which("go") or "/usr/local/go/bin/go"
        subprocess.run([go, "build", "-o", str(binary), "./cmd/draftd"], cwd=REPO, check=True,
                       env=dict(os.environ, CGO_ENABLED="0"))
    strategies = a.strategies.split(",")
    model, tok = load_target(a.models / TARGET_FILE)
    ps = prompts(tok, a.prompts)
    srv = start_server(binary, a.models / DRAFTER_FILE, "--threads", str(a.draftd_threads),
                       "--kv-cache-bytes", str(1 << 30))
    rows: dict[str, dict[str, float]] = {}

    def add(name: str, tokens: int, secs: float, steps: int = 0, equal: bool = True) -> None:
        r = rows.setdefault(name, {"tokens": 0, "seconds": 0.0, "steps": 0, "equal": 0, "runs": 0})
        r["tokens"] += tokens
        r["seconds"] += secs
        r["steps"] += steps
        r["equal"] += int(equal)
        r["runs"] += 1

    try:
        with draftd.Client(srv.url) as c:
            info = c.wait_ready(300) and c.info()
            # Warm-up: one short generate each way, not counted.
            ids0 = torch.tensor([ps[0][1]])
            model.generate(ids0, max_new_tokens=4, do_sample=False)
            assisted_generate(model, ps[0][1], c, a.draft_len, max_new_tokens=4)
            for sid, ids in ps:
                x = torch.tensor([ids])
                for threads in sorted({a.baseline_threads, a.torch_threads}, reverse=True):
                    torch.set_num_threads(threads)
                    t0 = time.perf_counter()
                    plain = model.generate(x, max_new_tokens=a.new_tokens, do_sample=False,
                                           return_dict_in_generate=True, output_scores=True)
                    dt = time.perf_counter() - t0
                    n = plain.sequences.shape[1] - len(ids)
                    add(f"alone/{threads}", n, dt, steps=n)
                    if threads == a.baseline_threads:
                        ref = plain
                torch.set_num_threads(a.torch_threads)
                for s in strategies:
                    t0 = time.perf_counter()
                    out, st = assisted_generate(model, ids, c, a.draft_len, strategy=s, max_new_tokens=a.new_tokens,
                                                return_dict_in_generate=True, output_scores=True)
                    dt = time.perf_counter() - t0
                    ok, why = near_tie(ref, out, len(ids))
                    add(s, st.tokens, dt, steps=st.steps, equal=why == "equal")
                    print(f"{sid} {s}: {st.tokens} tokens in {st.steps} steps, {st.tokens / dt:.2f} tok/s, {why}", file=sys.stderr)
    finally:
        srv.stop()

    base = rows[f"alone/{a.baseline_threads}"]
    base_tps = base["tokens"] / base["seconds"]
    print(f"| variant | threads (target + draftd) | target tokens/s | speed-up vs alone/{a.baseline_threads} | τ | outputs equal to greedy |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        tps = r["tokens"] / r["seconds"]
        r["tokens_per_s"] = tps
        r["tau"] = r["tokens"] / r["steps"]
        threads = f"{name.split('/')[1]} + 0" if name.startswith("alone/") else f"{a.torch_threads} + {a.draftd_threads}"
        label = "target alone" if name.startswith("alone/") else f"draftd {name}, n={a.draft_len}"
        print(f"| {label} | {threads} | {tps:.2f} | {tps / base_tps:.2f}× | {r['tau']:.2f} | {r['equal']}/{r['runs']} |")
    if a.out:
        a.out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "prompts": a.prompts, "new_tokens": a.new_tokens, "draft_len": a.draft_len,
            "baseline_threads": a.baseline_threads, "torch_threads": a.torch_threads, "draftd_threads": a.draftd_threads,
            "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "draftd": info.version if info else None, "rows": rows,
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
