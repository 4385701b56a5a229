"""Confidence-bounded drafts on the real pair (issue 39): the tables of
docs/performance.md, from what `draftd eval` writes. Standard library only.

  tables.py calibration ROWS.jsonl
      ROWS: `draftd eval --confidences-out` (one JSON line per draft token:
      sample, step, position, confidence, accepted) of an unbounded replay.
      Prints, for each signal (top-1 probability of the token; the running
      product of the top-1 probabilities up to it), the acceptance of a
      token given that every token before it was accepted — what a stop rule
      decides on — by signal bucket × position bucket, and a what-if of the
      rule "stop before the first token whose signal is below t" replayed on
      the same steps (each step's accepted length becomes min(accepted, stop);
      the later steps' contexts would differ in a real run, which
      `tables.py measured` measures).
  tables.py measured REPORT.json...
      REPORT: `draftd eval --json` reports. Prints n, bound, τ, drafted tokens
      per accepted token, draft ms per accepted token, p50 latency.
  tables.py variants LABEL=REPORT.json...
      one row per label × n × bound × concurrency: τ, drafted tokens per
      accepted token, draft ms per accepted token and p50 latency, each the
      range over the repeated reports of that row (τ differs between repeats
      only if a request failed or timed out; the table says so).

Not a measurement itself; not run by the tests.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

CONF_EDGES = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0000001]
POS_BUCKETS = [(1, 1), (2, 4), (5, 8), (9, 16), (17, 64)]
THRESHOLDS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]


def bucket(edges: list[float], v: float) -> int:
    for i in range(len(edges) - 1):
        if edges[i] <= v < edges[i + 1]:
            return i
    return len(edges) - 2


def pos_bucket(p1: int) -> int:
    for i, (lo, hi) in enumerate(POS_BUCKETS):
        if lo <= p1 <= hi:
            return i
    return len(POS_BUCKETS) - 1


def load_steps(path: str) -> list[list[dict]]:
    steps: dict[tuple[str, int], list[dict]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            steps[(r["sample"], r["step"])].append(r)
    out = []
    for k in sorted(steps):
        rows = sorted(steps[k], key=lambda r: r["position"])
        prod = 1.0
        for r in rows:
            prod *= r["confidence"]
            r["cumprod"] = prod
        out.append(rows)
    return out


def calibration(path: str) -> None:
    steps = load_steps(path)
    rows = sum(len(s) for s in steps)
    print(f"{len(steps)} steps, {rows} draft tokens, {sum(r['accepted'] for s in steps for r in s)} accepted\n")
    for signal, name in (("confidence", "top-1 probability"), ("cumprod", "product of the top-1 probabilities so far")):
        # a token counts when every token before it was accepted
        cnt = defaultdict(lambda: [0, 0])
        for s in steps:
            for r in s:
                if r["position"] > 0 and not s[r["position"] - 1]["accepted"]:
                    break
                c = cnt[(bucket(CONF_EDGES, r[signal]), pos_bucket(r["position"] + 1))]
                c[0] += 1
                c[1] += r["accepted"]
        used = sorted({p for (_, p) in cnt})
        print(f"Acceptance given the tokens before it accepted, by {name} × draft position (accepted / reached):\n")
        head = "| " + name + " | " + " | ".join(f"pos {POS_BUCKETS[p][0]}" + (f"–{POS_BUCKETS[p][1]}" if POS_BUCKETS[p][1] != POS_BUCKETS[p][0] else "") for p in used) + " | all |"
        print(head)
        print("|---|" + "---:|" * (len(used) + 1))
        for b in range(len(CONF_EDGES) - 1):
            hi = min(CONF_EDGES[b + 1], 1.0)
            cells = []
            tot = [0, 0]
            for p in used:
                n, a = cnt.get((b, p), [0, 0])
                tot[0] += n
                tot[1] += a
                cells.append(f"{a / n:.2f} ({n})" if n else "–")
            if tot[0] == 0:
                continue
            print(f"| [{CONF_EDGES[b]:.2f}, {hi:.2f}{']' if hi == 1.0 else ')'} | " + " | ".join(cells) + f" | {tot[1] / tot[0]:.2f} ({tot[0]}) |")
        print()
        print(f"What-if on these steps: stop before the first token whose {name} is below t:\n")
        print("| t | accepted kept | drafted | drafted per accepted | τ (same steps) |")
        print("|---:|---:|---:|---:|---:|")
        nsteps = len(steps)
        for t in THRESHOLDS:
            acc = drafted = 0
            for s in steps:
                stop = len(s)
                for r in s:
                    if r[signal] < t:
                        stop = r["position"]
                        break
                a = sum(1 for r in s if r["accepted"])
                acc += min(a, stop)
                drafted += stop
            print(f"| {t:.1f} | {acc} | {drafted} | {drafted / max(acc, 1):.2f} | {1 + acc / nsteps:.3f} |")
        print()


def measured(paths: list[str]) -> None:
    print("| n | min_confidence | τ | drafted per accepted | draft ms per accepted | p50 ms | requests |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for p in paths:
        r = json.load(open(p))
        print(f"| {r['n']} | {r.get('min_confidence', 0):g} | {r['tau']:.3f} | {r['drafted_per_accepted']:.2f} | "
              f"{r['draft_ms_per_accepted']:.1f} | {r['latency_ms']['p50']:.1f} | {r['requests']} |")


def span(xs: list[float], fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}–{format(hi, fmt)}"


def variants(args: list[str]) -> None:
    rows: dict[tuple[str, int, float, int], list[dict]] = defaultdict(list)
    for a in args:
        label, _, path = a.partition("=")
        r = json.load(open(path))
        rows[(label, r["n"], r.get("min_confidence", 0), r["concurrency"])].append(r)
    print("| variant | n | bound | concurrency | τ | drafted per accepted | draft ms per accepted | p50 ms | runs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (label, n, b, c), rs in rows.items():
        print(f"| {label} | {n} | {b:g} | {c} | {span([r['tau'] for r in rs], '.3f')} | "
              f"{span([r['drafted_per_accepted'] for r in rs], '.2f')} | "
              f"{span([r['draft_ms_per_accepted'] for r in rs], '.1f')} | "
              f"{span([r['latency_ms']['p50'] for r in rs], '.1f')} | {len(rs)} |")


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("calibration", "measured", "variants"):
        sys.exit(__doc__)
    if sys.argv[1] == "calibration":
        calibration(sys.argv[2])
    elif sys.argv[1] == "variants":
        variants(sys.argv[2:])
    else:
        measured(sys.argv[2:])


if __name__ == "__main__":
    main()
