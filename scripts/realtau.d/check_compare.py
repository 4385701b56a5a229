"""`scripts/realtau check`'s verdict: `draftd eval --json` and replay.py's
report of the same samples against the same server must agree on every
sample's (tokens, steps) and on the accepted-length histogram, with no
failed request. Exits 1 naming each difference.

    python3 check_compare.py STRATEGY EVAL.json REPLAY.json
"""

from __future__ import annotations

import json
import sys


def main(name: str, eval_path: str, replay_path: str) -> int:
    with open(eval_path) as f:
        ev = json.load(f)
    with open(replay_path) as f:
        py = json.load(f)
    es = {r["id"]: (r["tokens"], r["steps"]) for r in ev["per_sample"]}
    ps = {r["id"]: (r["tokens"], r["steps"]) for r in py["per_sample"]}
    bad = [f"{k}: draftd eval (tokens, steps) {es.get(k)}, Python replay {v}" for k, v in ps.items() if es.get(k) != v]
    if ev["failures"]:
        bad.append(f"draftd eval had {ev['failures']} failed requests: {ev.get('first_error')}")
    if ev["accept_hist"] != py["accept_hist"]:
        bad.append(f"accepted-length histogram: draftd eval {ev['accept_hist']}, Python replay {py['accept_hist']}")
    if bad:
        print(f"realtau check {name}: FAIL\n  " + "\n  ".join(bad))
        return 1
    print(f"realtau check {name}: {len(ps)} samples, τ {ev['tau']:.3f} in both replays (steps {ev['steps']})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
