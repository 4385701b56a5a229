#!/usr/bin/env python3
"""How far llama.cpp's logits move with the shape of the pass: the real
1.5B Q4_K_M target (llama-cpp-python) decodes --tokens greedy tokens after
each prompt one token at a time (the reference), then the same tokens are
evaluated as a verification pass would (the prompt once, then chunks of
--chunk positions), and each position's five best logits are compared
between the two. Prints the median / p99 / maximum of the largest logit
difference and of the change of the top-2 margin — the numbers behind
draftd._testing.neartie's "llama.cpp" gap (a flip needs both runs' margins
within the margin's move).

  ~/.cache/draftd/venv/bin/python clients/python/bench/llamacpp_batch_rounding.py

A measurement, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform

import numpy as np
from llama_cpp import Llama

from draftd._testing.realtarget import INSTRUCTIONS, PROSE
from draftd._testing.serve import TARGET_FILE, real_models_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(real_models_dir() / TARGET_FILE))
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--chunk", type=int, default=4, help="positions per verification pass (llama.cpp's n + 1)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    llm = Llama(model_path=os.path.expanduser(a.target), n_threads=a.threads, logits_all=True, n_ctx=1024,
                verbose=False)
    top_diff, margin_move = [], []
    for text in [PROSE[0], PROSE[1 % len(PROSE)], INSTRUCTIONS[0]]:
        prompt = llm.tokenize(text.encode(), add_bos=False)
        llm.reset()
        llm.eval(prompt)
        out: list[int] = []
        single = []
        for _ in range(a.tokens):
            row = np.array(llm._scores[llm.n_tokens - 1])
            single.append(row)
            out.append(int(row.argmax()))
            llm.eval([out[-1]])
        llm.reset()
        llm.eval(prompt)
        batched = [np.array(llm._scores[llm.n_tokens - 1])]
        i = 0
        while len(batched) < a.tokens:
            chunk = out[i:i + a.chunk]
            llm.eval(chunk)
            batched += [np.array(llm._scores[llm.n_tokens - len(chunk) + j]) for j in range(len(chunk))]
            i += a.chunk
        for s, b in zip(single, batched[: a.tokens]):
            top = np.argsort(-s)[:5]
            top_diff.append(float(np.abs(s[top] - b[top]).max()))
            margin_move.append(abs(float((s[top[0]] - s[top[1]]) - (b[top[0]] - b[top[1]]))))
    print(f"{platform.processor() or platform.machine()}; {len(top_diff)} positions, passes of {a.chunk} against one")
    for name, xs in (("largest top-5 logit difference", top_diff), ("top-2 margin move", margin_move)):
        v = np.array(xs)
        print(f"{name}: median {np.median(v):.3f}, p99 {np.quantile(v, 0.99):.3f}, max {v.max():.3f}")


if __name__ == "__main__":
    main()
