"""Float64 numpy forward pass for HF Qwen3 / Qwen2 / Llama causal LMs (draftd reference).

Written from the Hugging Face transformers formulas (modeling_qwen3/qwen2/llama): RMSNorm,
NeoX (rotate_half) RoPE, GQA causal softmax attention, SiLU-gated MLP, final norm, lm_head.
Everything is float64. RoPE scaling: only rope_type "llama3" (transformers
_compute_llama3_parameters). Not an inference engine: no batching, no quantization, no
other rope scaling, no sliding windows; anything unimplemented raises Unsupported.
"""
import json
import os

import numpy as np

from gguf_np import hf_name, read_gguf
from safetensors_np import load_model_tensors

ARCHS = {"Qwen3ForCausalLM": "qwen3", "Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama"}


class Unsupported(ValueError):
    """The model uses a feature this reference does not implement."""


class Config:
    """Hyper-parameters read from config.json, with HF class defaults where HF has one."""

    def __init__(self, cfg):
        if not isinstance(cfg, dict):
            raise Unsupported("config.json is not a JSON object")
        archs = cfg.get("architectures") or []
        model_type = cfg.get("model_type")
        if archs:
            if archs[0] not in ARCHS:
                raise Unsupported("architecture %r not supported (want one of %s)" % (archs[0], sorted(ARCHS)))
            kind = ARCHS[archs[0]]
            if model_type is not None and model_type != kind:
                raise Unsupported("architectures[0] %r disagrees with model_type %r" % (archs[0], model_type))
        elif model_type in ARCHS.values():
            kind = model_type
        else:
            raise Unsupported("cannot tell the architecture: architectures=%r model_type=%r" % (archs, model_type))
        self.kind = kind

        def req(key):
            if cfg.get(key) is None:
                raise Unsupported("config.json: missing %s" % key)
            return cfg[key]

        self.vocab = int(req("vocab_size"))
        self.hidden = int(req("hidden_size"))
        self.inter = int(req("intermediate_size"))
        self.n_layers = int(req("num_hidden_layers"))
        self.n_heads = int(req("num_attention_heads"))
        # HF: Qwen2/Qwen3Config default 32 when the key is absent; None means n_heads.
        if "num_key_value_heads" in cfg:
            self.n_kv = int(cfg["num_key_value_heads"] if cfg["num_key_value_heads"] is not None else self.n_heads)
        else:
            self.n_kv = 32 if kind in ("qwen2", "qwen3") else self.n_heads
        if self.n_heads <= 0 or self.n_kv <= 0 or self.n_heads % self.n_kv:
            raise Unsupported("num_attention_heads %d not a multiple of num_key_value_heads %d"
                              % (self.n_heads, self.n_kv))

        derived = self.hidden // self.n_heads
        hd = cfg.get("head_dim", 128 if kind == "qwen3" else None)
        if kind == "qwen2":
            if self.hidden % self.n_heads:
                raise Unsupported("qwen2: hidden_size %d not divisible by heads %d" % (self.hidden, self.n_heads))
            if hd is not None and int(hd) != derived:
                raise Unsupported("qwen2: head_dim %s in config differs from hidden/heads %d" % (hd, derived))
            hd = derived
        elif hd is None:
            if self.hidden % self.n_heads:
                raise Unsupported("%s: no head_dim and hidden_size %d not divisible by heads %d"
                                  % (kind, self.hidden, self.n_heads))
            hd = derived
        self.head_dim = int(hd)
        if self.head_dim <= 0 or self.head_dim % 2:
            raise Unsupported("head_dim %d must be positive and even for RoPE" % self.head_dim)

        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise Unsupported("hidden_act %r (only silu)" % act)

        if kind == "qwen2":  # HF Qwen2Attention: q/k/v bias=True, o_proj bias=False, config ignored
            self.qkv_bias, self.o_bias = True, False
        else:
            b = bool(cfg.get("attention_bias", False))
            self.qkv_bias, self.o_bias = b, b
        self.mlp_bias = bool(cfg.get("mlp_bias", False))
        if self.mlp_bias and kind != "llama":
            raise Unsupported("%s: mlp_bias true (HF %s has no MLP bias)" % (kind, kind))
        self.qk_norm = kind == "qwen3"

        self.rope_theta, self.llama3 = self._rope(cfg)
        self.inv_freq = rope_inv_freq(self.head_dim, self.rope_theta, self.llama3)

        if cfg.get("use_sliding_window"):
            raise Unsupported("use_sliding_window true")
        lt = cfg.get("layer_types")
        if lt is not None and any(t != "full_attention" for t in lt):
            raise Unsupported("layer_types other than full_attention: %r" % sorted(set(lt)))
        for key in ("quantization_config", "attn_logit_softcapping", "final_logit_softcapping"):
            if cfg.get(key) is not None:
                raise Unsupported("%s is not null" % key)
        prf = cfg.get("partial_rotary_factor")
        if prf is not None and float(prf) != 1.0:
            raise Unsupported("partial_rotary_factor %r" % prf)

    LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")

    def _rope(self, cfg):
        """(rope_theta, llama3 parameters or None)."""
        theta = cfg.get("rope_theta")
        llama3 = None
        # transformers >= 5 stores RoPE in rope_parameters (rope_scaling is its alias); a dict
        # that only says "default" (+ rope_theta) is plain RoPE; "llama3" (Llama 3.x, llama
        # only) is implemented; anything else is scaling this reference does not know.
        for key in ("rope_scaling", "rope_parameters"):
            rp = cfg.get(key)
            if rp is None:
                continue
            if not isinstance(rp, dict):
                raise Unsupported("%s %r" % (key, rp))
            rtype = rp.get("rope_type", rp.get("type", "default"))
            known = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
            if rtype == "llama3" and self.kind == "llama":
                missing = [k for k in self.LLAMA3_KEYS if rp.get(k) is None]
                if missing:
                    raise Unsupported("%s llama3 without %s" % (key, missing))
                llama3 = {k: float(rp[k]) for k in self.LLAMA3_KEYS}
                known |= set(self.LLAMA3_KEYS)
                rtype = "default"
            extra = set(rp) - known
            prf = rp.get("partial_rotary_factor", 1.0)
            if rtype != "default" or extra or float(prf) != 1.0:
                raise Unsupported("%s %s (rope scaling not implemented)" % (key, json.dumps(rp, sort_keys=True)))
            if rp.get("rope_theta") is not None:
                if theta is not None and float(rp["rope_theta"]) != float(theta):
                    raise Unsupported("rope_theta %r conflicts with %s.rope_theta %r" % (theta, key, rp["rope_theta"]))
                theta = rp["rope_theta"]
        return float(theta if theta is not None else 10000.0), llama3


def expected_shapes(c):
    """HF tensor name -> shape for config c (lm_head only when untied)."""
    q_out, kv_out = c.n_heads * c.head_dim, c.n_kv * c.head_dim
    s = {"model.embed_tokens.weight": (c.vocab, c.hidden), "model.norm.weight": (c.hidden,)}
    if not c.tie:
        s["lm_head.weight"] = (c.vocab, c.hidden)
    for i in range(c.n_layers):
        p = "model.layers.%d." % i
        s[p + "input_layernorm.weight"] = (c.hidden,)
        s[p + "post_attention_layernorm.weight"] = (c.hidden,)
        s[p + "self_attn.q_proj.weight"] = (q_out, c.hidden)
        s[p + "self_attn.k_proj.weight"] = (kv_out, c.hidden)
        s[p + "self_attn.v_proj.weight"] = (kv_out, c.hidden)
        s[p + "self_attn.o_proj.weight"] = (c.hidden, q_out)
        if c.qkv_bias:
            s[p + "self_attn.q_proj.bias"] = (q_out,)
            s[p + "self_attn.k_proj.bias"] = (kv_out,)
            s[p + "self_attn.v_proj.bias"] = (kv_out,)
        if c.o_bias:
            s[p + "self_attn.o_proj.bias"] = (c.hidden,)
        if c.qk_norm:
            s[p + "self_attn.q_norm.weight"] = (c.head_dim,)
            s[p + "self_attn.k_norm.weight"] = (c.head_dim,)
        s[p + "mlp.gate_proj.weight"] = (c.inter, c.hidden)
        s[p + "mlp.up_proj.weight"] = (c.inter, c.hidden)
        s[p + "mlp.down_proj.weight"] = (c.hidden, c.inter)
        if c.mlp_bias:
            s[p + "mlp.gate_proj.bias"] = (c.inter,)
            s[p + "mlp.up_proj.bias"] = (c.inter,)
            s[p + "mlp.down_proj.bias"] = (c.hidden,)
    return s


def check_tensors(c, tensors):
    """Exact name/shape match; extra tensors mean a feature we would silently ignore."""
    want = expected_shapes(c)
    missing = sorted(set(want) - set(tensors))
    if missing:
        raise Unsupported("missing tensors: %s%s" % (missing[:6], " ..." if len(missing) > 6 else ""))
    ignorable = lambda n: n.endswith(".rotary_emb.inv_freq") or (c.tie and n == "lm_head.weight")
    extra = sorted(n for n in tensors if n not in want and not ignorable(n))
    if extra:
        raise Unsupported("unexpected tensors (feature not implemented?): %s" % extra[:6])
    for n, shape in want.items():
        if tuple(tensors[n].shape) != shape:
            raise Unsupported("tensor %s has shape %s, want %s" % (n, tuple(tensors[n].shape), shape))
    if c.tie and "lm_head.weight" in tensors and tensors["lm_head.weight"].shape != (c.vocab, c.hidden):
        raise Unsupported("tied lm_head.weight has shape %s" % (tensors["lm_head.weight"].shape,))


def rms_norm(x, w, eps):
    """x * 1/sqrt(mean(x^2) + eps) * w over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x * (0.5 * (1.0 + np.tanh(0.5 * x)))  # x*sigmoid(x) without exp overflow


def rope_inv_freq(head_dim, theta, llama3=None):
    """inv_freq (head_dim/2,) = theta^(-2i/d); with llama3 parameters, rescaled as
    transformers' _compute_llama3_parameters: wavelengths 2*pi/inv_freq shorter than
    original_max_position_embeddings/high_freq_factor are kept, longer than
    original_max_position_embeddings/low_freq_factor are divided by factor, and in between
    inv_freq is (1 - s)*inv_freq/factor + s*inv_freq with
    s = (original_max_position_embeddings/wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if llama3 is None:
        return inv_freq
    factor, low, high, old = (llama3[k] for k in Config.LLAMA3_KEYS)
    if not (factor >= 1 and 0 < low < high and old >= 1):
        raise Unsupported("rope_scaling llama3 parameters %r" % (llama3,))
    wavelen = 2 * np.pi / inv_freq
    smooth = (old / wavelen - low) / (high - low)
    scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return np.where(medium, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)


def rope_cos_sin(positions, inv_freq):
    """cos, sin of shape (T, head_dim): angles p*inv_freq repeated for both halves."""
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang), np.sin(ang)


def apply_rope(x, cos, sin):
    """x: (T, heads, d); NeoX rotate_half: pairs (i, i+d/2)."""
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def q8_0_roundtrip(x):
    """x rounded to ggml Q8_0 blocks of 32 along the last axis and decoded:
    d = amax/127 (f32), q = roundf(x * (1/d)) in f32, value = f16(d) * q."""
    shape = x.shape
    x32 = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x32).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.zeros_like(d)
    nz = d != 0
    inv[nz] = np.float32(1) / d[nz]
    y = (x32 * inv[:, None]).astype(np.float32)
    q = np.sign(y) * np.floor(np.abs(y) + np.float32(0.5))  # C roundf: halves away from zero
    dh = d.astype(np.float16).astype(np.float64)
    return (q.astype(np.float64) * dh[:, None]).reshape(shape)


def q8_k_roundtrip(x):
    """x rounded to ggml Q8_K blocks of 256 along the last axis and decoded
    (quantize_row_q8_K_ref): max = the element of largest |x| (first one),
    iscale = -127/max (f32), q = min(127, round-half-even(iscale*x)) in f32,
    d = 1/iscale (f32, not rounded to f16), value = d*q."""
    shape = x.shape
    x32 = np.asarray(x, dtype=np.float32).reshape(-1, 256)
    idx = np.abs(x32).argmax(axis=1)
    mx = x32[np.arange(x32.shape[0]), idx]
    out = np.zeros(x32.shape, dtype=np.float64)
    nz = mx != 0
    iscale = (np.float32(-127) / mx[nz]).astype(np.float32)
    q = np.minimum(127, np.rint((x32[nz] * iscale[:, None]).astype(np.float32)))
    d = (np.float32(1) / iscale).astype(np.float32)
    out[nz] = q.astype(np.float64) * d.astype(np.float64)[:, None]
    return out.reshape(shape)


def q8_1_sums(x):
    """(..., cols/32) s fields of ggml Q8_1 blocks: f16(sum(q) * d), d = amax/127 in f32."""
    x32 = np.asarray(x, dtype=np.float32)
    b = x32.reshape(x32.shape[:-1] + (-1, 32))
    d = (np.abs(b).max(axis=-1) / np.float32(127)).astype(np.float32)
    inv = np.zeros_like(d)
    nz = d != 0
    inv[nz] = np.float32(1) / d[nz]
    y = (b * inv[..., None]).astype(np.float32)
    q = np.sign(y) * np.floor(np.abs(y) + np.float32(0.5))
    s = (q.sum(axis=-1).astype(np.float32) * d).astype(np.float32)
    return s.astype(np.float16).astype(np.float64)


class KVCache:
    def __init__(self, n_layers):
        self.k = [None] * n_layers  # each (S, n_kv, head_dim), post-RoPE
        self.v = [None] * n_layers
        self.length = 0


class Model:
    def __init__(self, config, tensors, act_quant=False, wtypes=None, mins=None):
        self.c = c = config
        # act_quant: round the input of every linear layer as llama.cpp does
        # for its weight type: Q8_0 blocks (ggml quantize_row_q8_0_ref) unless
        # wtypes (HF name -> ggml type name) says K-quant (Q8_K blocks) or
        # Q4_1/Q5_1 (Q8_1 blocks; mins: HF name -> (rows, cols/32) block mins).
        self.act_quant = act_quant
        self.wtypes, self.mins = wtypes or {}, mins or {}
        check_tensors(c, tensors)
        self.t = tensors
        self.embed = tensors["model.embed_tokens.weight"]
        self.lm_head = self.embed if c.tie else tensors["lm_head.weight"]

    @classmethod
    def load(cls, model_dir, act_quant=False):
        with open(os.path.join(model_dir, "config.json")) as f:
            raw = json.load(f)
        cfg = Config(raw)
        if raw.get("draftd_gguf_file"):
            # The weights are the GGUF file's blocks, decoded here (gguf_np).
            if cfg.kind == "llama":
                raise Unsupported("GGUF weights of a llama model (permuted Q/K rows) are not read here")
            _, gt = read_gguf(os.path.join(model_dir, raw["draftd_gguf_file"]))
            tensors, wtypes, mins = {}, {}, {}
            for g in gt.values():
                n = hf_name(g.name)
                tensors[n], wtypes[n] = g.values, g.type
                if g.mins is not None:
                    mins[n] = g.mins
            return cls(cfg, tensors, act_quant, wtypes, mins)
        return cls(cfg, load_model_tensors(model_dir), act_quant)

    def _matmul(self, x, wname):
        """x @ W.T, with x quantized as ggml does for W's type when act_quant."""
        w = self.t[wname]
        if not self.act_quant:
            return x @ w.T
        typ = self.wtypes.get(wname, "Q8_0")
        if typ.endswith("_K"):
            return q8_k_roundtrip(x) @ w.T
        if typ in ("Q4_1", "Q5_1"):
            # ggml's Q8_1 dot: d_w*d_x*sum(q_w*q_x) + m_w*s_x, s_x = f16(d_x*sum(q_x))
            m = self.mins[wname]  # (rows, cols/32)
            xr = q8_0_roundtrip(x)
            return xr @ (w - np.repeat(m, 32, axis=1)).T + q8_1_sums(x) @ m.T
        return q8_0_roundtrip(x) @ w.T

    def _lin(self, x, name):
        y = self._matmul(x, name + ".weight")
        b = self.t.get(name + ".bias")
        return y if b is None else y + b

    def forward(self, ids, cache=None):
        """Logits (T, vocab) for tokens ids at positions cache.length.. (0.. without a cache)."""
        c, t = self.c, self.t
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("forward: no tokens")
        if min(ids) < 0 or max(ids) >= c.vocab:
            raise ValueError("forward: token id out of range [0, %d)" % c.vocab)
        T = len(ids)
        p0 = cache.length if cache is not None else 0
        S = p0 + T
        cos, sin = rope_cos_sin(np.arange(p0, S), c.inv_freq)
        group = c.n_heads // c.n_kv
        scale = c.head_dim ** -0.5
        # query at absolute position p0+i may see keys at positions <= p0+i
        allowed = np.arange(S)[None, :] <= (p0 + np.arange(T))[:, None]  # (T, S)

        x = self.embed[ids]  # (T, hidden)
        for l in range(c.n_layers):
            p = "model.layers.%d." % l
            h = rms_norm(x, t[p + "input_layernorm.weight"], c.eps)
            q = self._lin(h, p + "self_attn.q_proj").reshape(T, c.n_heads, c.head_dim)
            k = self._lin(h, p + "self_attn.k_proj").reshape(T, c.n_kv, c.head_dim)
            v = self._lin(h, p + "self_attn.v_proj").reshape(T, c.n_kv, c.head_dim)
            if c.qk_norm:
                q = rms_norm(q, t[p + "self_attn.q_norm.weight"], c.eps)
                k = rms_norm(k, t[p + "self_attn.k_norm.weight"], c.eps)
            q = apply_rope(q, cos, sin)
            k = apply_rope(k, cos, sin)
            if cache is not None:
                if cache.k[l] is not None:
                    k = np.concatenate([cache.k[l], k], axis=0)
                    v = np.concatenate([cache.v[l], v], axis=0)
                cache.k[l], cache.v[l] = k, v
            kh = np.repeat(k, group, axis=1)  # (S, n_heads, d): head h reads kv head h // group
            vh = np.repeat(v, group, axis=1)
            att = np.einsum("thd,shd->hts", q, kh) * scale
            att = np.where(allowed[None], att, -np.inf)
            att = np.exp(att - att.max(axis=-1, keepdims=True))
            att /= att.sum(axis=-1, keepdims=True)
            o = np.einsum("hts,shd->thd", att, vh).reshape(T, c.n_heads * c.head_dim)
            x = x + self._lin(o, p + "self_attn.o_proj")

            h = rms_norm(x, t[p + "post_attention_layernorm.weight"], c.eps)
            g = self._lin(h, p + "mlp.gate_proj")
            u = self._lin(h, p + "mlp.up_proj")
            x = x + self._lin(silu(g) * u, p + "mlp.down_proj")
        if cache is not None:
            cache.length = S
        x = rms_norm(x, t["model.norm.weight"], c.eps)
        return self._matmul(x, "model.embed_tokens.weight" if c.tie else "lm_head.weight")
