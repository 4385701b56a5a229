#!/usr/bin/python3
"""Writes small random HF model directories for self-testing the numpy reference.

Not the tiny models the Go tests use (the Go side generates those); these go to temp
directories and are never committed. Weight values are m * 2^e with |m| <= 255, so they
are exactly representable in BF16, F16 and F32 and every dtype/sharding of the same seed
must give bit-identical float64 logits.

Usage: make_selftest_model.py OUT_DIR [--arch qwen3|qwen2|llama] [--dtype F32|F16|BF16]
                              [--shards N] [--seed S]
"""
import json
import math
import os
import sys

sys.dont_write_bytecode = True  # keep testdata/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _npboot  # noqa: E402

_npboot.ensure_numpy()

import numpy as np  # noqa: E402

from hfmodel import Config, expected_shapes  # noqa: E402
from safetensors_np import write_safetensors  # noqa: E402

BASE = {
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512, "rope_theta": 1000000.0,
              "rms_norm_eps": 1e-06, "tie_word_embeddings": True, "attention_bias": False,
              "hidden_act": "silu", "max_position_embeddings": 4096, "rope_scaling": None,
              "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 512, "rope_theta": 1000000.0,
              "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "hidden_act": "silu",
              "max_position_embeddings": 4096, "rope_scaling": None, "use_sliding_window": False,
              "sliding_window": None, "max_window_layers": 2},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512, "rope_theta": 500000.0,
              "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "attention_bias": False,
              "mlp_bias": False, "hidden_act": "silu", "max_position_embeddings": 4096,
              "rope_scaling": None},
}


def quantize(x, std):
    """Round to m * 2^e, |m| <= 255, e chosen from std: exact in BF16/F16/F32."""
    e = math.floor(math.log2(std)) - 6
    m = np.clip(np.round(x / 2.0 ** e), -255, 255)
    return m * 2.0 ** e


def random_weights(config_dict, seed):
    c = Config(config_dict)
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in sorted(expected_shapes(c).items()):
        if name.endswith("norm.weight"):
            w = quantize(1.0 + 0.25 * rng.standard_normal(shape), 1.0)  # around 1, multiples of 2^-6
        elif name.endswith(".bias"):
            w = quantize(0.1 * rng.standard_normal(shape), 0.1)
        elif name == "model.embed_tokens.weight":
            w = quantize(0.1 * rng.standard_normal(shape), 0.1)  # small: layers, not the token itself, drive the logits
        else:
            std = shape[1] ** -0.5 * (2.0 if "lm_head" in name else 1.0)
            w = quantize(std * rng.standard_normal(shape), std)
        out[name] = w
    return out


def write_model(out_dir, arch="qwen3", dtype="F32", shards=1, seed=0, overrides=None, weights=None):
    """Write config.json + safetensors; return {name: float64 array} as written."""
    cfg = dict(BASE[arch])
    cfg.update(overrides or {})
    cfg["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
    if weights is None:
        weights = random_weights(cfg, seed)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    names = sorted(weights)
    if shards <= 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), {n: (dtype, weights[n]) for n in names})
        return weights
    weight_map = {}
    for s in range(shards):
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = names[s::shards]
        write_safetensors(os.path.join(out_dir, fname), {n: (dtype, weights[n]) for n in part})
        weight_map.update({n: fname for n in part})
    total = sum(w.size for w in weights.values()) * {"F32": 4, "F16": 2, "BF16": 2}[dtype]
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    return weights


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    opts = {"--arch": "qwen3", "--dtype": "F32", "--shards": "1", "--seed": "0"}
    rest = argv[1:]
    while rest:
        if rest[0] not in opts or len(rest) < 2:
            print(__doc__.strip(), file=sys.stderr)
            return 2
        opts[rest[0]] = rest[1]
        rest = rest[2:]
    write_model(argv[0], opts["--arch"], opts["--dtype"], int(opts["--shards"]), int(opts["--seed"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
