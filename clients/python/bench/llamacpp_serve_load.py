#!/usr/bin/env python3
"""The llama.cpp server with draftd against the same server alone, under
load (docs/serving.md, llama.cpp): ``python -m draftd.llamacpp_server`` as
the page starts it (draftd._testing.llamacpp_serve), the real
Qwen2.5-Coder-1.5B-Instruct Q4_K_M target, the real 0.5B in ``draftd
serve`` for the draftd rows; streamed greedy completions, ``--requests``
of each workload at concurrency 1 (one after another) and at each other
``--concurrency`` (that many in flight):

  short   code, chat-templated instructions and prose (a few dozen tokens)
  long    RAG-style prompts over this repository's docs, of about
          ``--long-tokens`` tokens each (512 to 2,000 by default)

Per row: output tokens/s (all output tokens over the row's wall time),
time to first token (mean and p50; at concurrency > 1 it includes the wait
behind the requests served first: llama-cpp-python serves one request at a
time), p50/p90 inter-token latency (every gap between two streamed tokens),
and how many outputs equal the server alone at concurrency 1 (near-tie rule
on the top-2 log-probabilities every request asks for). The load average
is recorded before and after every row: the numbers mean little on a busy
machine.

  ~/.cache/draftd/venv/bin/python clients/python/bench/llamacpp_serve_load.py --out /tmp/lserve-load

Each server is started once (alone first, then with draftd); every row's
JSON and the table (table.md) are written to --out. A measurement, not a
test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from draftd._testing import metrics as prom
from draftd._testing.llamacpp_serve import LlamaServer, Requests, near_tie, send
from draftd._testing.openai_stream import Stream
from draftd._testing.realtarget import INSTRUCTIONS, PROSE, chat_text
from draftd._testing.serve import DRAFTER_FILE, REPO, TARGET_FILE, build_draftd, real_models_dir, start_server

DOCS = ["protocol.md", "serving.md", "operations.md", "evaluation.md", "deploying.md", "performance.md"]
CHARS_PER_TOKEN = 3.6  # English prose and markdown in Qwen2.5's tokenizer, about


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def workloads(n: int, long_tokens: list[int], new: int) -> dict[str, Requests]:
    """{workload: requests}: n short and n long completions, greedy, top-2
    log-probabilities, ``new`` tokens each."""
    code = (REPO / "testdata/reference/quantize_ref.py").read_text().splitlines()
    short = [
        "\n".join(code[27:41]) + "\n",
        chat_text(INSTRUCTIONS[0]),
        PROSE[0],
        chat_text(INSTRUCTIONS[1 % len(INSTRUCTIONS)]),
        PROSE[1 % len(PROSE)],
        "\n".join(code[60:80]) + "\n",
    ]
    questions = ["Summarize this document in five bullet points.",
                 "List every error code this document names, with what it means.",
                 "Which command-line flags does this document name? Give each with its effect.",
                 "Write a short FAQ (three questions and answers) from this document."]
    long = []
    for i in range(n):
        doc = (REPO / "docs" / DOCS[i % len(DOCS)]).read_text()
        chars = int(long_tokens[i % len(long_tokens)] * CHARS_PER_TOKEN)
        long.append("<|im_start|>system\nAnswer from this document:\n" + doc[:chars] + "<|im_end|>\n<|im_start|>user\n"
                    + questions[i % len(questions)] + "<|im_end|>\n<|im_start|>assistant\n")

    def body(p: str) -> tuple[str, dict[str, Any]]:
        return "/v1/completions", {"prompt": p, "max_tokens": new, "temperature": 0, "logprobs": 2, "seed": 0}

    return {"short": {f"short-{i}": body(short[i % len(short)]) for i in range(n)},
            "long": {f"long-{i}": body(long[i]) for i in range(n)}}


def prompt_tokens(url: str, reqs: Requests) -> dict[str, int]:
    """Each prompt's length in the target's tokens (the server's
    /extras/tokenize/count)."""
    import httpx

    return {k: int(httpx.post(url + "/extras/tokenize/count", json={"input": b["prompt"]}, timeout=60).json()["count"])
            for k, (_, b) in reqs.items()}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def summarize(streams: dict[str, Stream], wall: float) -> dict[str, Any]:
    toks = sum(len(s.tokens) for s in streams.values())
    ttft = [s.ttft for s in streams.values() if s.times]
    itl = [g for s in streams.values() for g in s.itl()]
    return {"output_tokens": toks, "wall_s": wall, "tokens_per_s": toks / wall if wall > 0 else 0.0,
            "ttft_mean_s": statistics.fmean(ttft) if ttft else float("nan"), "ttft_p50_s": pct(ttft, 0.5),
            "itl_p50_ms": 1e3 * pct(itl, 0.5), "itl_p90_ms": 1e3 * pct(itl, 0.9),
            "errors": {k: s.error for k, s in streams.items() if s.error}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for each row's JSON and table.md")
    ap.add_argument("--requests", type=int, default=4, help="requests per workload (default 4)")
    ap.add_argument("--concurrency", default="1,4", help="comma-separated; 1 is always run first (default 1,4)")
    ap.add_argument("--new-tokens", type=int, default=64, help="output tokens per request (default 64)")
    ap.add_argument("--long-tokens", default="512,1000,1500,2000",
                    help="approximate prompt lengths of the long workload, in tokens (default 512,1000,1500,2000)")
    ap.add_argument("--workloads", default="short,long", help="short, long or both (default)")
    ap.add_argument("--draftd-threads", default="2", help="draftd serve --threads (default 2, as docs/serving.md)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    conc = sorted({1, *(int(c) for c in a.concurrency.split(","))})
    names = [w for w in a.workloads.split(",") if w]
    work = {k: v for k, v in workloads(a.requests, [int(x) for x in a.long_tokens.split(",")], a.new_tokens).items()
            if k in names}
    target = real_models_dir() / TARGET_FILE
    drafter = real_models_dir() / DRAFTER_FILE
    for f in (target, drafter):
        if not f.is_file():
            raise SystemExit(f"{f} is missing: run scripts/realmodels")
    env = {"cpu": cpu_model(), "nproc": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "target": target.name, "drafter": drafter.name, "load_start": loadavg()}
    print(json.dumps(env), flush=True)

    bin_ = build_draftd(a.out / "draftd")
    dsrv = start_server(bin_, drafter, "--threads", a.draftd_threads)
    dsrv.wait_healthy(600)
    rows: list[dict[str, Any]] = []
    ref: dict[str, dict[str, Stream]] = {}
    lengths: dict[str, dict[str, int]] = {}
    try:
        for kind in ("alone", "draftd"):
            srv = LlamaServer(target, dsrv.url if kind == "draftd" else None, a.out / f"server-{kind}.log",
                              ("--n_ctx", "4096"))
            try:
                srv.wait_ready(900)
                for w, reqs in work.items():
                    if w not in lengths:
                        lengths[w] = prompt_tokens(srv.url, reqs)
                    for c in conc:
                        before = prom.scrape(dsrv.url)
                        l0 = loadavg()
                        t0 = time.perf_counter()
                        got = send(srv.url, reqs, concurrency=c)
                        wall = max((s.times[-1] for s in got.values() if s.times), default=t0) - t0
                        after = prom.scrape(dsrv.url)
                        if kind == "alone" and c == 1:
                            ref[w] = got
                        same = [near_tie(ref[w][k], s)[0] for k, s in got.items()] if w in ref else []
                        row = {"server": kind, "workload": w, "concurrency": c, **summarize(got, wall),
                               "equal": f"{sum(same)}/{len(same)}", "prompt_tokens": lengths[w],
                               "draftd_requests": prom.value(after, "draftd_session_requests_total")
                               - prom.value(before, "draftd_session_requests_total"),
                               "draft_tokens": prom.value(after, "draftd_draft_tokens_served_total")
                               - prom.value(before, "draftd_draft_tokens_served_total"),
                               "load_before": l0, "load_after": loadavg()}
                        rows.append(row)
                        (a.out / f"{kind}-{w}-c{c}.json").write_text(json.dumps(
                            {**row, "outputs": {k: s.text for k, s in got.items()}}, indent=1))
                        print(json.dumps(row), flush=True)
            finally:
                srv.stop()
    finally:
        dsrv.stop()
    env["load_end"] = loadavg()
    table = render(env, rows)
    (a.out / "table.md").write_text(table)
    print(table)


def render(env: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    out = [f"{env['cpu']}, {env['nproc']} CPUs, {env['date']}; load average {env['load_start']} at the start, "
           f"{env['load_end']} at the end; target {env['target']}, drafter {env['drafter']}", "",
           "| workload (prompt tokens) | c | server | output tok/s | TTFT mean / p50 s | ITL p50 / p90 ms "
           "| = alone (c = 1) | load before → after |", "|---|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        pl = sorted(r["prompt_tokens"].values())
        out.append(f"| {r['workload']} ({pl[0]}–{pl[-1]}) | {r['concurrency']} | {r['server']} "
                   f"| {r['tokens_per_s']:.2f} | {r['ttft_mean_s']:.2f} / {r['ttft_p50_s']:.2f} "
                   f"| {r['itl_p50_ms']:.0f} / {r['itl_p90_ms']:.0f} | {r['equal']}"
                   f"{' (' + str(len(r['errors'])) + ' failed)' if r['errors'] else ''} "
                   f"| {r['load_before']} → {r['load_after']} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
