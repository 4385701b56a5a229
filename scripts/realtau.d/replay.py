"""The replay of docs/evaluation.md (the definition of τ) written again, apart from `draftd eval`: one sample
at a time, POST /draft over the standard library's HTTP client, τ counted
here. `scripts/realtau check` compares its per-sample steps and accepted
histogram with `draftd eval --json` against the same server; any difference is
a bug in one of the two replays or a draft that depends on concurrency.

    python3 replay.py --url http://127.0.0.1:PORT --data D.jsonl --n 8 --limit 4 [--strategy S] --out R.json
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any


def draft(url: str, tokens: list[int], n: int, strategy: str | None, timeout: float) -> list[int]:
    body: dict[str, Any] = {"tokens": tokens, "n": n}
    if strategy:
        body["strategy"] = strategy
    req = urllib.request.Request(url + "/draft", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        out = json.loads(resp.read())
    d = out["draft"]
    if not isinstance(d, list) or len(d) > n:
        raise ValueError(f"bad draft {d!r}")
    return [int(t) for t in d]


def replay(url: str, prompt: list[int], cont: list[int], n: int, strategy: str | None, timeout: float) -> tuple[int, list[int]]:
    """Steps and the accepted length of every step."""
    p = 0
    accepted: list[int] = []
    while p < len(cont):
        d = draft(url, prompt + cont[:p], n, strategy, timeout)
        a = 0
        while a < len(d) and p + a < len(cont) and d[a] == cont[p + a]:
            a += 1
        accepted.append(a)
        p += a + 1
    return len(accepted), accepted


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--strategy", default=None)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    lines = [json.loads(l) for l in args.data.read_text().splitlines() if l.strip()]
    if args.limit:
        lines = lines[: args.limit]
    per_sample = []
    hist = [0] * (args.n + 1)
    tokens = steps = 0
    for s in lines:
        st, acc = replay(args.url.rstrip("/"), s["prompt"], s["continuation"], args.n, args.strategy, args.timeout)
        for a in acc:
            hist[a] += 1
        tokens += len(s["continuation"])
        steps += st
        per_sample.append({"id": s["id"], "tokens": len(s["continuation"]), "steps": st})
    report = {"tau": tokens / steps, "tokens": tokens, "steps": steps, "accept_hist": hist, "per_sample": per_sample}
    args.out.write_text(json.dumps(report) + "\n")
    print(f"replay.py: {len(lines)} samples, τ {report['tau']:.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
