#!/usr/bin/python3
"""Self-tests for the draftd numpy reference (run: python3 testdata/reference/test_reference.py).

Checks the safetensors decoder against hand-made bit patterns, dtype/sharding invariance,
the vectorized forward pass against an independently written per-token/per-head loop
version, full-sequence vs KV-cache logits, the config error paths, and the CLI output.
Uses temp directories only; exits non-zero on failure. Not a test of the Go engine.
"""
import contextlib
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep testdata/ free of __pycache__
sys.path.insert(0, HERE)
import _npboot  # noqa: E402

_npboot.ensure_numpy()

import numpy as np  # noqa: E402

import hfmodel  # noqa: E402
import make_selftest_model as mk  # noqa: E402
import reference  # noqa: E402
import safetensors_np as st  # noqa: E402


# ---------------------------------------------------------------------------------------
# Independent naive forward pass: one token at a time, one head at a time, scalar RoPE and
# softmax with math.*, hyper-parameters read straight from the config dict.

def naive_logits(cfg, W, ids):
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or H // nh
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    qwen3 = cfg["model_type"] == "qwen3"
    L = cfg["num_hidden_layers"]

    def lin(name, x):
        y = W[name + ".weight"].dot(x)
        if name + ".bias" in W:
            y = y + W[name + ".bias"]
        return y

    def rmsnorm(x, w):
        ms = sum(float(v) * float(v) for v in x) / len(x)
        r = 1.0 / math.sqrt(ms + eps)
        return np.array([float(x[i]) * r * float(w[i]) for i in range(len(x))])

    def rope(vec, pos):
        out = np.array(vec, dtype=np.float64)
        half = d // 2
        for i in range(half):
            a = pos * (1.0 / theta ** (2.0 * i / d))
            x1, x2 = vec[i], vec[i + half]
            out[i] = x1 * math.cos(a) - x2 * math.sin(a)
            out[i + half] = x2 * math.cos(a) + x1 * math.sin(a)
        return out

    keys = [[] for _ in range(L)]  # keys[l][pos][kv_head]
    vals = [[] for _ in range(L)]
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    result = []
    for pos, tok in enumerate(ids):
        x = W["model.embed_tokens.weight"][tok].copy()
        for l in range(L):
            p = "model.layers.%d." % l
            h = rmsnorm(x, W[p + "input_layernorm.weight"])
            q, k, v = lin(p + "self_attn.q_proj", h), lin(p + "self_attn.k_proj", h), lin(p + "self_attn.v_proj", h)
            kh, vh = [], []
            for j in range(nkv):
                kj = k[j * d:(j + 1) * d]
                if qwen3:
                    kj = rmsnorm(kj, W[p + "self_attn.k_norm.weight"])
                kh.append(rope(kj, pos))
                vh.append(v[j * d:(j + 1) * d])
            keys[l].append(kh)
            vals[l].append(vh)
            att_out = []
            for hh in range(nh):
                qh = q[hh * d:(hh + 1) * d]
                if qwen3:
                    qh = rmsnorm(qh, W[p + "self_attn.q_norm.weight"])
                qh = rope(qh, pos)
                g = hh // (nh // nkv)
                scores = [float(np.dot(qh, keys[l][s][g])) / math.sqrt(d) for s in range(pos + 1)]
                m = max(scores)
                e = [math.exp(sc - m) for sc in scores]
                z = sum(e)
                o = np.zeros(d)
                for s in range(pos + 1):
                    o += (e[s] / z) * vals[l][s][g]
                att_out.append(o)
            x = x + lin(p + "self_attn.o_proj", np.concatenate(att_out))
            h = rmsnorm(x, W[p + "post_attention_layernorm.weight"])
            gate, up = lin(p + "mlp.gate_proj", h), lin(p + "mlp.up_proj", h)
            act = np.array([gv / (1.0 + math.exp(-gv)) * uv for gv, uv in zip(gate, up)])
            x = x + lin(p + "mlp.down_proj", act)
        x = rmsnorm(x, W["model.norm.weight"])
        result.append(head.dot(x))
    return np.array(result)


def max_abs(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def config_of(arch, overrides=None):
    cfg = dict(mk.BASE[arch])
    cfg.update(overrides or {})
    return cfg


# Variants exercised by the forward-pass comparisons.
VARIANTS = [
    ("qwen3", "qwen3", {}),
    ("qwen3 attention_bias untied", "qwen3", {"attention_bias": True, "tie_word_embeddings": False}),
    ("qwen3 mha", "qwen3", {"num_key_value_heads": 4}),
    ("qwen3 mqa 3 layers", "qwen3", {"num_key_value_heads": 1, "num_hidden_layers": 3}),
    ("qwen2", "qwen2", {}),
    ("qwen2 tied", "qwen2", {"tie_word_embeddings": True}),
    ("llama", "llama", {}),
    ("llama biases", "llama", {"attention_bias": True, "mlp_bias": True}),
    ("llama head_dim absent", "llama", {"head_dim": None, "num_attention_heads": 8, "num_key_value_heads": 4}),
    ("llama head_dim != hidden/heads", "llama", {"head_dim": 24}),
]

SEQ = [5, 77, 3, 500, 77, 77, 1, 0, 511, 260, 42, 9, 123, 5]


class TestSafetensors(unittest.TestCase):
    def _raw_file(self, path, entries):
        """entries: [(name, dtype, shape, raw bytes)] written by hand, not by our writer."""
        header, data = {}, b""
        for name, dtype, shape, raw in entries:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
        h = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + data)

    def test_decode_known_bit_patterns(self):
        cases = [
            ("BF16", "<H", [0x3F80, 0xC000, 0x0001, 0x7F7F, 0x8000, 0x3E20],
             [1.0, -2.0, 2.0 ** -133, (1 + 127 / 128) * 2.0 ** 127, -0.0, 0.15625]),
            ("F16", "<H", [0x3C00, 0x7BFF, 0x0001, 0x8000, 0xC500, 0x3555],
             [1.0, 65504.0, 2.0 ** -24, -0.0, -5.0, 0.25 * (1 + 0x155 / 1024)]),
            ("F32", "<I", [0x3F800000, 0x00000001, 0x3DCCCCCD, 0xC0490FDB],
             [1.0, 2.0 ** -149, float(np.float32(0.1)), float(np.float32(-math.pi))]),
        ]
        with tempfile.TemporaryDirectory() as d:
            for dtype, fmt, bits, want in cases:
                with self.subTest(dtype=dtype):
                    path = os.path.join(d, dtype + ".safetensors")
                    raw = b"".join(struct.pack(fmt, b) for b in bits)
                    self._raw_file(path, [("t", dtype, [len(bits)], raw), ("m", dtype, [0], b"")])
                    got = st.read_safetensors(path)
                    self.assertEqual(got["t"].dtype, np.float64)
                    for i, (g, w) in enumerate(zip(got["t"].tolist(), want)):
                        self.assertEqual((g, math.copysign(1, g)), (w, math.copysign(1, w)),
                                         "%s[%d]: have %r; want %r" % (dtype, i, g, w))
                    self.assertEqual(got["m"].shape, (0,))

    def test_bf16_writer_rounds_to_nearest_even(self):
        x = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20, -3.0])
        want = [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC040]
        self.assertEqual(st.f64_to_bf16_bits(x).tolist(), want)

    def test_rejects_malformed(self):
        good = struct.pack("<4f", 1, 2, 3, 4)
        cases = [
            ("size mismatch", [("t", "F32", [3], good)]),
            ("unsupported dtype", [("t", "I8", [4], b"\0\0\0\0")]),
        ]
        with tempfile.TemporaryDirectory() as d:
            for name, entries in cases:
                with self.subTest(name):
                    p = os.path.join(d, "x.safetensors")
                    self._raw_file(p, entries)
                    with self.assertRaises(st.SafetensorsError):
                        st.read_safetensors(p)
            with self.subTest("offsets past end"):
                h = json.dumps({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
                with open(p, "wb") as f:
                    f.write(struct.pack("<Q", len(h)) + h + good[:8])
                with self.assertRaises(st.SafetensorsError):
                    st.read_safetensors(p)
            with self.subTest("header length past end"):
                with open(p, "wb") as f:
                    f.write(struct.pack("<Q", 1 << 40) + b"{}")
                with self.assertRaises(st.SafetensorsError):
                    st.read_safetensors(p)

    def test_dtypes_and_shards_are_bit_identical(self):
        layouts = [("F32", 1), ("F32", 4), ("F16", 1), ("F16", 2), ("BF16", 1), ("BF16", 3)]
        with tempfile.TemporaryDirectory() as d:
            for arch in ("qwen3", "qwen2", "llama"):
                ref = None
                for dtype, shards in layouts:
                    with self.subTest(arch=arch, dtype=dtype, shards=shards):
                        md = os.path.join(d, "%s-%s-%d" % (arch, dtype, shards))
                        w = mk.write_model(md, arch, dtype, shards, seed=3)
                        loaded = st.load_model_tensors(md)
                        self.assertEqual(sorted(loaded), sorted(w))
                        for n in w:
                            self.assertTrue(np.array_equal(loaded[n], w[n]), "%s differs after load" % n)
                        logits = hfmodel.Model.load(md).forward(SEQ[:6])
                        if ref is None:
                            ref = logits
                        self.assertTrue(np.array_equal(logits, ref),
                                        "max diff %g vs F32 single file" % max_abs(logits, ref))


class TestForward(unittest.TestCase):
    def test_vectorized_matches_naive_loops(self):
        for name, arch, ov in VARIANTS:
            with self.subTest(name):
                cfg = config_of(arch, ov)
                W = mk.random_weights(cfg, seed=11)
                model = hfmodel.Model(hfmodel.Config(cfg), W)
                have = model.forward(SEQ)
                want = naive_logits(cfg, W, SEQ)
                self.assertEqual(have.shape, (len(SEQ), cfg["vocab_size"]))
                diff = max_abs(have, want)
                self.assertLess(diff, 1e-9, "max abs diff %g" % diff)
                self.assertGreater(float(np.std(want)), 0.05, "degenerate logits")

    def test_kv_cache_matches_full_sequence(self):
        chunkings = {"one by one": [1] * len(SEQ), "prefill 5 then 1s": [5] + [1] * (len(SEQ) - 5),
                     "mixed": [3, 1, 4, 1, 5]}
        for name, arch, ov in VARIANTS:
            cfg = config_of(arch, ov)
            model = hfmodel.Model(hfmodel.Config(cfg), mk.random_weights(cfg, seed=5))
            full = model.forward(SEQ)
            for cname, chunks in chunkings.items():
                with self.subTest(variant=name, chunks=cname):
                    cache, rows, i = hfmodel.KVCache(cfg["num_hidden_layers"]), [], 0
                    for n in chunks:
                        rows.append(model.forward(SEQ[i:i + n], cache))
                        i += n
                    self.assertEqual(cache.length, len(SEQ))
                    diff = max_abs(np.concatenate(rows), full)
                    self.assertLess(diff, 1e-10, "max abs diff %g" % diff)

    def test_zero_layers_is_norm_then_tied_head(self):
        cfg = config_of("qwen3", {"num_hidden_layers": 0})
        W = mk.random_weights(cfg, seed=2)
        E, w = W["model.embed_tokens.weight"], W["model.norm.weight"]
        have = hfmodel.Model(hfmodel.Config(cfg), W).forward([7, 9])
        for row, tok in zip(have, [7, 9]):
            e = E[tok]
            want = (e / math.sqrt(float(np.mean(e * e)) + cfg["rms_norm_eps"]) * w) @ E.T
            self.assertLess(max_abs(row, want), 1e-12)

    def test_rope_properties(self):
        d, theta = 32, 1e6
        rng = np.random.default_rng(0)
        q, k = rng.standard_normal((1, 1, d)), rng.standard_normal((1, 1, d))

        def at(x, pos):
            cos, sin = hfmodel.rope_cos_sin([pos], hfmodel.rope_inv_freq(d, theta))
            return hfmodel.apply_rope(x, cos, sin)[0, 0]

        self.assertTrue(np.array_equal(at(q, 0), q[0, 0]), "position 0 must be identity")
        for m, n, shift in [(3, 1, 7), (10, 10, 5), (0, 18, 40)]:
            a = float(np.dot(at(q, m), at(k, n)))
            b = float(np.dot(at(q, m + shift), at(k, n + shift)))
            self.assertAlmostEqual(a, b, delta=1e-10, msg="q.k must depend on m-n only")
        # pair (0, d/2) rotates by pos*theta^0 = pos radians
        e0 = np.zeros((1, 1, d))
        e0[0, 0, 0] = 1.0
        want = np.zeros(d)
        want[0], want[d // 2] = math.cos(2.0), math.sin(2.0)
        self.assertLess(max_abs(at(e0, 2), want), 1e-15)

    def test_llama3_inv_freq(self):
        """Each band of Llama 3.x scaling, checked with scalar math and with llama.cpp's
        divisor form (convert_hf_to_gguf.py rope_freqs: inv_freq / ff)."""
        d, theta = 16, 1e6
        have = hfmodel.rope_inv_freq(d, theta, LLAMA3)
        plain = hfmodel.rope_inv_freq(d, theta)
        factor, low, high, old = 4.0, 1.0, 4.0, 64.0
        for i in range(d // 2):
            inv = theta ** (-2.0 * i / d)
            wavelen = 2 * math.pi / inv
            if wavelen < old / high:
                ff = 1.0
            elif wavelen > old / low:
                ff = factor
            else:
                s = (old / wavelen - low) / (high - low)
                ff = 1 / ((1 - s) / factor + s)
            self.assertAlmostEqual(have[i], inv / ff, delta=1e-15 * inv, msg="i=%d" % i)
        # theta 1e6, d 16: wavelengths 6.3, 35.3, 199, ... against bands 16 and 64
        self.assertEqual(have[0], plain[0], "short wavelengths are kept")
        self.assertTrue(plain[1] / 4 < have[1] < plain[1], "the middle band is interpolated")
        self.assertTrue(np.allclose(have[2:], plain[2:] / 4, rtol=1e-15, atol=0), "long wavelengths are divided")

    def test_argmax_ties_lowest_id_and_margin(self):
        cases = [([1.0, 3.0, 3.0, 0.0], (1, 0.0)), ([5.0, 1.0, 4.5], (0, 0.5)), ([-1.0, -2.0], (0, 1.0))]
        for logits, want in cases:
            have = reference.argmax_margin(np.array(logits))
            self.assertEqual(have, want, "have %r; want %r" % (have, want))

    def test_prompts_are_frozen(self):
        have = reference.prompts(512)
        want = [[295], [109, 366, 305, 452, 205],
                [224, 15, 74, 51, 427, 48, 113, 83, 477, 299, 216, 272, 190, 78, 238, 8, 506, 32, 237]]
        self.assertEqual(have, want)
        self.assertTrue(all(0 <= t < 7 for p in reference.prompts(7) for t in p))


LLAMA3 = {"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


class TestConfig(unittest.TestCase):
    def test_unsupported(self):
        cases = [
            ("rope_scaling linear", "llama", {"rope_scaling": {"type": "linear", "factor": 2.0}}),
            ("rope_scaling llama3 on qwen3", "qwen3", {"rope_scaling": dict(LLAMA3, rope_type="llama3")}),
            ("rope_scaling llama3 without factor", "llama", {"rope_scaling": {
                "rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}}),
            ("rope_scaling llama3 extra key", "llama", {"rope_scaling": dict(LLAMA3, rope_type="llama3", beta_fast=32)}),
            ("rope_scaling yarn", "qwen3", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}),
            ("rope_parameters yarn", "qwen3", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6,
                                                                   "factor": 4.0}}),
            ("rope_theta conflict", "qwen3", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}),
            ("sliding window", "qwen2", {"use_sliding_window": True, "sliding_window": 8}),
            ("sliding layer_types", "qwen3", {"layer_types": ["full_attention", "sliding_attention"]}),
            ("gelu", "llama", {"hidden_act": "gelu"}),
            ("mistral", "llama", {"architectures": ["MistralForCausalLM"], "model_type": "mistral"}),
            ("type mismatch", "qwen3", {"model_type": "qwen2"}),
            ("qwen2 head_dim", "qwen2", {"head_dim": 32}),
            ("quantized", "qwen3", {"quantization_config": {"quant_method": "fp8"}}),
            ("partial rotary", "llama", {"partial_rotary_factor": 0.5}),
            ("odd head_dim", "llama", {"head_dim": 15}),
            ("heads not multiple", "llama", {"num_key_value_heads": 3}),
            ("missing vocab", "llama", {"vocab_size": None}),
        ]
        for name, arch, ov in cases:
            with self.subTest(name):
                with self.assertRaises(hfmodel.Unsupported) as cm:
                    hfmodel.Config(config_of(arch, ov))
                self.assertTrue(str(cm.exception))

    def test_hf_tensor_names(self):
        """Per-layer tensor sets as HF modeling_*.py declares them (written out by hand)."""
        attn = ["self_attn.%s_proj.weight" % x for x in "qkvo"]
        norms = ["input_layernorm.weight", "post_attention_layernorm.weight"]
        mlp = ["mlp.%s_proj.weight" % x for x in ("gate", "up", "down")]
        cases = [
            ("qwen3 tied", "qwen3", {}, attn + norms + mlp + ["self_attn.q_norm.weight", "self_attn.k_norm.weight"],
             False),
            ("qwen3 attention_bias", "qwen3", {"attention_bias": True, "tie_word_embeddings": False},
             attn + norms + mlp + ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
             + ["self_attn.%s_proj.bias" % x for x in "qkvo"], True),
            ("qwen2", "qwen2", {"attention_bias": False},
             attn + norms + mlp + ["self_attn.%s_proj.bias" % x for x in "qkv"], True),
            ("llama", "llama", {}, attn + norms + mlp, True),
            ("llama all bias", "llama", {"attention_bias": True, "mlp_bias": True},
             attn + norms + mlp + ["self_attn.%s_proj.bias" % x for x in "qkvo"]
             + ["mlp.%s_proj.bias" % x for x in ("gate", "up", "down")], True),
        ]
        for name, arch, ov, layer, lm_head in cases:
            with self.subTest(name):
                cfg = config_of(arch, ov)
                want = {"model.embed_tokens.weight", "model.norm.weight"} | (
                    {"lm_head.weight"} if lm_head else set())
                want |= {"model.layers.%d.%s" % (i, n) for i in range(cfg["num_hidden_layers"]) for n in layer}
                have = set(hfmodel.expected_shapes(hfmodel.Config(cfg)))
                self.assertEqual(sorted(have ^ want), [], "symmetric difference")

    def test_tensor_set_checked(self):
        cfg = config_of("qwen3")
        good = mk.random_weights(cfg, seed=1)
        extra_bias = dict(good)
        extra_bias["model.layers.0.self_attn.q_proj.bias"] = np.zeros(128)
        missing = dict(good)
        del missing["model.layers.1.self_attn.k_norm.weight"]
        bad_shape = dict(good)
        bad_shape["model.norm.weight"] = np.ones(63)
        for name, W in [("extra bias", extra_bias), ("missing k_norm", missing), ("bad shape", bad_shape)]:
            with self.subTest(name):
                with self.assertRaises(hfmodel.Unsupported):
                    hfmodel.Model(hfmodel.Config(cfg), W)
        ok = dict(good)
        ok["lm_head.weight"] = good["model.embed_tokens.weight"]  # tied checkpoints may still store it
        ok["model.rotary_emb.inv_freq"] = np.zeros(16)
        hfmodel.Model(hfmodel.Config(cfg), ok)

    def test_llama3_scaling_changes_the_model(self):
        base = config_of("llama")
        W = mk.random_weights(base, seed=5)
        plain = hfmodel.Model(hfmodel.Config(base), W).forward(SEQ[:8])
        scaled = hfmodel.Model(hfmodel.Config(config_of("llama", {"rope_scaling": dict(LLAMA3, rope_type="llama3")})), W)
        self.assertEqual(scaled.c.llama3["factor"], 4.0)
        have = scaled.forward(SEQ[:8])
        self.assertTrue(np.array_equal(have[0], plain[0]), "position 0 is not rotated")
        self.assertGreater(max_abs(have, plain), 1e-3, "llama3 scaling must change later positions")

    def test_default_rope_parameters_accepted(self):
        base = config_of("qwen3")
        W = mk.random_weights(base, seed=4)
        want = hfmodel.Model(hfmodel.Config(base), W).forward(SEQ[:4])
        for name, ov in [("v5 rope_parameters", {"rope_theta": None, "rope_parameters":
                                                 {"rope_type": "default", "rope_theta": 1e6}}),
                         ("rope_scaling default", {"rope_scaling": {"type": "default"}})]:
            with self.subTest(name):
                have = hfmodel.Model(hfmodel.Config(config_of("qwen3", ov)), W).forward(SEQ[:4])
                self.assertTrue(np.array_equal(have, want))


class TestCLI(unittest.TestCase):
    def _run(self, *args):
        p = subprocess.run([sys.executable, os.path.join(HERE, "reference.py")] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    def test_single_model_output(self):
        with tempfile.TemporaryDirectory() as d:
            md = os.path.join(d, "tiny-qwen2")
            mk.write_model(md, "qwen2", "BF16", shards=2, seed=8)
            rc, out, err = self._run(md)
            self.assertEqual(rc, 0, err)
            rc2, out2, _ = self._run(md + "/")
            self.assertEqual(out, out2, "output must be byte-reproducible")
            doc = json.loads(out)
            self.assertEqual(doc["model"], "tiny-qwen2")
            self.assertEqual(len(out.splitlines()), 2 + len(reference.PROMPT_LENGTHS))
            model = hfmodel.Model.load(md)
            for case, n in zip(doc["cases"], reference.PROMPT_LENGTHS):
                self.assertEqual(len(case["prompt"]), n)
                self.assertEqual(np.array(case["logits"]).shape, (n, 512))
                self.assertEqual(len(case["greedy"]), reference.GREEDY_STEPS)
                self.assertEqual(len(case["margins"]), reference.GREEDY_STEPS)
                # independent check: full recompute of prompt + greedy tokens
                seq = case["prompt"] + case["greedy"]
                full = model.forward(seq[:-1])
                printed = np.array(case["logits"])
                self.assertLess(float(np.max(np.abs(printed - full[:n]) / (np.abs(full[:n]) + 1e-30))), 6e-7)
                for step, (tok, m) in enumerate(zip(case["greedy"], case["margins"])):
                    row = full[n - 1 + step]
                    top = np.sort(row)[::-1]
                    self.assertEqual(tok, int(np.flatnonzero(row == top[0])[0]), "step %d" % step)
                    self.assertAlmostEqual(m, top[0] - top[1], delta=1e-6 * max(1.0, abs(m)))

    def test_all_mode(self):
        with tempfile.TemporaryDirectory() as d:
            models, golden = os.path.join(d, "models"), os.path.join(d, "golden")
            mk.write_model(os.path.join(models, "b-llama"), "llama", "F16", seed=1)
            mk.write_model(os.path.join(models, "a-qwen3"), "qwen3", "BF16", shards=3, seed=2)
            mk.write_model(os.path.join(models, "c-yarn"), "qwen3", "F32",
                           overrides={"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
                           weights=mk.random_weights(config_of("qwen3"), seed=2))
            os.makedirs(os.path.join(models, "no-config"))
            with open(os.path.join(models, "x.gguf"), "wb") as f:
                f.write(b"GGUF")
            rc, out, err = self._run("--all", models, golden)
            self.assertEqual(rc, 0, err)
            self.assertEqual(sorted(os.listdir(golden)), ["a-qwen3.json", "b-llama.json"])
            self.assertIn("skip c-yarn", err)
            for name in ("a-qwen3", "b-llama"):
                _, single, _ = self._run(os.path.join(models, name))
                with open(os.path.join(golden, name + ".json")) as f:
                    self.assertEqual(f.read(), single)

    def test_errors_exit_nonzero(self):
        with tempfile.TemporaryDirectory() as d:
            rc, _, err = self._run(os.path.join(d, "nope"))
            self.assertNotEqual(rc, 0)
            md = os.path.join(d, "slide")
            mk.write_model(md, "qwen2", "F32", overrides={"use_sliding_window": True},
                           weights=mk.random_weights(config_of("qwen2"), seed=2))
            rc, _, err = self._run(md)
            self.assertNotEqual(rc, 0)
            self.assertIn("use_sliding_window", err)
            rc, _, _ = self._run()
            self.assertEqual(rc, 2)


if __name__ == "__main__":
    unittest.main(verbosity=1)
