"""Markdown tables from `draftd eval --json` reports (scripts/realtau eval, sweep).

Half A is the even-indexed samples of the dataset (the decision half of the
sweep), half B the odd-indexed ones (held out); each source (go, python, chat,
prose) is split evenly between them. τ of a subset = Σ tokens / Σ steps over
its samples (from the report's per_sample), as τ (micro) is for the whole set.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any


def sub_tau(rep: dict[str, Any], keep: set[str]) -> float:
    rows = [r for r in rep["per_sample"] if r["id"] in keep]
    steps = sum(r["steps"] for r in rows)
    return sum(r["tokens"] for r in rows) / steps if steps else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", type=Path, required=True)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("reports", nargs="+", type=Path)
    args = ap.parse_args()
    man = json.loads(args.manifest.read_text())
    ids = [s["id"] for s in man["samples"]]
    half_a = set(ids[0::2])
    half_b = set(ids[1::2])
    sources = sorted({s["source"] for s in man["samples"]}, key=["go", "python", "chat", "prose"].index)
    by_source = {src: {s["id"] for s in man["samples"] if s["source"] == src} for src in sources}
    reps = [(p.stem, json.loads(p.read_text())) for p in args.reports]

    if args.sweep:
        print("| configuration | τ half A (decides) | τ half B (held out) | τ all | τ macro | draft tok/s |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, r in reps:
            print(f"| {name.removeprefix('sweep-')} | {sub_tau(r, half_a):.3f} | {sub_tau(r, half_b):.3f} | "
                  f"{r['tau']:.3f} | {r['tau_macro']:.3f} | {r['draft_tokens_per_s']:.0f} |")
        return 0

    print("| strategy | n | τ (micro) | τ (macro) | τ half A / B | acceptance by position 1..n | draft tok/s | "
          "latency p50 / p90 / p99 ms | failures | wall s |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for name, r in reps:
        m = re.fullmatch(r"(.+)-n(\d+)", name)
        strat = m.group(1) if m else name
        pos = " ".join(f"{x:.2f}" for x in r["accept_by_position"])
        lat = r["latency_ms"]
        print(f"| {strat} | {r['n']} | {r['tau']:.3f} | {r['tau_macro']:.3f} | "
              f"{sub_tau(r, half_a):.2f} / {sub_tau(r, half_b):.2f} | {pos} | {r['draft_tokens_per_s']:.0f} | "
              f"{lat['p50']:.0f} / {lat['p90']:.0f} / {lat['p99']:.0f} | {r['failures']} | {r['wall_s']:.0f} |")
    print()
    print("| strategy | n | " + " | ".join(f"τ {s}" for s in sources) + " |")
    print("|---|---:|" + "---:|" * len(sources))
    for name, r in reps:
        m = re.fullmatch(r"(.+)-n(\d+)", name)
        strat = m.group(1) if m else name
        print(f"| {strat} | {r['n']} | " + " | ".join(f"{sub_tau(r, by_source[s]):.3f}" for s in sources) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
