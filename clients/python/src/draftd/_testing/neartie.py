"""The near-tie rule: when an assisted (speculative) greedy output may
differ from the target's plain greedy output. One copy for every test and
bench (transformers, vLLM, llama.cpp); no torch, no numpy.

Two outputs agree when they are equal, or when at their first differing
position i, in each run's own scores there (logits, or log-probabilities:
their differences are the same), the two tokens chosen are within the gap
of the target's dtype. A batched verification pass rounds differently from
one-token decoding, so where the target's two best tokens are that close
either may win. A run that does not know one of the two scores at i (a
top-k list without it) counts as a gap of infinity: not a tie.

The gap, by the dtype the target's logits are computed in (``gap_for``):

- bfloat16: 0.25 — bf16 has 8 significant bits, so logits between 16 and 32
  lie on a grid of 2^-3 and between 32 and 64 on 2^-2: a tie is a step or
  two apart (docs/serving.md). vLLM's bf16 targets.
- float16: 2^-5 — the same two steps of f16's grid (2^-6 between 16 and 32).
- float32: 1e-2 — a real 1.5B model's logits are ~10-30 in size and a
  batched pass of float32 arithmetic (transformers) rounds differently
  from one-token decoding by more than transformers' own allclose(1e-5)
  rule (tests/generation/test_utils.py, _check_similar_generate_outputs),
  which this gap contains.
- llama.cpp: 0.5 — llama.cpp's logits are float32, but its quantized
  matrix products quantize the activations too and take other kernels for
  a batch of positions than for one, so a verification pass of 4 positions
  and one-token decoding of the same Q4_K_M target differ by far more:
  clients/python/bench/llamacpp_batch_rounding.py measured, on the real
  1.5B Q4_K_M file (Intel Xeon Ice Lake class, 2026-12-06, 144 positions of
  3 prompts), the five best logits differing by a median 0.13 and at most
  0.53, the top-2 margin moving by at most 0.40 (p99 0.38). A flip needs
  both runs' margins within that move; 0.5 leaves a quarter of headroom.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

#: The gap per dtype (the module's docstring says why).
GAPS: Mapping[str, float] = {"bfloat16": 0.25, "float16": 2.0**-5, "float32": 1e-2, "llama.cpp": 0.5}
_ALIASES = {"bf16": "bfloat16", "f16": "float16", "fp16": "float16", "half": "float16", "f32": "float32",
            "fp32": "float32", "float": "float32"}

#: score(position, token): a run's score of token at a position of its
#: output, or None where the run does not know it.
Score = Callable[[int, int], "float | None"]


def gap_for(dtype: str) -> float:
    """The near-tie gap for a target whose logits are in dtype (bfloat16,
    float16, float32, or their short names bf16, f16/fp16, f32/fp32), or
    for a llama.cpp target ("llama.cpp": its quantized kernels); ValueError
    for another."""
    d = _ALIASES.get(dtype.lower(), dtype.lower())
    if d not in GAPS:
        raise ValueError(f"no near-tie gap for dtype {dtype!r}: want one of {', '.join(GAPS)}")
    return GAPS[d]


def from_rows(rows: Sequence[Sequence[float]]) -> Score:
    """Scores from whole rows: rows[position][token] (lists, numpy arrays)."""
    return lambda i, t: float(rows[i][t])


def from_top(tops: Sequence[Sequence[tuple[int, float]] | Sequence[Sequence[float]]]) -> Score:
    """Scores from top-k lists: tops[position] is a list of (token, score)
    pairs (vLLM's log-probs; a bench's top-2)."""

    def score(i: int, t: int) -> float | None:
        for tok, v in tops[i]:
            if int(tok) == t:
                return float(v)
        return None

    return score


def near_tie(plain: Sequence[int], other: Sequence[int], plain_score: Score, other_score: Score,
             gap: float) -> tuple[bool, str]:
    """(ok, why): whether other equals plain, or first differs from it at a
    near-tie within gap (plain_score and other_score: each run's own scores
    of the positions of its output)."""
    a, b = list(plain), list(other)
    if a == b:
        return True, "equal"
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), None)
    if i is None:
        return False, f"lengths differ: plain {len(a)}, other {len(b)} tokens"

    def diff(score: Score, first: int, second: int) -> float:
        x, y = score(i, first), score(i, second)
        return abs(x - y) if x is not None and y is not None else float("inf")

    gp, go = diff(plain_score, a[i], b[i]), diff(other_score, b[i], a[i])
    return gp <= gap and go <= gap, (f"position {i}: plain {a[i]} vs other {b[i]}; gaps {gp:.2e} (plain's scores), "
                                     f"{go:.2e} (the other's), near-tie gap {gap:g}")
