"""draftd.batchpolicy.BatchPolicy on a worked case, in tests/test_policy.py's
style: a simulated served stack whose batch size changes — blocks of steps
at one request, blocks at eight — where drafting pays at one request (a
memory-bound step: FAST_FLAT's curve, 9 positions cost 1.1 × one) and
cannot pay at eight (a compute-bound step: k positions cost k steps, so
E[accepted + 1 | n] ≤ n + 1 tokens take at least n + 1 steps' time plus the
draft). The reference is the stack's own exact rates, not the policy's
estimates. A policy that always drafts, one that never does, and one
LengthPolicy fed every step (whose verification times blend the two batch
sizes) each fail the checks: test_checks_catch_wrong_policies."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from test_policy import Fixed
from draftd.batchpolicy import BatchPolicy
from draftd.policy import LengthPolicy

N_MAX = 8
Q = 0.9  # each position accepted given the ones before it


def verify(rows: int, k: int) -> float:
    """Seconds of the target's step over ``rows`` requests of k positions."""
    return 0.160 + 0.002 * (k - 1) if rows == 1 else 0.400 * k


def rate(rows: int, n: int) -> float:
    """Exact expected tokens per second (per request) of steps of n draft tokens."""
    e = sum(Q ** j for j in range(n + 1))
    return e / ((0.002 + 0.005 * n if n else 0.0) + verify(rows, n + 1))


def drive(policy: Any, steps: int = 3000, block: int = 20, seed: int = 1,
          jitter: float = 0.05) -> dict[int, list[tuple[int, int, float]]]:
    """The stack under the policy, the batch size 1 and 8 in turn every
    ``block`` steps; {batch size: [(n, tokens, seconds) per step]}."""
    rng = random.Random(seed)
    out: dict[int, list[tuple[int, int, float]]] = {1: [], 8: []}
    for s in range(steps):
        rows = 1 if (s // block) % 2 == 0 else 8
        if hasattr(policy, "batch"):
            policy.batch(rows)
        n = policy.choose()
        assert isinstance(n, int) and 0 <= n <= N_MAX, n
        t, a = 0.0, 0
        if n:
            d = (0.002 + 0.005 * n) * (1 + rng.uniform(-jitter, jitter))
            policy.draft_time(d, n)
            t += d
            while a < n and rng.random() < Q:
                a += 1
            policy.observe(n, a)
        v = verify(rows, n + 1) * (1 + rng.uniform(-jitter, jitter))
        policy.verify_time(v, n + 1)
        out[rows].append((n, a + 1, t + v))
    return out


def test_worked_case_is_what_it_says() -> None:
    assert max(range(N_MAX + 1), key=lambda n: rate(1, n)) == 8
    assert max(range(N_MAX + 1), key=lambda n: rate(8, n)) == 0
    assert all(rate(8, n) < rate(8, 0) for n in range(1, N_MAX + 1))


def check_by_batch(make: Callable[[], Any], warm: int = 300) -> None:
    """After warm-up (the first ``warm`` steps of each batch size): at
    eight requests no drafts but bounded probes (≤ 3 % of the steps) and
    tokens per second ≥ 98 % of plain decoding's — never slower than
    without draftd; at one request n = 8 on ≥ 75 % of the steps and ≥ 95 %
    of the best fixed length's tokens per second."""
    run = drive(make())
    eight, one = run[8][warm:], run[1][warm:]
    drafted = sum(1 for n, _, _ in eight if n)
    assert drafted <= 0.03 * len(eight), f"drafted on {drafted} of {len(eight)} steps at eight requests"
    have = sum(t for _, t, _ in eight) / sum(s for _, _, s in eight)
    assert have >= 0.98 * rate(8, 0), f"at eight requests {have:.3f} tokens/s; plain decoding {rate(8, 0):.3f}"
    eights = sum(1 for n, _, _ in one if n == 8)
    assert eights >= 0.75 * len(one), f"n = 8 on {eights} of {len(one)} steps at one request"
    have = sum(t for _, t, _ in one) / sum(s for _, _, s in one)
    assert have >= 0.95 * rate(1, 8), f"at one request {have:.3f} tokens/s; the best fixed length {rate(1, 8):.3f}"


def test_batch_policy() -> None:
    check_by_batch(lambda: BatchPolicy(N_MAX))


@pytest.mark.parametrize("make", [lambda: Fixed(N_MAX), lambda: Fixed(3), lambda: Fixed(0),
                                  lambda: LengthPolicy(N_MAX)],
                         ids=["always-8", "always-3", "never", "one-LengthPolicy"])
def test_checks_catch_wrong_policies(make: Callable[[], Any]) -> None:
    with pytest.raises(AssertionError):
        check_by_batch(make)


def test_classes() -> None:
    """Batch sizes 1, 2–3, 4–7, 8–15 … each have a policy of their own;
    reports go to the class of the last batch()."""
    p = BatchPolicy(4)
    assert [BatchPolicy.size_class(r) for r in (0, 1, 2, 3, 4, 7, 8, 15, 16)] == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    p.batch(5)
    p.observe(4, 2)
    assert p.at(6).drafts == 1 and p.at(1).drafts == 0 and p.at(8).drafts == 0
    with pytest.raises(ValueError):
        BatchPolicy(0)


def test_prefills_reach_every_class_and_the_decision_is_the_current_ones() -> None:
    """A prefill's time does not depend on the batch it joins: every class
    hears it, classes made later too. Whether a request drafts at all is the
    current class's decision: drafting pays at one request (the worked case)
    and not at eight."""
    p = BatchPolicy(N_MAX)
    drive(p)  # both classes measured
    p.prefill_time(0.22, 100)
    late = p.at(32)  # a class made after the report
    assert [c.t_prefill(1000) for c in (p.at(1), p.at(8), late)] == [pytest.approx(2.2)] * 3
    p.batch(1)
    assert p.draft_generation(100, 64)  # n = 8: 63 × (0.160 − 0.216 / 6.13) s ≈ 7.9 s saved > 0.22 s
    p.batch(8)
    assert not p.draft_generation(100, 64), "at eight requests nothing drafted can pay"
