"""Minimal GGUF reader and ggml block dequantizers in numpy, for the fidelity reference.

Written from the GGUF file format description and ggml's block structs (ggml-common.h);
independent of draftd's Go code. Reads F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 and
Q2_K..Q6_K tensors into float64 arrays. Values are computed exactly from the integer
fields (d*sc*q - dmin*m in float64): ggml's own dequantize_row_* rounds each product to
f32, a difference of ~1e-7 relative that the tests do not resolve.

read_gguf(path) -> (metadata dict, {gguf tensor name: Tensor}).
"""
import struct

import numpy as np

GGML = {  # type id: (name, block weights, block bytes)
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2),
    2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
}


class GGUFError(ValueError):
    pass


class Tensor:
    """values: (rows, cols) or (n,) float64. mins: Q4_1/Q5_1 only, (rows, cols/32) block mins
    (the m of w = d*q + m), needed to emulate ggml's Q8_1 dot product."""

    def __init__(self, name, typ, shape, values, mins=None):
        self.name, self.type, self.shape, self.values, self.mins = name, typ, shape, values, mins


def _f16(b):
    return b.copy().view(np.float16).astype(np.float64).reshape(-1)


def _blocks(raw, nbytes):
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, nbytes)


def dequantize(typ, raw, n):
    """(n,) float64 values and, for Q4_1/Q5_1, (n/32,) block mins."""
    name = GGML[typ][0]
    if name == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float64), None
    if name == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float64), None
    if name == "BF16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64), None
    b = _blocks(raw, GGML[typ][2])
    nb = b.shape[0]
    if name in ("Q8_0",):
        d = _f16(b[:, 0:2])
        return (d[:, None] * b[:, 2:].view(np.int8)).reshape(-1), None
    if name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        d = _f16(b[:, 0:2])
        off = 4 if name in ("Q4_1", "Q5_1") else 2
        m = _f16(b[:, 2:4]) if off == 4 else None
        five = name.startswith("Q5")
        qh = None
        if five:
            qh = b[:, off:off + 4].copy().view("<u4").reshape(nb).astype(np.uint64)
            off += 4
        qs = b[:, off:off + 16]
        # byte j: weight j in the low nibble, weight j+16 in the high nibble
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int64)
        if five:  # bit j of qh is the 5th bit of weight j
            bits = (qh[:, None] >> np.arange(32, dtype=np.uint64)[None, :]) & 1
            q = q | (bits.astype(np.int64) << 4)
        if name == "Q4_0":
            q = q - 8
        if name == "Q5_0":
            q = q - 16
        v = d[:, None] * q
        if m is not None:
            v = v + m[:, None]
        return v.reshape(-1), m
    e = np.arange(256)
    half, j, l = e // 128, (e % 128) // 32, e % 32  # the 2-bit and 6-bit layouts: 2 halves x 4 rows of 32
    if name == "Q2_K":
        sc, qs = b[:, :16], b[:, 16:80]
        d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
        q = (qs[:, 32 * half + l] >> (2 * j)) & 3
        s = sc[:, e // 16]
        v = d[:, None] * (s & 0xF) * q - dmin[:, None] * (s >> 4)
        return v.reshape(-1), None
    if name == "Q3_K":
        hm, qs, sc = b[:, :32], b[:, 32:96], b[:, 96:108]
        d = _f16(b[:, 108:110])
        g = np.arange(16)  # 16 scales of 6 bits: low 4 in nibbles of bytes 0-7, top 2 in bytes 8-11
        lo = np.where(g < 8, sc[:, g % 8] & 0xF, sc[:, g % 8] >> 4)
        hi = (sc[:, 8 + g % 4] >> (2 * (g // 4))) & 3
        scale = (lo | (hi << 4)).astype(np.int64) - 32
        q = ((qs[:, 32 * half + l] >> (2 * j)) & 3).astype(np.int64)
        hbit = (hm[:, l] >> (4 * half + j)) & 1
        q = q - 4 * (1 - hbit.astype(np.int64))
        v = d[:, None] * scale[:, e // 16] * q
        return v.reshape(-1), None
    if name in ("Q4_K", "Q5_K"):
        d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
        sc = b[:, 4:16].astype(np.int64)
        sub = np.arange(8)  # 8 scales and mins of 6 bits in 12 bytes
        s_lo = np.where(sub < 4, sc[:, sub % 4] & 63, (sc[:, (sub + 4) % 12] & 0xF) | ((sc[:, (sub - 4) % 12] >> 6) << 4))
        m_lo = np.where(sub < 4, sc[:, (sub + 4) % 12] & 63, (sc[:, (sub + 4) % 12] >> 4) | ((sc[:, sub % 12] >> 6) << 4))
        qs = b[:, 16:144] if name == "Q4_K" else b[:, 48:176]
        jj, ll = e // 32, e % 32  # sub-block jj: low (even) or high (odd) nibbles of qs[32*(jj//2) + ll]
        byte = qs[:, 32 * (jj // 2) + ll].astype(np.int64)
        q = np.where(jj % 2 == 0, byte & 0xF, byte >> 4)
        if name == "Q5_K":
            q = q + 16 * ((b[:, 16 + ll].astype(np.int64) >> jj) & 1)
        v = d[:, None] * s_lo[:, jj] * q - dmin[:, None] * m_lo[:, jj]
        return v.reshape(-1), None
    if name == "Q6_K":
        ql, qh = b[:, :128].astype(np.int64), b[:, 128:192].astype(np.int64)
        sc = b[:, 192:208].view(np.int8).astype(np.int64)
        d = _f16(b[:, 208:210])
        low = ql[:, 64 * half + 32 * (j % 2) + l]
        low = np.where(j < 2, low & 0xF, low >> 4)
        q = (low | (((qh[:, 32 * half + l] >> (2 * j)) & 3) << 4)) - 32
        v = d[:, None] * sc[:, e // 16] * q
        return v.reshape(-1), None
    raise GGUFError("cannot decode ggml type %s" % name)


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, t):
        scalars = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
        if t in scalars:
            return self.take(scalars[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return [self.value(et) for _ in range(n)]
        raise GGUFError("unknown GGUF value type %d" % t)


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    if r.take("4s") != b"GGUF":
        raise GGUFError("%s: not a GGUF file" % path)
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version not in (2, 3):
        raise GGUFError("%s: GGUF version %d" % (path, version))
    meta = {}
    for _ in range(n_kv):
        k = r.string()
        meta[k] = r.value(r.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("Q") for _ in range(r.take("I"))]
        typ, off = r.take("I"), r.take("Q")
        infos.append((name, dims, typ, off))
    align = meta.get("general.alignment", 32)
    start = (r.pos + align - 1) // align * align
    tensors = {}
    for name, dims, typ, off in infos:
        if typ not in GGML:
            raise GGUFError("%s: tensor %s has ggml type %d, not decodable here" % (path, name, typ))
        n = int(np.prod(dims))
        _, bw, bb = GGML[typ]
        raw = data[start + off:start + off + n // bw * bb]
        vals, mins = dequantize(typ, raw, n)
        shape = tuple(reversed(dims))  # ggml order (innermost first) -> row-major
        vals = vals.reshape(shape)
        if mins is not None:
            mins = mins.reshape(shape[:-1] + (shape[-1] // 32,))
        tensors[name] = Tensor(name, GGML[typ][0], shape, vals, mins)
    return meta, tensors


_LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
          "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def hf_name(gguf_name):
    """llama.cpp tensor name -> Hugging Face name (qwen2/qwen3 layout)."""
    base, _, kind = gguf_name.rpartition(".")
    if base in _TOP:
        return _TOP[base] + "." + kind
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER:
        return "model.layers.%s.%s.%s" % (parts[1], _LAYER[parts[2]], kind)
    raise GGUFError("unknown tensor name %s" % gguf_name)
