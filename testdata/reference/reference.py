#!/usr/bin/python3
"""draftd fidelity reference: float64 numpy logits and greedy tokens for a HF model dir.

Usage:
  reference.py MODEL_DIR                 JSON for one model on stdout
  reference.py --all MODELS_DIR OUT_DIR  OUT_DIR/<name>.json for every MODELS_DIR/<name>/config.json

Fixed built-in cases: prompts of length 1, 5 and 19 from a pure-python LCG over vocab_size,
each followed by 24 greedy tokens (argmax ties -> lowest id). Output floats use "%.6e"
(7 significant digits) so the file is byte-reproducible. This is a test oracle, not a
server: it knows nothing about tokenizers, sampling or GGUF.
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # keep testdata/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _npboot  # noqa: E402

_npboot.ensure_numpy()

import numpy as np  # noqa: E402

from hfmodel import KVCache, Model, Unsupported  # noqa: E402
from safetensors_np import SafetensorsError  # noqa: E402

PROMPT_LENGTHS = (1, 5, 19)
GREEDY_STEPS = 24


def make_prompt(vocab, length, seed):
    """Deterministic token ids from a 64-bit LCG (Knuth MMIX constants); no numpy RNG."""
    s = (seed * 0x9E3779B97F4A7C15 + 1) % 2**64
    out = []
    for _ in range(length):
        s = (s * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append((s >> 33) % vocab)
    return out


def prompts(vocab):
    return [make_prompt(vocab, n, seed=n) for n in PROMPT_LENGTHS]


def argmax_margin(logits):
    """(lowest id among the maxima, top1 - top2); top2 counts ties, so a tie gives 0."""
    i = int(np.argmax(logits))  # numpy returns the first maximal index
    rest = np.delete(logits, i)
    return i, float(logits[i] - rest.max()) if rest.size else float("inf")


def run_case(model, prompt, steps=GREEDY_STEPS):
    cache = KVCache(model.c.n_layers)
    logits = model.forward(prompt, cache)
    prompt_logits = logits
    last = logits[-1]
    greedy, margins = [], []
    for step in range(steps):
        tok, m = argmax_margin(last)
        greedy.append(tok)
        margins.append(m)
        if step + 1 < steps:
            last = model.forward([tok], cache)[-1]
    return {"prompt": list(prompt), "logits": prompt_logits, "greedy": greedy, "margins": margins}


def fmt(x):
    x = float(x)
    if not np.isfinite(x):
        raise ValueError("non-finite value %r in output" % x)
    return "%.6e" % x


def fmt_list(xs):
    return "[" + ",".join(fmt(x) for x in xs) + "]"


def case_json(case):
    return ('{"prompt":[%s],"logits":[%s],"greedy":[%s],"margins":%s}' % (
        ",".join(str(int(i)) for i in case["prompt"]),
        ",".join(fmt_list(row) for row in case["logits"]),
        ",".join(str(int(i)) for i in case["greedy"]),
        fmt_list(case["margins"])))


def reference_json(model_dir):
    """Exact cases; plus "cases_q8act" (activations rounded before every linear
    layer as llama.cpp computes with quantized weights: Q8_0 blocks for Q8_0/Q4_0/Q5_0,
    Q8_1 for Q4_1/Q5_1, Q8_K for K-quants) when config.json says the model's GGUF copy
    is quantized ("draftd_gguf_type"). With "draftd_gguf_file" the weights are read
    from that GGUF file and decoded by gguf_np."""
    model = Model.load(model_dir)
    name = os.path.basename(os.path.normpath(model_dir))
    cases = [case_json(run_case(model, p)) for p in prompts(model.c.vocab)]
    # JSON, one case per line for readable diffs
    out = '{"model":%s,"cases":[\n%s\n]' % (json.dumps(name), ",\n".join(cases))
    with open(os.path.join(model_dir, "config.json")) as f:
        gguf_type = json.load(f).get("draftd_gguf_type", "")
    if gguf_type not in ("", "f32", "f16", "bf16"):  # Q8_0, Q4_0, K-quant types and mixes
        qmodel = Model.load(model_dir, act_quant=True)
        qcases = [case_json(run_case(qmodel, p)) for p in prompts(model.c.vocab)]
        out += ',"cases_q8act":[\n%s\n]' % ",\n".join(qcases)
    return out + "}\n"


def run_all(models_dir, out_dir):
    """Write OUT_DIR/<name>.json for each MODELS_DIR/<name>/config.json; skip Unsupported ones."""
    if not os.path.isdir(models_dir):
        print("reference: %s is not a directory" % models_dir, file=sys.stderr)
        return 1
    names = sorted(n for n in os.listdir(models_dir)
                   if os.path.isfile(os.path.join(models_dir, n, "config.json")))
    if not names:
        print("reference: no model directories with config.json under %s" % models_dir, file=sys.stderr)
        return 1
    for n in names:
        try:
            text = reference_json(os.path.join(models_dir, n))
        except Unsupported as e:  # e.g. a deliberately unsupported model for an error-path test
            print("reference: skip %s: unsupported: %s" % (n, e), file=sys.stderr)
            continue
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, n + ".json")
        with open(path, "w", newline="\n") as f:
            f.write(text)
        print("reference: wrote %s" % path, file=sys.stderr)
    return 0


def main(argv):
    if len(argv) == 3 and argv[0] == "--all":
        return run_all(argv[1], argv[2])
    if len(argv) == 1 and not argv[0].startswith("-"):
        try:
            sys.stdout.write(reference_json(argv[0]))
        except (Unsupported, SafetensorsError, OSError) as e:
            print("reference: %s: %s" % (argv[0], e), file=sys.stderr)
            return 1
        return 0
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
