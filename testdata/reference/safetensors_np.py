"""Minimal safetensors reader/writer for the draftd numpy reference.

Reads F32/F16/BF16(/F64) tensors and upcasts them exactly to float64; loads a Hugging
Face model directory (single `model.safetensors` or sharded with
`model.safetensors.index.json`). The writer exists only for the self-test models.
Not a general safetensors library: no integer dtypes, no FP8, no lazy loading.
"""
import json
import os
import struct

import numpy as np

# safetensors dtype -> (little-endian numpy dtype of the raw bytes, bytes per element)
_RAW = {
    "F64": ("<f8", 8),
    "F32": ("<f4", 4),
    "F16": ("<f2", 2),
    "BF16": ("<u2", 2),
}


class SafetensorsError(ValueError):
    pass


def bf16_bits_to_f64(bits):
    """uint16 bfloat16 bit patterns -> float64, exactly (bf16 is the top half of f32)."""
    u32 = bits.astype(np.uint32) << np.uint32(16)
    return u32.view("<f4").astype(np.float64)


def f64_to_bf16_bits(x):
    """float64 -> bfloat16 bit patterns, round-to-nearest-even via float32 (writer only)."""
    f = np.asarray(x, dtype=np.float64).astype("<f4")
    if not np.all(np.isfinite(f)):
        raise SafetensorsError("non-finite value in bf16 conversion")
    u = f.view("<u4").astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return rounded.astype("<u2")


def read_safetensors(path):
    """Return {name: float64 ndarray} for every tensor in one .safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError("%s: shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise SafetensorsError("%s: header length %d exceeds file size %d" % (path, n, len(blob)))
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("%s: bad JSON header: %s" % (path, e))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % path)
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = meta.get("dtype")
        if dtype not in _RAW:
            raise SafetensorsError("%s: tensor %s: unsupported dtype %r" % (path, name, dtype))
        raw_dtype, size = _RAW[dtype]
        shape = [int(d) for d in meta["shape"]]
        if any(d < 0 for d in shape):
            raise SafetensorsError("%s: tensor %s: negative dim in %s" % (path, name, shape))
        begin, end = (int(v) for v in meta["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= begin <= end <= len(data)):
            raise SafetensorsError("%s: tensor %s: offsets [%d,%d) outside data of %d bytes"
                                   % (path, name, begin, end, len(data)))
        if end - begin != count * size:
            raise SafetensorsError("%s: tensor %s: %d bytes for shape %s %s (want %d)"
                                   % (path, name, end - begin, shape, dtype, count * size))
        raw = np.frombuffer(data[begin:end], dtype=raw_dtype, count=count)
        if dtype == "BF16":
            arr = bf16_bits_to_f64(raw)
        else:
            arr = raw.astype(np.float64)  # f16/f32 -> f64 is exact
        out[name] = arr.reshape(shape)
    return out


def write_safetensors(path, tensors):
    """tensors: {name: (dtype, float64 array)}. Values must be representable (writer only)."""
    header, chunks, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        arr = np.asarray(arr, dtype=np.float64)
        if dtype == "BF16":
            raw = f64_to_bf16_bits(arr).tobytes()
        elif dtype in _RAW:
            raw = arr.astype(_RAW[dtype][0]).tobytes()
        else:
            raise SafetensorsError("writer: unsupported dtype %r" % dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)  # pad so the data starts 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


def load_model_tensors(model_dir):
    """All tensors of an HF model directory as {name: float64 ndarray}."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if not os.path.exists(index):
        raise SafetensorsError("%s: neither model.safetensors nor model.safetensors.index.json" % model_dir)
    with open(index) as f:
        weight_map = json.load(f).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise SafetensorsError("%s: index has no weight_map" % index)
    out = {}
    for shard in sorted(set(weight_map.values())):
        if os.path.basename(shard) != shard:
            raise SafetensorsError("%s: shard name %r is not a plain file name" % (index, shard))
        for name, arr in read_safetensors(os.path.join(model_dir, shard)).items():
            if name in out:
                raise SafetensorsError("%s: tensor %s appears in more than one shard" % (model_dir, name))
            if weight_map.get(name) != shard:
                raise SafetensorsError("%s: tensor %s found in %s but the index says %r"
                                       % (model_dir, name, shard, weight_map.get(name)))
            out[name] = arr
    missing = sorted(set(weight_map) - set(out))
    if missing:
        raise SafetensorsError("%s: index lists tensors not found in shards: %s" % (model_dir, missing[:5]))
    return out
