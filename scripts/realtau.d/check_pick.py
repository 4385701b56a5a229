"""`scripts/realtau check`'s sample: the first sample of each source of a
real-τ dataset, each checked for a prompt and 128 continuation tokens.

    python3 check_pick.py DATASET.jsonl OUT.jsonl
"""

from __future__ import annotations

import json
import sys


def main(src: str, dst: str) -> None:
    seen: set[str] = set()
    rows = []
    with open(src) as f:
        for line in f:
            s = json.loads(line)
            source = s["id"].rsplit("-", 1)[0]
            if source not in seen:
                seen.add(source)
                rows.append(line)
            if len(s["continuation"]) < 128 or not s["prompt"]:
                sys.exit(f"check: sample {s['id']}: {len(s['continuation'])} continuation tokens, "
                         f"{len(s['prompt'])} prompt tokens")
    with open(dst, "w") as f:
        f.writelines(rows)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
