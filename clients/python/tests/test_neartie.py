"""draftd._testing.neartie: the near-tie rule on small hand-made cases."""

from __future__ import annotations

import pytest

from draftd._testing.neartie import from_rows, from_top, gap_for, near_tie


def test_gap_by_dtype() -> None:
    assert gap_for("bfloat16") == gap_for("bf16") == 0.25
    assert gap_for("float32") == gap_for("f32") == 1e-2
    assert 1e-2 < gap_for("float16") < 0.25
    assert gap_for("llama.cpp") == 0.5
    with pytest.raises(ValueError, match="int8"):
        gap_for("int8")


def test_equal_and_lengths() -> None:
    rows = from_rows([[0.0, 1.0]] * 3)
    assert near_tie([1, 1], [1, 1], rows, rows, 0.01) == (True, "equal")
    ok, why = near_tie([1, 1], [1, 1, 1], rows, rows, 0.01)
    assert not ok and "lengths differ" in why


def test_rows() -> None:
    plain = from_rows([[5.0, 4.0, 0.0], [20.0, 20.005, 3.0]])
    other = from_rows([[5.0, 4.0, 0.0], [20.0, 20.008, 3.0]])
    # position 1: plain chose 0 by 0.005 (its own scores say 1 is 0.005 higher: a tie either way)
    assert near_tie([0, 0], [0, 1], plain, other, 1e-2)[0]
    assert not near_tie([0, 0], [0, 1], plain, other, 1e-3)[0]
    # a clear divergence: 1.0 apart
    assert not near_tie([0, 0], [0, 2], from_rows([[1, 0, 0], [4, 0, 3]]), from_rows([[1, 0, 0], [4, 0, 3]]), 0.25)[0]


def test_top() -> None:
    # vLLM's bf16: the known tie is 0.125 apart (one step of bf16's grid at 16-32)
    plain = from_top([[(7, -0.5), (8, -0.625)]])
    other = from_top([[(8, -0.5), (7, -0.625)]])
    assert near_tie([7], [8], plain, other, gap_for("bfloat16"))[0]
    assert not near_tie([7], [8], plain, other, gap_for("float32"))[0]
    # a token outside a run's top-k is no tie
    ok, why = near_tie([7], [9], plain, from_top([[(9, -0.1), (7, -0.2)]]), 10.0)
    assert not ok and "inf" in why
