"""The draft-length policy by batch size (draftd.vllm's ``adaptive``): one
:class:`draftd.policy.LengthPolicy` per class of batch sizes — 1, 2–3,
4–7, 8–15, … (from each power of two to the next) — each fed only the
steps of its class.

Why: a served target's step over a batch of B requests verifying k
positions each costs about B·k positions. At B = 1 on a CPU the step is
bound by reading the weights, and k positions cost little more than one
(drafting pays); at B = 8 the step is bound by compute, k positions cost
about k steps, and no draft can pay. One policy fed every step mixes the
two: its verification times, keyed by k only, are a blend of batch sizes,
so it drafts where it loses and stops where it would win. Per class, each
policy measures its own curve and decides on it, with its own probes; at
a batch size where drafting does not pay its class decodes plainly, so the
stack is not slower there than without draftd (up to the probes: at most
one step in ``probe_max`` once a class has decided).

The adapter calls :meth:`BatchPolicy.batch` with the step's batch size
before :meth:`~BatchPolicy.choose`; the reports that follow (``observe``,
``draft_time``, ``verify_time``) go to the class chosen then. Same
interface as LengthPolicy otherwise.
"""

from __future__ import annotations

from typing import Any

from .policy import LengthPolicy

__all__ = ["BatchPolicy"]


class BatchPolicy:
    """LengthPolicy per batch-size class (see the module). ``n_max`` and
    the keyword arguments are every class's LengthPolicy's."""

    def __init__(self, n_max: int, **kwargs: Any) -> None:
        LengthPolicy(n_max, **kwargs)  # checks the arguments once, here
        self.n_max = n_max
        self._kwargs = kwargs
        self.classes: dict[int, LengthPolicy] = {}  # class (floor(log2(batch size))) → its policy
        self._prefills: list[tuple[float, int]] = []  # (seconds, tokens) reported, for classes made later
        self.current = self.at(1)

    @staticmethod
    def size_class(rows: int) -> int:
        """The class of a batch of ``rows`` requests: floor(log2(rows))
        (0 for 1 row, 1 for 2–3, 2 for 4–7, …)."""
        return max(1, int(rows)).bit_length() - 1

    def at(self, rows: int) -> LengthPolicy:
        """The policy of a batch of ``rows`` requests (made when first
        needed)."""
        c = self.size_class(rows)
        p = self.classes.get(c)
        if p is None:
            p = self.classes[c] = LengthPolicy(self.n_max, **self._kwargs)
            for seconds, tokens in self._prefills:
                p.prefill_time(seconds, tokens)
        return p

    def batch(self, rows: int) -> None:
        """The next step's batch size: choose() and the reports after it
        go to its class."""
        self.current = self.at(rows)

    def choose(self) -> int:
        return self.current.choose()

    @property
    def bound(self) -> float:
        """The confidence bound of the last choice (LengthPolicy.bound)."""
        return self.current.bound

    def observe(self, drafted: int, accepted: int, **evidence: Any) -> None:
        """LengthPolicy.observe, with its keyword-only evidence
        (confidences, bound, stopped)."""
        self.current.observe(drafted, accepted, **evidence)

    def draft_time(self, seconds: float, tokens: int) -> None:
        self.current.draft_time(seconds, tokens)

    def verify_time(self, seconds: float, k: int) -> None:
        self.current.verify_time(seconds, k)

    def prefill_time(self, seconds: float, tokens: int) -> None:
        """LengthPolicy.prefill_time, told to every class (a prefill's cost
        does not depend on the batch it joins)."""
        self._prefills = (self._prefills + [(seconds, tokens)])[-16:]
        for p in self.classes.values():
            p.prefill_time(seconds, tokens)

    def draft_generation(self, prompt_tokens: int, new_tokens: int) -> bool:
        """LengthPolicy.draft_generation of the current class."""
        return self.current.draft_generation(prompt_tokens, new_tokens)
