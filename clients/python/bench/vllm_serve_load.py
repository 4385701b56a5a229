#!/usr/bin/env python3
"""``vllm serve`` with draftd against ``vllm serve`` alone under load
(docs/serving.md, "`vllm serve` under load"): the documented command
(draftd._testing.vllmserve, the one the served test runs) on the target
(a Hugging Face directory ``draftd export`` wrote; bf16 where the CPU has
bf16 instructions, else float32), draftd serve on the real 0.5B drafter
GGUF, and at each concurrency c of --concurrency, c streaming completions
sent at once (draftd._testing.openai_stream): greedy, --new-tokens each,
prompts of real length — RAG-style chat prompts over this repository's
docs (~300 to ~1,900 tokens) alternating with short chat, code and prose
prompts (18 to ~520 tokens); each level its own prompts (no prefix cache
helps a later level), the same for both servers. Per level and server:
output tokens/s (all tokens over the level's wall time), time to first
token (mean, max), inter-token latency p50/p90 over every gap (tokens that
arrive in one chunk count 0: a draft's accepted tokens arrive together),
and whether each output equals the plain server's (draftd._testing.neartie
on the top-2 log-probabilities, the gap of the dtype).

  ~/.cache/draftd/venv/bin/python clients/python/bench/vllm_serve_load.py --out /tmp/vllm-load

The servers run one after the other (plain first), each started once for
all levels; the load (``uptime``) before and after is in the result, since
a shared machine's numbers are only comparable within one run. Needs
scripts/vllmenv, scripts/realmodels and ``scripts/hfexport --only
qwen2.5-coder-1.5b-instruct``. A measurement, not a test: nothing is
asserted. Writes OUT/result.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from draftd._testing.neartie import gap_for
from draftd._testing.openai_stream import Stream, complete
from draftd._testing.realtarget import prompts as real_prompts
from draftd._testing.realtarget import vllm_near_tie
from draftd._testing.serve import DRAFTER_FILE, REPO, build_draftd, real_model, start_server
from draftd._testing.vllmserve import VLLM, dtype, free_port, hf_dir, serve_argv

DOCS = ["protocol.md", "serving.md", "operations.md", "strategies.md", "evaluation.md", "deploying.md",
        "models.md", "performance.md"]
RAG_TOKENS = "1800,600,1200,300"  # document tokens of the long prompts, in turn


def level_prompts(tok: Any, level: int, count: int, rag: list[int]) -> dict[str, list[int]]:
    """count prompts for one level: long (RAG) and short in turn; every
    level's are different."""
    short = real_prompts(tok, 8)
    out: dict[str, list[int]] = {}
    for i in range(count):
        j = level * 16 + i
        if i % 2 == 0:
            doc = DOCS[j % len(DOCS)]
            ids = tok((REPO / "docs" / doc).read_text(), add_special_tokens=False)["input_ids"]
            n = rag[(i // 2) % len(rag)]
            start = (j * 397) % max(1, len(ids) - n)
            text = tok.apply_chat_template(
                [{"role": "system", "content": "Answer from this document:\n" + tok.decode(ids[start:start + n])},
                 {"role": "user", "content": "Summarize what this part of the document says, then list its "
                                             "commands and flags."}],
                tokenize=False, add_generation_prompt=True)
            out[f"L{level}-{i}-rag-{doc}"] = tok(text, add_special_tokens=False)["input_ids"]
        else:
            name, ids = short[(j // 2 + level) % len(short)]
            out[f"L{level}-{i}-{name}"] = ids
    return out


def run_level(url: str, bodies: dict[str, dict[str, Any]]) -> tuple[dict[str, Stream], float]:
    got: dict[str, Stream] = {}

    def one(k: str) -> None:
        got[k] = complete(url, bodies[k])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(k,)) for k in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got, time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(streams: dict[str, Stream], wall: float) -> dict[str, Any]:
    gaps = [g for s in streams.values() for g in s.itl()]
    ttft = [s.ttft for s in streams.values() if s.times] or [float("nan")]
    tokens = sum(len(s.tokens) for s in streams.values())
    return {"wall_s": wall, "tokens": tokens, "tok_s": tokens / wall, "ttft_mean_s": statistics.fmean(ttft),
            "ttft_max_s": max(ttft), "itl_p50_s": pct(gaps, 0.5), "itl_p90_s": pct(gaps, 0.9),
            "errors": {k: s.error for k, s in streams.items() if s.error}}


def as_run(streams: dict[str, Stream]) -> dict[str, Any]:
    return {"outputs": {k: s.tokens for k, s in streams.items()},
            "logprobs": {k: [[[t, lp] for t, lp in top] for top in s.top] for k, s in streams.items()}}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def serve_levels(name: str, argv: tuple[dict[str, str], list[str]], out: Path,
                 levels: dict[int, dict[str, dict[str, Any]]]) -> dict[int, tuple[dict[str, Stream], float]]:
    srv = VLLM(*argv, out / f"{name}.log")
    try:
        t0 = time.perf_counter()
        srv.wait_ready()
        print(f"{name}: ready in {time.perf_counter() - t0:.0f} s ({uptime()})", file=sys.stderr)
        res = {}
        for c, bodies in levels.items():
            res[c] = run_level(srv.url, bodies)
            print(f"{name} c={c}: {summary(*res[c])}", file=sys.stderr)
        return res
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b-instruct", help="a directory of scripts/hfexport")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--draftd-threads", type=int, default=1)
    ap.add_argument("--strategy", default="model", help="draftd's strategy (additional_config)")
    ap.add_argument("--adaptive", action="store_true", help="the proposer's adaptive draft length")
    ap.add_argument("--rag-tokens", default=RAG_TOKENS,
                    help="document tokens of the long prompts, in turn (the chat template and question add ~50)")
    ap.add_argument("--kv-bytes", default=None, help="--kv-cache-memory-bytes (default: the page's)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    from transformers import AutoTokenizer

    model = hf_dir(a.target)
    tok = AutoTokenizer.from_pretrained(str(model))
    rag = [int(x) for x in a.rag_tokens.split(",")]
    levels = {}
    for c in (int(x) for x in a.concurrency.split(",")):
        levels[c] = {k: {"model": str(model), "prompt": p, "max_tokens": a.new_tokens, "temperature": 0, "logprobs": 2,
                         "ignore_eos": True, "return_tokens_as_token_ids": True}
                     for k, p in level_prompts(tok, c, c, rag).items()}
    load = [uptime()]
    plain = serve_levels("plain", serve_argv(model, free_port(), None, kv_bytes=a.kv_bytes), a.out, levels)
    load.append(uptime())
    binary = build_draftd(a.out / "draftd")
    d = start_server(binary, real_model(DRAFTER_FILE), "--threads", str(a.draftd_threads))
    try:
        d.wait_healthy()
        cfg: dict[str, object] = {"strategy": a.strategy, "timeout": 30}
        if a.adaptive:
            cfg["adaptive"] = True
        withd = serve_levels("draftd", serve_argv(model, free_port(), d.url, kv_bytes=a.kv_bytes, draftd=cfg),
                             a.out, levels)
    finally:
        d.stop()
    load.append(uptime())
    gap = gap_for(dtype())
    rows = []
    for c, bodies in levels.items():
        sp, sd = summary(*plain[c]), summary(*withd[c])
        equal = [vllm_near_tie(as_run(plain[c][0]), as_run(withd[c][0]), k, gap)[0] for k in bodies]
        rows.append({"c": c, "prompt_tokens": [len(b["prompt"]) for b in bodies.values()], "plain": sp, "draftd": sd,
                     "equal": sum(equal), "of": len(equal)})
    result = {"target": a.target, "rag_tokens": rag, "dtype": dtype(), "new_tokens": a.new_tokens, "strategy": a.strategy,
              "adaptive": a.adaptive, "draftd_threads": a.draftd_threads, "load": load,
              "cpu": next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                           if ln.startswith("model name")), "?"), "nproc": os.cpu_count(), "rows": rows}
    (a.out / "result.json").write_text(json.dumps(result, indent=1))
    print("| c | prompt tokens | server | output tok/s | TTFT mean / max (s) | ITL p50 / p90 (ms) | outputs equal |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        for name in ("plain", "draftd"):
            s = r[name]
            print(f"| {r['c']} | {min(r['prompt_tokens'])}–{max(r['prompt_tokens'])} | {name} | {s['tok_s']:.2f} | "
                  f"{s['ttft_mean_s']:.1f} / {s['ttft_max_s']:.1f} | {s['itl_p50_s'] * 1e3:.0f} / {s['itl_p90_s'] * 1e3:.0f} | "
                  + (f"{r['equal']}/{r['of']} |" if name == "draftd" else "— |"))
    print("load:", *load, sep="\n  ")


if __name__ == "__main__":
    main()
