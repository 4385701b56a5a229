"""The draft-length policy of the serving-stack adapters (draftd.vllm's
``adaptive`` option, draftd.llamacpp's ``adaptive=True``): each step's draft
length n in [0, n_max], n = 0 meaning no draft at all (the target decodes one
token, as without speculation).

A step of a speculative stack is a draft of n tokens (the adapter's call to
draftd) and the target's verification of n + 1 positions, and yields the
accepted draft tokens plus the target's own. The policy picks the n with the
most expected tokens per second::

    rate(n) = E[accepted + 1 | n] / (T_draft(n) + T_verify(n + 1))   (n ≥ 1)
    rate(0) = 1 / T_verify(1)                                        (plain decoding)

from what the adapter measured on its own steps:

- the acceptance of each draft position given that the ones before it were
  accepted, q_j (decayed counts, so it follows the text), so that
  E[accepted + 1 | n] = 1 + Σ_{j≤n} Π_{i≤j} q_i. A position no draft reached
  for a while is taken to be accepted as often as the one before it (a fixed
  prior made positions past the current length look worse as their counts
  decayed, and the length stuck short);
- the draft call's time, T_draft(n) = c0 + c1·n (a least-squares fit of the
  recent calls: per-call overhead and per-token time);
- the target's verification curve T_verify(k): the time from the adapter's
  answer to the target's next request for a draft, keyed by k = the answered
  draft's length + 1 (verification plus the engine's own work, the median of
  the last samples of each k). It is not assumed linear: a Q4_K_M llama.cpp
  target verifies 4 positions faster than 3 on the Xeon. Lengths not measured
  yet are interpolated between the measured ones, and extrapolated past the
  longest along the line from the shortest measured to the longest.

It drafts only while rate(n) beats plain decoding by ``margin``, so a stack
whose drafter cannot pay (a drafter slower than the target's step, text the
drafter does not predict) decodes plainly; then one step in ``probe_every``
drafts the best n ≥ 1 (a probe; while ``explore`` drafts have not been
seen, the best for acceptances drawn as below), the interval doubling while probes keep
showing that drafting does not pay, up to ``probe_max`` steps, so a probe
costs at most one cycle per ``probe_max`` steps and drafting resumes soon
after it pays again. While drafting, one step in ``probe_every`` tries a
neighbouring length (n ± 1; an unmeasured length first; plain decoding every
fourth probe, so T_verify(1) stays current).

The first step drafts n_max // 2, the second none (to measure T_verify(1)).
While fewer than ``explore`` drafts were seen the acceptances the choice uses
are drawn from their posterior (Thompson sampling), so that lengths whose
acceptance is still uncertain get tried; before ``min_drafts`` drafts, n = 0
is chosen only when even drafts that are always accepted would not pay. The
draws come from the policy's own generator (``seed``): a policy fed the same
measurements makes the same choices.

The policy is pure bookkeeping (no clock, no I/O): an adapter calls
:meth:`LengthPolicy.choose` before each step, and reports what it measured
with :meth:`~LengthPolicy.observe` (acceptance), :meth:`~LengthPolicy.draft_time`
and :meth:`~LengthPolicy.verify_time`.
"""

from __future__ import annotations

import random
import statistics
from collections import deque

__all__ = ["LengthPolicy"]


class LengthPolicy:
    """Chooses each step's draft length in [0, ``n_max``] (see the module).

    ``decay``: the weight of the acceptance seen one draft ago (0.97: about
    the last 33 drafts count). ``probe_every``, ``probe_max``: steps between
    probes (see the module). ``margin``: how much faster than plain decoding
    (a fraction) a length must be expected to be to draft at all.
    ``min_drafts``: drafts observed before n = 0 may be chosen on their
    acceptance; ``explore``: drafts seen before the choice stops drawing
    acceptances from their posterior (see the module); ``seed``: of those
    draws. ``samples``: timing samples kept per verification length."""

    def __init__(self, n_max: int, *, decay: float = 0.97, probe_every: int = 16, probe_max: int = 256,
                 margin: float = 0.02, min_drafts: int = 8, explore: int = 32, samples: int = 15,
                 seed: int = 0) -> None:
        if isinstance(n_max, bool) or not isinstance(n_max, int) or n_max < 1:
            raise ValueError(f"n_max {n_max!r} must be an int ≥ 1")
        if not 0 < decay <= 1:
            raise ValueError(f"decay {decay!r} must be in (0, 1]")
        if not (isinstance(probe_every, int) and isinstance(probe_max, int) and 1 <= probe_every <= probe_max):
            raise ValueError(f"probe_every {probe_every!r} and probe_max {probe_max!r}: want 1 ≤ probe_every ≤ probe_max")
        if not margin >= 0:
            raise ValueError(f"margin {margin!r} must be ≥ 0")
        self.n_max = n_max
        self.decay = decay
        self.probe_every = probe_every
        self.probe_max = probe_max
        self.margin = margin
        self.min_drafts = min_drafts
        self.explore = explore
        self._rng = random.Random(seed)
        self.tried = [0.0] * n_max  # (n_max) decayed drafts that reached position j with every earlier one accepted
        self.hit = [0.0] * n_max  # (n_max) decayed drafts whose position j was accepted
        self.drafts = 0  # drafts observed
        self._calls: deque[tuple[int, float]] = deque(maxlen=32)  # (tokens drafted, seconds) of recent draft calls
        self._verify: list[deque[float]] = [deque(maxlen=samples) for _ in range(n_max + 2)]  # (n_max + 2) by k
        self._warmup = [max(1, n_max // 2), 0]
        self.steps = 0
        self._since_probe = 0
        self._interval = probe_every
        self._probes = 0
        self.probing = False  # whether the last choice was a probe
        self.last = n_max  # the last choice

    # -- what the adapter measured -----------------------------------------

    def observe(self, drafted: int, accepted: int) -> None:
        """A draft of ``drafted`` tokens, of which the target accepted the
        first ``accepted``."""
        if drafted < 1:
            return
        accepted = max(0, min(accepted, drafted))
        tried = min(drafted, accepted + 1, self.n_max)  # the positions this draft tried
        for j in range(self.n_max):
            # A position not tried keeps most of its evidence: only probes
            # reach the positions past the current length.
            g = self.decay if j < tried else self.decay ** 0.125
            self.tried[j] = g * self.tried[j] + (1.0 if j < tried else 0.0)
            self.hit[j] = g * self.hit[j] + (1.0 if j < accepted else 0.0)
        self.drafts += 1

    def draft_time(self, seconds: float, tokens: int) -> None:
        """A draft call of ``tokens`` drafted tokens took ``seconds``."""
        if tokens >= 1 and seconds >= 0:
            self._calls.append((tokens, float(seconds)))

    def verify_time(self, seconds: float, k: int) -> None:
        """The target took ``seconds`` from the adapter's answer of a draft of
        k − 1 tokens (k = 1: no draft) to its next request."""
        if 1 <= k <= self.n_max + 1 and seconds >= 0:
            self._verify[k].append(float(seconds))

    # -- the model -----------------------------------------------------------

    def acceptance(self, sample: bool = False) -> list[float]:
        """q_j, j = 1..n_max: the probability that draft position j is
        accepted given that the positions before it were (the posterior
        mean; ``sample``: a draw from the posterior instead)."""
        out: list[float] = []
        prev = 0.5
        for j in range(self.n_max):
            a = self.hit[j] + 2.0 * prev
            b = self.tried[j] - self.hit[j] + 2.0 * (1.0 - prev)
            q = self._rng.betavariate(a + 1e-3, b + 1e-3) if sample else a / (a + b)
            out.append(q)
            prev = q
        return out

    def expected(self, n: int, q: list[float] | None = None) -> float:
        """E[accepted + 1 | a draft of n tokens] (``q``: these acceptances
        instead of :meth:`acceptance`)."""
        e, run = 1.0, 1.0
        for qj in (self.acceptance() if q is None else q)[:n]:
            run *= qj
            e += run
        return e

    def t_draft(self, n: int) -> float | None:
        """The expected seconds of a draft call of n tokens (0 for n = 0;
        None before any call was measured)."""
        if n == 0:
            return 0.0
        if not self._calls:
            return None
        xs = [x for x, _ in self._calls]
        ys = [y for _, y in self._calls]
        if len(set(xs)) >= 2:
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            sxx = sum((x - mx) ** 2 for x in xs)
            c1 = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
            c0 = my - c1 * mx
            if c1 > 0 and c0 >= 0:
                return c0 + c1 * n
        return statistics.median(y / x for x, y in self._calls) * n

    def t_verify(self, k: int) -> float | None:
        """The expected seconds of the target's step over k positions: the
        median of its samples, else interpolated between the nearest
        measured lengths; past the longest measured, extrapolated along the
        line from the shortest to the longest measured (not falling), before
        the shortest, the shortest's (None: none measured)."""
        pts = [(j, statistics.median(s)) for j, s in enumerate(self._verify) if s]
        if not pts:
            return None
        below = [p for p in pts if p[0] <= k]
        above = [p for p in pts if p[0] >= k]
        if below and below[-1][0] == k:
            return below[-1][1]
        if below and above:
            (k0, v0), (k1, v1) = below[-1], above[0]
            return v0 + (v1 - v0) * (k - k0) / (k1 - k0)
        if not below:
            return above[0][1]
        (k0, v0), (k1, v1) = pts[0], pts[-1]
        slope = max(0.0, (v1 - v0) / (k1 - k0)) if k1 > k0 else 0.0
        return v1 + slope * (k - k1)

    def rate(self, n: int, q: list[float] | None = None) -> float | None:
        """Expected tokens per second of steps of n draft tokens (None: not
        known yet; ``q``: these acceptances instead of :meth:`acceptance`)."""
        d, v = self.t_draft(n), self.t_verify(n + 1)
        if d is None or v is None or d + v <= 0:
            return None
        return self.expected(n, q) / (d + v)

    def best(self) -> int:
        """The n with the most expected tokens per second (no probes).
        While fewer than ``explore`` drafts were seen, the acceptances are a
        draw from their posterior (Thompson sampling: lengths whose
        acceptance is still uncertain get tried); before ``min_drafts``,
        n = 0 only when even drafts that are always accepted would not pay."""
        q = self.acceptance(sample=self.drafts < self.explore)
        n, rn = self._best_drafting(q)
        r0 = self.rate(0)
        if r0 is None or rn < 0:
            return n
        if self.drafts < self.min_drafts:
            perfect = self._best_drafting([1.0] * self.n_max)[1]
            return 0 if perfect < r0 * (1 + self.margin) else n
        return 0 if rn < r0 * (1 + self.margin) else n

    def _best_drafting(self, q: list[float] | None = None) -> tuple[int, float]:
        """The n ≥ 1 with the most expected tokens per second, and that rate
        (−1: not known)."""
        q = self.acceptance() if q is None else q
        best, best_rate = self.n_max, -1.0
        for n in range(1, self.n_max + 1):
            r = self.rate(n, q)
            if r is not None and r > best_rate:
                best, best_rate = n, r
        return best, best_rate

    # -- the choice ------------------------------------------------------------

    def choose(self) -> int:
        """The draft length of the next step, in [0, n_max]."""
        self.steps += 1
        self.probing = False
        if self._warmup:
            self.last = self._warmup.pop(0)
            return self.last
        b = self.best()
        self._since_probe += 1
        if b == 0:
            if self._since_probe >= self._interval:
                self._since_probe = 0
                self._interval = min(2 * self._interval, self.probe_max)
                self.probing = True
                b = self._best_drafting(self.acceptance(sample=self.drafts < self.explore))[0]
        else:
            self._interval = self.probe_every
            if self._since_probe >= self.probe_every:
                self._since_probe = 0
                self._probes += 1
                self.probing = True
                b = self._neighbour(b)
        self.last = b
        return b

    def _neighbour(self, b: int) -> int:
        """The length a probe tries while drafting at b: an unmeasured
        length (the most promising), else plain decoding every fourth probe,
        else b + 1 and b − 1 in turn."""
        unmeasured = [n for n in range(1, self.n_max + 1) if not self._verify[n + 1]]
        if unmeasured:
            return max(unmeasured, key=lambda n: self.rate(n) or 0.0)
        if self._probes % 4 == 0:
            return 0
        up, down = min(b + 1, self.n_max), max(b - 1, 1)
        return up if self._probes % 2 else down
