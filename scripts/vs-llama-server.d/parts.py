"""The Python parts of scripts/vs-llama-server (standard library only):

    python3 parts.py data OUT.jsonl SAMPLES PROMPT_LEN CONT_LEN
        random prompts and continuations of token ids (a fixed seed; ids
        below 151643, no special tokens): τ ≈ 1, serving cost only
    python3 parts.py bench LLAMA_BENCH.json
        "PP TG" from llama-bench's JSON (pp512 and tg64, spaces as _)
    python3 parts.py table DRAFTD_EVAL.json LLAMA_EVAL.json D_HEALTHY L_HEALTHY D_RSS L_RSS PP TG MODEL DATA THREADS CONC N
        the markdown table
"""

from __future__ import annotations

import json
import os
import platform
import random
import sys
from typing import Any


def data(path: str, samples: str, plen: str, clen: str) -> None:
    r = random.Random(14)
    with open(path, "w") as f:
        for i in range(int(samples)):
            ids = [r.randrange(151643) for _ in range(int(plen) + int(clen))]
            f.write(json.dumps({"id": f"s{i:03d}", "prompt": ids[:int(plen)], "continuation": ids[int(plen):]}) + "\n")


def bench(path: str) -> None:
    with open(path) as f:
        rows = json.load(f)

    def get(p: int, g: int) -> str:
        return next((f"{r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} tok/s" for r in rows
                     if r["n_prompt"] == p and r["n_gen"] == g), "—")

    print(get(512, 0).replace(" ", "_"), get(0, 64).replace(" ", "_"))


def fails(r: dict[str, Any]) -> str:
    s = f"{r['failures']} of {r['requests']}"
    if r.get("peer_failures"):
        s += f" ({r['peer_failures']} the peer's own: " + "; ".join(
            f"{k} ×{v}" for k, v in r["peer_failure_reasons"].items()) + ")"
    return s


def lat(r: dict[str, Any]) -> str:
    m = r["latency_ms"]
    return f"{m['p50']:.0f} / {m['p90']:.0f} / {m['p99']:.0f} ms"


def table(dpath: str, lpath: str, dh: str, lh: str, drss: str, lrss: str, pp: str, tg: str, model: str,
          dataset: str, threads: str, conc: str, n: str) -> None:
    with open(dpath) as f:
        d = json.load(f)
    with open(lpath) as f:
        ll = json.load(f)
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.machine())
    print(f"Model `{os.path.basename(model)}`, dataset `{os.path.basename(dataset)}` ({d['samples']} samples, "
          f"{d['tokens']} continuation tokens), n={n}, concurrency {conc}, {threads} threads; {cpu}, "
          f"{os.cpu_count()} CPUs.\n")
    print("| measurement | draftd | llama.cpp |")
    print("|---|---|---|")
    print(f"| time to healthy | {dh} s | {lh} s |")
    print(f"| replay wall time | {d['wall_s']:.1f} s | {ll['wall_s']:.1f} s |")
    print(f"| draft tokens/s | {d['draft_tokens_per_s']:.1f} | {ll['draft_tokens_per_s']:.1f} |")
    print(f"| τ | {d['tau']:.3f} | {ll['tau']:.3f} |")
    print(f"| failures | {fails(d)} | {fails(ll)} |")
    print(f"| latency p50 / p90 / p99 | {lat(d)} | {lat(ll)} |")
    print(f"| peak RSS | {drss} | {lrss} |")
    print(f"| llama-bench pp512 / tg64 | — | {pp} / {tg} |")


if __name__ == "__main__":
    cmds = {"data": (data, 4), "bench": (bench, 1), "table": (table, 13)}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds or len(sys.argv) - 2 != cmds[sys.argv[1]][1]:
        sys.exit(__doc__)
    cmds[sys.argv[1]][0](*sys.argv[2:])
