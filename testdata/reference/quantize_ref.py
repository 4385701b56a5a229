#!/usr/bin/env python3
"""Independent numpy reference quantizer for ggml's Q8_0, Q4_0 and Q5_0 blocks.

Written from ggml's published block definitions (ggml-common.h: block_q8_0 =
{ggml_half d; int8_t qs[32]}, block_q4_0 = {ggml_half d; uint8_t qs[16]},
block_q5_0 = {ggml_half d; uint8_t qh[4]; uint8_t qs[16]}) and the
reference rounding rules of quantize_row_q8_0_ref / quantize_row_q4_0_ref /
quantize_row_q5_0_ref:

  Q8_0: amax = max|x|; d = amax/127; id = 1/d (0 when d == 0);
        q = roundf(x*id)  (halves away from zero); stored d = fp16(d).
  Q4_0: m = the first x of largest |x| (sign kept); d = m/-8; id = 1/d (0 if d == 0);
        n = min(15, (int8)(x*id + 8.5f))  (truncation toward zero);
        byte j = n[j] | n[j+16] << 4; stored d = fp16(d).
  Q5_0: as Q4_0 with d = m/-16 and n = min(31, (int8)(x*id + 16.5f)); qs byte j =
        (n[j] & 15) | (n[j+16] & 15) << 4; qh = the little-endian uint32 whose bit i
        is bit 4 of n[i] (i < 32).

All arithmetic is float32 as in C (numpy float32 scalars/arrays), fp16 is
numpy's round-to-nearest-even float16. Not a model tool: it only turns float32
arrays into block bytes.

    python3 quantize_ref.py IN.f32 q8_0|q4_0|q5_0 OUT    # raw little-endian f32 in, blocks out
    python3 quantize_ref.py --selftest               # hand-decoded blocks
"""
import sys

import _npboot

_npboot.ensure_numpy()
import numpy as np  # noqa: E402

QK = 32
F32 = np.float32


def _fp16_bytes(d):
    return np.array([d], dtype=np.float32).astype(np.float16).tobytes()


def quantize_q8_0(x):
    x = np.asarray(x, dtype=np.float32)
    assert x.size % QK == 0
    out = bytearray()
    for b in range(0, x.size, QK):
        blk = x[b:b + QK]
        amax = F32(np.max(np.abs(blk)))
        d = F32(amax / F32(127))
        idv = F32(F32(1) / d) if d != 0 else F32(0)
        v = (blk * idv).astype(np.float32).astype(np.float64)  # exact widening
        q = np.sign(v) * np.floor(np.abs(v) + 0.5)            # roundf: halves away from 0
        out += _fp16_bytes(d)
        out += q.astype(np.int8).tobytes()
    return bytes(out)


def quantize_q4_0(x):
    x = np.asarray(x, dtype=np.float32)
    assert x.size % QK == 0
    out = bytearray()
    for b in range(0, x.size, QK):
        blk = x[b:b + QK]
        a = np.abs(blk)
        m = blk[int(np.argmax(a))] if a.max() > 0 else F32(0)  # argmax: first of the largest
        d = F32(F32(m) / F32(-8))
        idv = F32(F32(1) / d) if d != 0 else F32(0)
        s = ((blk * idv).astype(np.float32) + F32(8.5)).astype(np.float32)
        n = np.minimum(15, np.trunc(s.astype(np.float64)).astype(np.int64))
        qs = (n[:QK // 2] | (n[QK // 2:] << 4)).astype(np.uint8)
        out += _fp16_bytes(d)
        out += qs.tobytes()
    return bytes(out)


def quantize_q5_0(x):
    x = np.asarray(x, dtype=np.float32)
    assert x.size % QK == 0
    out = bytearray()
    for b in range(0, x.size, QK):
        blk = x[b:b + QK]
        a = np.abs(blk)
        m = blk[int(np.argmax(a))] if a.max() > 0 else F32(0)  # argmax: first of the largest
        d = F32(F32(m) / F32(-16))
        idv = F32(F32(1) / d) if d != 0 else F32(0)
        s = ((blk * idv).astype(np.float32) + F32(16.5)).astype(np.float32)
        n = np.minimum(31, np.trunc(s.astype(np.float64)).astype(np.int64))
        qh = 0
        for i in range(QK):
            qh |= int((n[i] >> 4) & 1) << i
        qs = ((n[:QK // 2] & 15) | ((n[QK // 2:] & 15) << 4)).astype(np.uint8)
        out += _fp16_bytes(d)
        out += qh.to_bytes(4, "little")
        out += qs.tobytes()
    return bytes(out)


QUANTIZERS = {"q8_0": quantize_q8_0, "q4_0": quantize_q4_0, "q5_0": quantize_q5_0}


def selftest():
    # Q8_0: amax 127 → d = 1 (fp16 0x3c00); 0.5 rounds away from zero to 1, -0.5 to -1.
    x = np.zeros(QK, dtype=np.float32)
    x[0], x[1], x[2], x[3] = 127, 0.5, -0.5, -1.5
    got = quantize_q8_0(x)
    want = bytes([0x00, 0x3c, 127, 1, 0xff, 0xfe]) + bytes(QK - 4)
    assert got == want, (got.hex(), want.hex())
    # Q4_0: the largest magnitude is -8 → d = 1, and it maps to nibble 0;
    # 7 → 15; 0 → 8; x[16] = 1 → 9 in the high nibble of byte 0.
    x = np.zeros(QK, dtype=np.float32)
    x[0], x[1], x[16] = -8, 7, 1
    got = quantize_q4_0(x)
    assert got[:2] == bytes([0x00, 0x3c]), got[:2].hex()
    assert got[2] == 0x00 | (9 << 4) and got[3] == 15 | (8 << 4) and got[4] == 8 | (8 << 4), got.hex()
    # Q4_0 keeps the sign of the largest: +8 gives d = -1, +8 → 0, -7 → 15.
    x = np.zeros(QK, dtype=np.float32)
    x[0], x[1] = 8, -7
    got = quantize_q4_0(x)
    assert got[:2] == bytes([0x00, 0xbc]) and got[2] == 0x80 and got[3] == 0x80 | 15, got.hex()
    # All-zero blocks: codes 0 (Q8_0) and 8 (Q4_0); Q4_0's d = 0/-8 is -0
    # (fp16 0x8000), as in C.
    z = np.zeros(QK, dtype=np.float32)
    assert quantize_q8_0(z) == bytes(2 + QK)
    assert quantize_q4_0(z) == bytes([0x00, 0x80]) + bytes([0x88] * 16)
    # Q5_0: the largest magnitude is -16 → d = 1, code 0; 15 → 31 (qh bit 1 set);
    # 0 → 16 (qh bit set, low nibble 0); x[16] = 1 → 17 in the high nibble of byte 0.
    x = np.zeros(QK, dtype=np.float32)
    x[0], x[1], x[16] = -16, 15, 1
    got = quantize_q5_0(x)
    qh = int.from_bytes(got[2:6], "little")
    assert got[:2] == bytes([0x00, 0x3c]), got[:2].hex()
    assert qh == 0xFFFFFFFE, hex(qh)
    assert got[6] == 0x00 | (1 << 4) and got[7] == 15 and got[8] == 0, got.hex()
    assert quantize_q5_0(z) == bytes([0x00, 0x80]) + bytes([0xff] * 4) + bytes(16)
    print("quantize_ref self-test: ok")


def main(argv):
    if argv[1:] == ["--selftest"]:
        selftest()
        return 0
    if len(argv) != 4 or argv[2] not in QUANTIZERS:
        sys.stderr.write(__doc__)
        return 2
    x = np.fromfile(argv[1], dtype="<f4")
    with open(argv[3], "wb") as f:
        f.write(QUANTIZERS[argv[2]](x))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
