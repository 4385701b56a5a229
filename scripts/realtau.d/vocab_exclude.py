"""The ids `draftd vocab --exclude` leaves out of the ranking for `scripts/realtau
vocab`: the ranking must not have seen the text it is measured on, so the go and
prose samples' source files (the manifest names them) go, as "go/REL" and
"prose/REL" ids (python and chat prompts are not in its corpora).

    python3 vocab_exclude.py MANIFEST.json GOROOT/src OUT.jsonl
"""

from __future__ import annotations

import json
import os
import sys


def main(manifest: str, goroot_src: str, dst: str) -> None:
    with open(manifest) as f:
        man = json.load(f)
    ids = []
    for s in man["samples"]:
        if s["source"] == "go":
            ids.append("go/" + os.path.relpath(s["file"], goroot_src))
        elif s["source"] == "prose":
            ids.append(s["draftd_dataset_id"])
    with open(dst, "w") as f:
        f.writelines(json.dumps({"id": i}) + "\n" for i in ids)
    print(f"realtau: {len(ids)} source files left out of the ranking", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
