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
  longest along the line from the shortest measured to the longest; a length
  never verified is tried once when it would pay at the cost of the longest
  measured length below it (a line through 1 and 2 positions can hide a
  cheap 4).

It starts drafting when rate(n) beats plain decoding by ``margin``, and
stops only when the rate with each position's acceptance ``optimism``
posterior standard deviations above its mean loses too (an estimate of a few
dozen drafts dips, and a policy that stopped on a dip would hear no more
drafts and keep it), so a stack whose drafter cannot pay (a drafter slower than the target's step, text the
drafter does not predict) decodes plainly; then one step in ``probe_every``
drafts the best n ≥ 1 (a probe; while ``explore`` drafts have not been
seen, the best for acceptances drawn as below), the interval doubling while probes keep
showing that drafting does not pay, up to ``probe_max`` steps, so a probe
costs at most one cycle per ``probe_max`` steps and drafting resumes soon
after it pays again. While drafting, one step in ``probe_every`` tries a
neighbouring length (n ± 1; an unmeasured length first; plain decoding every
fourth probe, so T_verify(1) stays current).

**Whether a generation drafts at all** (:meth:`~LengthPolicy.drafting_pays`):
draftd takes in a new generation's prompt (its prefill) while the target
runs its own prompt pass, and on cores they share that delays the target by
about the prefill's time — on a long prompt more than a short generation's
drafting can save (draftd's prefill of the 0.5B drafter runs ~2.2 ms per
token on the 2-core Ice Lake Xeon: 2.9 s for a 1,317-token prompt, where 64
tokens decoded 1.25× faster than the target's 75 ms steps save ~1 s). An adapter
that knows a generation's prompt and ``max_tokens`` asks before it sends
anything: drafting pays when (max_tokens − 1)·(1/rate(0) − 1/rate(best)),
with optimistic acceptances as for stopping, exceeds the prefill's time
expected from the measured ones (seconds per token of the prompts sent
whole, :meth:`~LengthPolicy.prefill_time`; their wall time beside the
target's pass, so an over- rather than an under-estimate of the delay).
A generation it skips gives no evidence, so the decision
(:meth:`~LengthPolicy.draft_generation`) drafts one such generation as a
probe after 2 skipped in a row, the interval doubling up to 16 while
they keep not paying: a stack whose first generation was text the drafter
does not predict would otherwise never draft again.

**Each generation's own acceptance.** The texts a stack serves differ (a
chat turn the drafter predicts well, prose it does not), and so does what
drafting is worth for each: measured on the 2-core Ice Lake Xeon (the
llama.cpp Q4_K_M target, n ≤ 3), a chat turn 1.1–1.4× faster with drafts
and a prose prompt (τ ~2.1) 0.72–0.95×. Counts decayed over the last few
dozen drafts of every generation blend them, so the policy drafts for
prose on the chat's evidence. An adapter that runs one generation at a
time calls :meth:`~LengthPolicy.begin_generation` before each: from then
on a draft of the current generation counts ``generation_weight`` (8)
times more than one of the generations before it (added to the decayed
counts, per position and per bound alike), so a few drafts of a
generation move the estimate to its own text, while the stack's estimate
is its prior. A generation that begins while drafting has stopped, but
could pay for some text (the optimistic best rate beats plain decoding),
drafts its first step as a probe. In the worked case of tests/test_policy.py
(64-token generations of a chat-like and a prose-like text at random, the
Xeon's Q4_K_M curve, n ≤ 3; mean of 20 seeds) this is 12.99 tokens/s
against 12.07 for the blended counts (+8 %; plain decoding 12.05), and on
one text where drafting pays 10 % it costs 2 % (0.971 of the best fixed
length's tokens/s against 0.991: a few drafts make a noisier estimate).
Without a call to begin_generation (draftd.vllm: many requests at once,
one policy) the counts are the decayed ones alone.

The first step drafts n_max // 2, the second none (to measure T_verify(1)).
While fewer than ``explore`` drafts were seen the acceptances the choice uses
are drawn from their posterior (Thompson sampling), so that lengths whose
acceptance is still uncertain get tried; before ``min_drafts`` drafts, n = 0
is chosen only when even drafts that are always accepted would not pay. The
draws come from the policy's own generator (``seed``): a policy fed the same
measurements makes the same choices.

**The confidence bound.** An adapter whose draftd reports each draft
token's confidence (``confidence_signal`` in /v1/info) reports them with
:meth:`~LengthPolicy.observe` (``confidences=``, the bound the draft was
asked with and whether the chain stopped on it), and the policy then also
chooses each step's ``min_confidence`` (:attr:`LengthPolicy.bound`) among
``bounds``: the chain stops before its first token whose confidence is below
the bound, so a draft of n has 0 to n tokens, costs one pass more than it
has tokens when it stopped (the pass that found the unsure token), and the
target verifies what it has. For each pair (n, b) (see :class:`_Bounds`)::

    rate(n, b) = E[accepted + 1 | n, b] / Σ_L P(L | n, b) · (T_draft(passes(L)) + T_verify(L + 1))

with L the draft's length under the bound and passes(L) = min(n, L + 1),
and the pair with the most tokens per second is drafted (against plain
decoding as above). What a bound does is learned from the drafts
themselves: a draft asked with bound b0 shows, for every bound b ≥ b0, where
that chain would have stopped and which of its tokens were accepted (its
confidences are all known up to where b stops); bounds below b0 learn
nothing from it. So the first ``explore`` drafts with confidences are asked
with the lowest bound (complete evidence for all), and while drafting every
other probe asks the next lower bound of the grid. Without confidences (a
draftd without the signal, or ``bounds`` of one value) the bound stays
``bounds[0]`` and the choice is the length's alone.

The policy is pure bookkeeping (no clock, no I/O): an adapter calls
:meth:`LengthPolicy.choose` before each step, and reports what it measured
with :meth:`~LengthPolicy.observe` (acceptance), :meth:`~LengthPolicy.draft_time`
and :meth:`~LengthPolicy.verify_time`.
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from typing import Any

__all__ = ["BOUNDS", "GENERATION_PROBE_EVERY", "GENERATION_PROBE_MAX", "LengthPolicy", "confidence_info"]

#: Generations skipped in a row (their drafting would not pay, see
#: LengthPolicy.draft_generation) before one drafts as a probe; the interval
#: doubles up to GENERATION_PROBE_MAX while the probes do not pay.
GENERATION_PROBE_EVERY = 2
GENERATION_PROBE_MAX = 16

#: The confidence bounds the policy chooses among (0: no bound). Finer at the
#: low end: a ``chain_prob`` bound (the product of the chain's probabilities)
#: pays at 0.05–0.1 on the real pair (docs/performance.md, the variant table),
#: where a step of 0.1 cannot tell them apart.
BOUNDS: tuple[float, ...] = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def confidence_info(raw: dict[str, Any]) -> tuple[str | None, float]:
    """What a draftd's /v1/info (``raw``) says about confidence bounds:
    its ``confidence_signal`` (None: the server reports no confidences, a
    bound cannot be asked) and its ``min_confidence`` (the bound of session
    and /v1/drafts requests that send none; 0 when absent or not a number
    in [0, 1])."""
    signal = raw.get("confidence_signal")
    default = raw.get("min_confidence")
    bound = 0.0
    if isinstance(default, (int, float)) and not isinstance(default, bool) and 0 <= default <= 1:
        bound = float(default)
    return (signal if isinstance(signal, str) and signal else None), bound


class _Bounds:
    """What each confidence bound b of a grid would do to drafts, from the
    drafts' own per-token confidences (decayed counts, per draft position j):

    - ``seen[b][j]``, ``kept[b][j]``: drafts whose chain under b reached
      position j (every earlier token's confidence ≥ b), and of those the
      ones whose token j was ≥ b too: the chain's length, whatever the
      target accepted;
    - ``path[b][j]``, ``good[b][j]``: drafts whose tokens before j were all
      kept under b and accepted, and of those the ones whose token j was
      kept and accepted: the accepted tokens.

    A draft asked with bound b0 is complete evidence for every b ≥ b0 up
    to where b stops (or the draft ends without a stop); it says nothing
    about bounds below b0. Without confidences a draft is evidence for b0
    alone (its tokens were kept; the one after, when it stopped, was not)."""

    def __init__(self, n_max: int, bounds: tuple[float, ...], decay: float) -> None:
        self.n_max = n_max
        self.bounds = bounds
        self.decay = decay
        self.weight = 0.0  # what a draft of the current generation counts more (0: no generation begun)
        nb = len(bounds)
        self.seen = [[0.0] * n_max for _ in range(nb)]  # (bounds, n_max)
        self.kept = [[0.0] * n_max for _ in range(nb)]  # (bounds, n_max)
        self.path = [[0.0] * n_max for _ in range(nb)]  # (bounds, n_max)
        self.good = [[0.0] * n_max for _ in range(nb)]  # (bounds, n_max)
        # the same counts of the current generation's drafts alone (not decayed)
        self.gen = [[[0.0] * n_max for _ in range(nb)] for _ in range(4)]  # (seen, kept, path, good)
        self.drafts = 0  # drafts observed with confidences

    def begin_generation(self, weight: float) -> None:
        """Forget the current generation's own counts (the stack's stay);
        from now on they count ``weight`` times more."""
        self.gen = [[[0.0] * self.n_max for _ in self.bounds] for _ in range(4)]
        self.weight = weight

    def observe(self, confidences: list[float] | None, length: int, accepted: int, bound: float,
                stopped: bool) -> None:
        """A draft of ``length`` tokens asked with ``bound`` (stopped: its
        chain stopped on the bound before the next token), the first
        ``accepted`` accepted; ``confidences``: its tokens' (None: unknown)."""
        if confidences is not None:
            self.drafts += 1
        for bi, b in enumerate(self.bounds):
            if b < bound - 1e-9 or (confidences is None and abs(b - bound) > 1e-9):
                continue
            conf = confidences if confidences is not None else [1.0] * length
            gseen, gkept, gpath, ggood = (g[bi] for g in self.gen)
            self._count(self.seen[bi], self.kept[bi], gseen, gkept, conf, b, stopped, None)
            self._count(self.path[bi], self.good[bi], gpath, ggood, conf, b, stopped, accepted)

    def _count(self, tried: list[float], hit: list[float], gtried: list[float], ghit: list[float],
               conf: list[float], b: float, stopped: bool, accepted: int | None) -> None:
        """One walk down the chain under bound b: position j is tried while
        every earlier one was hit (kept, and accepted when ``accepted`` is
        given); positions past the evidence keep theirs, decaying slowly.
        ``gtried``, ``ghit``: the generation's counts (not decayed)."""
        reach = 0  # positions tried
        hits = 0
        for j in range(self.n_max):
            if j < len(conf):
                ok = conf[j] >= b and (accepted is None or j < accepted)
            elif j == len(conf) and stopped:
                ok = False  # the next token's confidence was below the asked bound ≤ b
            else:
                break
            reach = j + 1
            if not ok:
                break
            hits = j + 1
        for j in range(self.n_max):
            g = self.decay if j < reach else self.decay ** 0.125
            tried[j] = g * tried[j] + (1.0 if j < reach else 0.0)
            hit[j] = g * hit[j] + (1.0 if j < hits else 0.0)
            gtried[j] += 1.0 if j < reach else 0.0
            ghit[j] += 1.0 if j < hits else 0.0

    @staticmethod
    def _rates(tried: list[float], hit: list[float], first: float, optimism: float = 0.0,
               evidence: list[float] | None = None) -> list[float]:
        """Posterior means of hit / tried by position, each position's prior
        (weight 2) the estimate of the one before (``first`` for the first);
        ``optimism``: plus that many posterior standard deviations, of as
        many drafts as ``evidence`` counts (None: ``tried``; the weighted
        counts of a generation are not more drafts)."""
        out: list[float] = []
        prev = first
        for j, (t, h) in enumerate(zip(tried, hit)):
            a = h + 2.0 * prev
            q = a / (t + 2.0)
            prev = q
            if optimism:
                m = t if evidence is None else evidence[j]
                q = min(1.0, q + optimism * (q * (1.0 - q) / (m + 3.0)) ** 0.5)
            out.append(q)
        return out

    def model(self, bi: int, optimism: float = 0.0) -> tuple[list[float], list[float]]:
        """(s, r) of bound index bi: s_j the chance the chain under the
        bound keeps position j given it kept the earlier ones, r_j the
        chance position j is kept and accepted given the earlier ones were
        (``optimism``: r_j that many posterior standard deviations above
        its mean)."""
        w = self.weight
        seen, kept, path, good = ([x + w * y for x, y in zip(c[bi], g[bi])]
                                  for c, g in zip((self.seen, self.kept, self.path, self.good), self.gen))
        if self.bounds[bi] <= 0:
            s = [1.0] * self.n_max  # no bound: every token is kept
        else:
            s = self._rates(seen, kept, 1.0)
        return s, self._rates(path, good, 0.5, optimism, self.path[bi])


class LengthPolicy:
    """Chooses each step's draft length in [0, ``n_max``] (see the module).

    ``decay``: the weight of the acceptance seen one draft ago (0.97: about
    the last 33 drafts count). ``probe_every``, ``probe_max``: steps between
    probes (see the module). ``margin``: how much faster than plain decoding
    (a fraction) a length must be expected to be to draft at all.
    ``min_drafts``: drafts observed before n = 0 may be chosen on their
    acceptance; ``explore``: drafts seen before the choice stops drawing
    acceptances from their posterior (see the module); ``seed``: of those
    draws. ``samples``: timing samples kept per verification length.
    ``bounds``: the confidence bounds chosen among once drafts report
    confidences (one value: a fixed bound; see the module).
    ``generation_weight``: how many times more a draft of the current
    generation counts, once :meth:`begin_generation` is called (0: no
    more; see the module)."""

    def __init__(self, n_max: int, *, decay: float = 0.97, probe_every: int = 16, probe_max: int = 256,
                 margin: float = 0.02, min_drafts: int = 8, explore: int = 32, samples: int = 15,
                 seed: int = 0, bounds: tuple[float, ...] = BOUNDS, generation_weight: float = 8.0) -> None:
        if isinstance(n_max, bool) or not isinstance(n_max, int) or n_max < 1:
            raise ValueError(f"n_max {n_max!r} must be an int ≥ 1")
        if not 0 < decay <= 1:
            raise ValueError(f"decay {decay!r} must be in (0, 1]")
        if not (isinstance(probe_every, int) and isinstance(probe_max, int) and 1 <= probe_every <= probe_max):
            raise ValueError(f"probe_every {probe_every!r} and probe_max {probe_max!r}: want 1 ≤ probe_every ≤ probe_max")
        if not margin >= 0:
            raise ValueError(f"margin {margin!r} must be ≥ 0")
        if not generation_weight >= 0:
            raise ValueError(f"generation_weight {generation_weight!r} must be ≥ 0")
        bounds = tuple(sorted(set(float(b) for b in bounds)))
        if not bounds or not all(0 <= b <= 1 for b in bounds):
            raise ValueError(f"bounds {bounds!r} must be one or more numbers in [0, 1]")
        self.n_max = n_max
        self.decay = decay
        self.probe_every = probe_every
        self.probe_max = probe_max
        self.margin = margin
        self.min_drafts = min_drafts
        self.explore = explore
        self.optimism = 1.0
        self._rng = random.Random(seed)
        self.tried = [0.0] * n_max  # (n_max) decayed drafts that reached position j with every earlier one accepted
        self.hit = [0.0] * n_max  # (n_max) decayed drafts whose position j was accepted
        self.generation_weight = float(generation_weight)
        self._gen_w = 0.0  # generation_weight once a generation has begun (before: no generation's counts)
        self.gen_tried = [0.0] * n_max  # (n_max) tried, of the current generation's drafts alone (not decayed)
        self.gen_hit = [0.0] * n_max  # (n_max) hit, of the current generation's drafts alone
        self.generations = 0  # begin_generation() calls
        self._gen_skips = 0  # generations not drafted since the last that was (draft_generation)
        self._gen_interval = GENERATION_PROBE_EVERY  # skipped generations before the next drafts as a probe
        self.generation_probes = 0  # generations drafted as probes
        self.drafts = 0  # drafts observed
        self._calls: deque[tuple[int, float]] = deque(maxlen=32)  # (tokens drafted, seconds) of recent draft calls
        self._prefills: deque[tuple[int, float]] = deque(maxlen=16)  # (tokens, seconds) of recent prompts sent whole
        self._verify: list[deque[float]] = [deque(maxlen=samples) for _ in range(n_max + 2)]  # (n_max + 2) by k
        self._verify_pts: list[tuple[int, float]] | None = None  # (k, median) of measured k; None: stale
        self._warmup = [max(1, n_max // 2), 0]
        self.steps = 0
        self._since_probe = 0
        self._interval = probe_every
        self._probes = 0
        self._moves = 0  # probes that tried a neighbouring length
        self.probing = False  # whether the last choice was a probe
        self.last = n_max  # the last choice
        self._bounds = _Bounds(n_max, bounds, decay)
        self.bound = bounds[0]  # the confidence bound of the last choice (min_confidence; 0: none)
        self._pair = (n_max, bounds[0])  # the best drafting (n, bound) of the last choice

    # -- what the adapter measured -----------------------------------------

    def observe(self, drafted: int, accepted: int, *, confidences: list[float] | None = None,
                bound: float | None = None, stopped: bool = False) -> None:
        """A draft of ``drafted`` tokens, of which the target accepted the
        first ``accepted``. ``bound``: the confidence bound it was asked
        with (None: none, or not known: no evidence about bounds);
        ``stopped``: its chain stopped on the bound (``stop_reason``
        ``"confidence"``); ``confidences``: its tokens' (``drafted`` of
        them). A draft stopped before its first token (0 tokens) counts."""
        accepted = max(0, min(accepted, drafted))
        if bound is not None and drafted >= 0:
            conf = None if confidences is None else [float(c) for c in confidences[:drafted]]
            if conf is None or len(conf) == drafted:
                self._bounds.observe(conf, drafted, accepted, bound, stopped)
        if drafted < 1:
            return
        tried = min(drafted, accepted + 1, self.n_max)  # the positions this draft tried
        for j in range(self.n_max):
            # A position not tried keeps most of its evidence: only probes
            # reach the positions past the current length.
            g = self.decay if j < tried else self.decay ** 0.125
            self.tried[j] = g * self.tried[j] + (1.0 if j < tried else 0.0)
            self.hit[j] = g * self.hit[j] + (1.0 if j < accepted else 0.0)
            self.gen_tried[j] += 1.0 if j < tried else 0.0
            self.gen_hit[j] += 1.0 if j < accepted else 0.0
        self.drafts += 1

    def begin_generation(self) -> None:
        """A new generation starts (an adapter that runs one generation at
        a time calls it before the generation's first step): from now on
        its drafts count ``generation_weight`` times more than a draft of
        the generations before it (see the module), and when drafting
        stopped but could pay for some text (the optimistic best rate
        beats plain decoding), its first step is a probe."""
        self.gen_tried = [0.0] * self.n_max
        self.gen_hit = [0.0] * self.n_max
        self._gen_w = self.generation_weight
        self._bounds.begin_generation(self._gen_w)
        self.generations += 1
        r0 = self.rate(0)
        if self.last == 0 and r0 is not None and self._optimistic_best_rate() >= r0:
            self._since_probe = max(self._since_probe, self._interval)

    def draft_time(self, seconds: float, tokens: int) -> None:
        """A draft call of ``tokens`` drafted tokens took ``seconds``."""
        if tokens >= 1 and seconds >= 0:
            self._calls.append((tokens, float(seconds)))

    def prefill_time(self, seconds: float, tokens: int) -> None:
        """draftd took ``seconds`` to take in a generation's prompt of
        ``tokens`` tokens (sent whole, beside the target's own prompt pass)."""
        if tokens >= 1 and seconds >= 0:
            self._prefills.append((tokens, float(seconds)))

    def t_prefill(self, tokens: int) -> float | None:
        """The expected seconds of draftd's prefill of a prompt of ``tokens``
        tokens: the median of the measured seconds per token, times tokens
        (None: none measured)."""
        if not self._prefills:
            return None
        return tokens * statistics.median(s / t for t, s in self._prefills)

    def drafting_pays(self, prompt_tokens: int, new_tokens: int) -> bool:
        """Whether a generation of at most ``new_tokens`` tokens whose prompt
        draftd would take in as ``prompt_tokens`` tokens should draft at all,
        when draftd shares the target's cores: its prefill of the prompt
        then delays the target's own prompt pass by about its time, which
        the generation's drafted steps must win back. False when the time
        drafting saves over the generation's steps (its first token comes
        from the prompt's pass) at the best drafting rate, with optimistic
        acceptances (as :meth:`best` stops), against plain decoding, is less
        than the prefill's expected time; True while either is not known."""
        tp = self.t_prefill(prompt_tokens)
        r0 = self.rate(0)
        if tp is None or r0 is None:
            return True
        rb = self._optimistic_best_rate()
        if rb <= 0:
            return True
        return max(0, new_tokens - 1) * max(0.0, 1 / r0 - 1 / rb) > tp

    def draft_generation(self, prompt_tokens: int, new_tokens: int) -> bool:
        """The decision for a generation (see :meth:`drafting_pays`, same
        arguments): whether it drafts at all. A generation whose drafting
        would not pay is still drafted, as a probe, after
        ``GENERATION_PROBE_EVERY`` such generations in a row, the interval
        doubling up to ``GENERATION_PROBE_MAX`` while they keep not paying
        (reset by one that pays): a skipped generation gives the policy no
        evidence, and a stack that skipped every generation after a bad one
        would never hear of text drafting pays for. A probe's first step
        drafts (a step probe)."""
        if self.drafting_pays(prompt_tokens, new_tokens):
            self._gen_skips, self._gen_interval = 0, GENERATION_PROBE_EVERY
            return True
        self._gen_skips += 1
        if self._gen_skips <= self._gen_interval:
            return False
        self._gen_skips = 0
        self._gen_interval = min(2 * self._gen_interval, GENERATION_PROBE_MAX)
        self.generation_probes += 1
        self._since_probe = max(self._since_probe, self._interval)
        return True

    def verify_time(self, seconds: float, k: int) -> None:
        """The target took ``seconds`` from the adapter's answer of a draft of
        k − 1 tokens (k = 1: no draft) to its next request."""
        if 1 <= k <= self.n_max + 1 and seconds >= 0:
            self._verify[k].append(float(seconds))
            self._verify_pts = None

    def _verify_medians(self) -> list[tuple[int, float]]:
        """(k, the median of its samples) of every measured k, ascending:
        computed once per new sample (t_verify and _unmeasured read it at
        every choice)."""
        if self._verify_pts is None:
            self._verify_pts = [(j, statistics.median(s)) for j, s in enumerate(self._verify) if s]
        return self._verify_pts

    # -- the model -----------------------------------------------------------

    def acceptance(self, sample: bool = False, optimism: float = 0.0) -> list[float]:
        """q_j, j = 1..n_max: the probability that draft position j is
        accepted given that the positions before it were (the posterior
        mean; ``sample``: a draw from the posterior instead; ``optimism``:
        the mean plus that many posterior standard deviations)."""
        out: list[float] = []
        prev = 0.5
        w = self._gen_w
        for j in range(self.n_max):
            hit = self.hit[j] + w * self.gen_hit[j]
            tried = self.tried[j] + w * self.gen_tried[j]
            a = hit + 2.0 * prev
            b = tried - hit + 2.0 * (1.0 - prev)
            q = a / (a + b)
            # the spread is that of the drafts seen, however a generation's are weighted
            m = self.tried[j] + 2.0
            if sample:
                q = self._rng.betavariate(q * m + 1e-3, (1.0 - q) * m + 1e-3)
            elif optimism:
                q = min(1.0, q + optimism * (q * (1.0 - q) / (m + 1.0)) ** 0.5)
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
        c0, c1 = self._draft_line()
        return c0 + c1 * n

    def _draft_line(self) -> tuple[float, float]:
        """(per call, per token) seconds of the recent draft calls: their
        least-squares line, else (0, the median time per token)."""
        xs = [x for x, _ in self._calls]
        ys = [y for _, y in self._calls]
        if len(set(xs)) >= 2:
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            sxx = sum((x - mx) ** 2 for x in xs)
            c1 = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
            c0 = my - c1 * mx
            if c1 > 0 and c0 >= 0:
                return c0, c1
        return 0.0, statistics.median(y / x for x, y in self._calls)

    def t_verify(self, k: int) -> float | None:
        """The expected seconds of the target's step over k positions: the
        median of its samples, else interpolated between the nearest
        measured lengths; past the longest measured, extrapolated along the
        line from the shortest to the longest measured (not falling), before
        the shortest, the shortest's (None: none measured)."""
        pts = self._verify_medians()
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
        if self.bounded():
            n, bound, rn = self.best_pair()
            self._pair = (n, bound)
            r0 = self.rate(0)
            if r0 is None or rn < 0 or rn >= r0 * (1 + self.margin):
                return n
            # as below: while drafting, stop only when optimism loses too
            if self.last > 0 and self._optimistic_best_rate() >= r0:
                return n
            return 0
        q = self.acceptance(sample=self.drafts < self.explore)
        n, rn = self._best_drafting(q)
        self._pair = (n, self._bounds.bounds[0])
        r0 = self.rate(0)
        if r0 is None or rn < 0:
            return n
        if self.drafts < self.min_drafts:
            perfect = self._best_drafting([1.0] * self.n_max)[1]
            return 0 if perfect < r0 * (1 + self.margin) else n
        if rn >= r0 * (1 + self.margin):
            return n
        # While drafting, stop only when an optimistic estimate of the
        # acceptance loses too: the estimate is of a few dozen drafts, and
        # stopping on its dips would freeze a low one (no drafts, no news).
        if self.last > 0 and self._optimistic_best_rate() >= r0:
            return n
        return 0

    def _optimistic_best_rate(self) -> float:
        """The best drafting rate with every acceptance ``optimism``
        posterior standard deviations above its mean — of the (n, bound)
        pairs once :meth:`bounded`, else of the lengths (−1: not known): what
        stopping, and a generation's decision to draft, weigh against
        plain decoding."""
        if self.bounded():
            return self.best_pair(optimism=self.optimism)[2]
        return self._best_drafting(self.acceptance(optimism=self.optimism))[1]

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

    # -- the confidence bound ------------------------------------------------

    def bounded(self) -> bool:
        """Whether the choice is of (n, bound) pairs: ``explore`` drafts
        reported their confidences, and there is more than one bound."""
        return len(self._bounds.bounds) > 1 and self._bounds.drafts >= self.explore

    def rate_bounded(self, n: int, bound: float) -> float | None:
        """Expected tokens per second of steps of at most n draft tokens
        whose chain stops before its first token below ``bound`` (a value
        of ``bounds``; see the module). None: not known yet."""
        return self._rates_bounded(self._bounds.model(self._bounds.bounds.index(bound)), self._t_drafts(),
                                   self._t_verifies())[n]

    def _rates_bounded(self, model: tuple[list[float], list[float]], d: list[float] | None,
                       vs: list[float | None]) -> list[float | None]:
        """rate_bounded of n = 0..n_max (index n; 0: None) from the bound's
        model (s, r): a draft of at most n has length L < n with chance
        K_L (1 − s_L), K_L = Π_{j<L} s_j, and costs T_draft(L + 1) +
        T_verify(L + 1); length n with chance K_n, T_draft(n) + T_verify(n + 1)."""
        s, r = model
        out: list[float | None] = [None]
        e, run = 1.0, 1.0  # E[accepted + 1 | n]; Π r
        stopped, reach = 0.0, 1.0  # the time of the chains stopped before n, weighted; K_n
        for n in range(1, self.n_max + 1):
            run *= r[n - 1]
            e += run
            # the chain of length n − 1 < n that stopped at position n − 1
            p = reach * (1.0 - s[n - 1])
            if p > 0:
                v = vs[n]
                if d is None or v is None:
                    out.extend([None] * (self.n_max + 1 - n))
                    return out
                stopped += p * (d[n] + v)
            reach *= s[n - 1]
            v = vs[n + 1]
            if d is None or v is None:
                out.append(None)
                continue
            t = stopped + reach * (d[n] + v)
            out.append(e / t if t > 0 else None)
        return out

    def _t_drafts(self) -> list[float] | None:
        """t_draft(p) for p = 0..n_max (None: no call measured)."""
        if not self._calls:
            return None
        c0, c1 = self._draft_line()
        return [0.0] + [c0 + c1 * p for p in range(1, self.n_max + 1)]

    def _t_verifies(self) -> list[float | None]:
        """t_verify(k) for k = 0..n_max + 1 (index 0 unused)."""
        return [None] + [self.t_verify(k) for k in range(1, self.n_max + 2)]

    def best_pair(self, optimism: float = 0.0) -> tuple[int, float, float]:
        """The drafting pair (n ≥ 1, bound) with the most expected tokens
        per second, and that rate (−1: not known; ``optimism``: of the
        acceptances that many posterior standard deviations above their
        means)."""
        d, vs = self._t_drafts(), self._t_verifies()
        best = (self.n_max, self._bounds.bounds[0], -1.0)
        for bi, bound in enumerate(self._bounds.bounds):
            for n, r in enumerate(self._rates_bounded(self._bounds.model(bi, optimism), d, vs)):
                if n >= 1 and r is not None and r > best[2] + 1e-12:
                    best = (n, bound, r)
        return best

    def _lower(self, bound: float) -> float:
        """The grid's bound below ``bound`` (the lowest stays)."""
        bs = self._bounds.bounds
        i = bs.index(bound)
        return bs[max(0, i - 1)]

    # -- the choice ------------------------------------------------------------

    def choose(self) -> int:
        """The draft length of the next step, in [0, n_max]; its confidence
        bound is then :attr:`bound` (send it as ``min_confidence``)."""
        self.steps += 1
        self.probing = False
        self.bound = self._bounds.bounds[0]
        if self._warmup:
            self.last = self._warmup.pop(0)
            return self.last
        b = self.best()
        self.bound = self._pair[1]
        if not self.bounded():
            u = self._unmeasured()
            if u is not None:  # tried once: its verification is measured from then on
                self.probing = True
                self.last = u
                return u
        self._since_probe += 1
        if b == 0:
            if self._since_probe >= self._interval:
                self._since_probe = 0
                self._interval = min(2 * self._interval, self.probe_max)
                self.probing = True
                if self.bounded():
                    b = self._pair[0]
                else:
                    b = self._best_drafting(self.acceptance(sample=self.drafts < self.explore))[0]
        else:
            self._interval = self.probe_every
            if self._since_probe >= self.probe_every:
                self._since_probe = 0
                self._probes += 1
                self.probing = True
                if self.bounded() and self._probes % 2 and self.bound > self._bounds.bounds[0]:
                    self.bound = self._lower(self.bound)  # evidence for the next lower bound
                else:
                    b = self._neighbour(b)
        self.last = b
        return b

    def _unmeasured(self) -> int | None:
        """A length whose verification was never measured and that would be
        the best choice if verifying it cost no more than the longest
        measured length below it (T_verify is not a line: a Q4_K_M target
        verifies 4 positions faster than 3, which the extrapolation of
        :meth:`t_verify` cannot know, so a policy that measured 1 and 2
        positions alone would never try 3 tokens); None when there is none
        (or the draft's time is not known yet)."""
        pts = self._verify_medians()
        r0 = self.rate(0)
        if not pts or r0 is None or not self._calls:
            return None
        q = self.acceptance(optimism=self.optimism)
        best_n, best_rate = None, r0 * (1 + self.margin)
        for n in range(1, self.n_max + 1):
            if self._verify[n + 1]:
                continue
            below = [v for k, v in pts if k < n + 1]
            d = self.t_draft(n)
            if not below or d is None:
                continue
            r = self.expected(n, q) / (d + below[-1])
            if r > best_rate:
                best_n, best_rate = n, r
        return best_n

    def _neighbour(self, b: int) -> int:
        """The length a probe tries while drafting at b: an unmeasured
        length (the most promising), else plain decoding every fourth probe,
        else b + 1 and b − 1 in turn."""
        unmeasured = [n for n in range(1, self.n_max + 1) if not self._verify[n + 1]]
        if unmeasured:
            return max(unmeasured, key=lambda n: self.rate(n) or 0.0)
        self._moves += 1
        if self._moves % 4 == 0:
            return 0
        up, down = min(b + 1, self.n_max), max(b - 1, 1)
        return up if self._moves % 2 else down
