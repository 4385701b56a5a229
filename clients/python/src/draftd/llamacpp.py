"""draftd as the draft model of llama-cpp-python's speculative decoding.

:class:`DraftdDraftModel` is a ``llama_cpp.llama_speculative.LlamaDraftModel``:
``Llama(model_path=..., draft_model=DraftdDraftModel("http://127.0.0.1:8080"))``
and every generation of that ``Llama`` (``generate``, ``create_completion``,
``create_chat_completion``) drafts through a draftd server. :func:`generate`
runs one greedy generation with it and returns the tokens with the
acceptance of every verification step (:class:`Acceptance`).

How llama-cpp-python verifies (read in 0.3.36, ``Llama.generate``): after
each token it asks the draft model for a draft of the whole context,
evaluates the token and the draft in one batch (``logits_all`` is forced on
with a draft model), then samples position after position as long as the
sampled token equals the draft's token there, so one verification step
yields every accepted draft token plus the target's own next token (greedy:
``temp=0``). The first token of a generation comes from the prompt's pass,
before any draft. Drafts carry no probabilities: with sampling
(``temp > 0``) verification is not the lossless speculative sampling rule.

Every position's logits: llama-cpp-python computes them in every batch of a
``Llama`` made with a draft model, its prompt's pass included (the output
layer at every prompt position: a fifth of a long prompt's pass on the
Q4_K_M 1.5B target); :func:`generate` computes them only where a draft is
verified (:func:`verify_logits_only`). A ``Llama`` whose ``n_ctx`` exceeds
its ``n_batch`` needs ``logits_all=True`` to verify drafts past position
``n_batch`` (llama-cpp-python sizes ``scores`` by the flag it was given):
:func:`generate` says so before it starts.

What it sends. Through a :class:`draftd.Session` (``session=True``, the
default): the whole context once, then each step only how many of the last
draft's tokens the target accepted and its bonus token; the whole context
again when the server lost the session (409) or after a failed request. A
new generation (a context that does not extend the last one) re-establishes
the session with its whole context. ``session=False`` sends the whole
context to ``/draft`` every step.

Failures never fail a generation: a draftd that is down, answers an error
or does not answer within ``timeout`` (the whole step: a session's resend
after 409 included) costs that step an empty draft (the target decodes one
token, as without a draft model), counted in
:attr:`DraftdDraftModel.misses` (by kind in ``miss_kinds``). After a miss
no request is sent for ``cooldown`` seconds (those steps draft nothing and
count in ``skipped``), so a draftd that hangs costs one timeout per
cooldown, not one per token. A permanent error (400, 404, 405, 413, 422:
the request is wrong, not the server busy) is logged once at WARNING and
has no cooldown. A draft holding an id the target cannot take (outside
[0, its ``n_vocab``)) is dropped (``invalid``): llama.cpp would fail the
generation on it.

The handshake: draftd's ``/v1/info`` is read when the draft model is built
(and again after a failed connection, a lost session or a permanent
error). A draftd vocabulary larger than the target's is an error naming
both sizes — at construction with ``n_vocab``, else when :func:`generate`
starts (a plain ``create_completion`` logs it and drafts nothing); ``n``
above the server's ``max_draft_len`` is clipped to it with one warning.

No wasted drafts: inside :meth:`DraftdDraftModel.budget` (which
:func:`generate` uses) a draft is never longer than the tokens the
generation may still add minus the target's bonus token, and a step with
no room sends no request. Without a budget (a plain ``create_completion``)
the draft model cannot see ``max_tokens``: it asks for ``n`` and
llama-cpp-python stops at ``max_tokens`` whatever was verified.

Not here: batches (llama-cpp-python generates one sequence at a time);
drafting before the first token (llama-cpp-python samples it from the
prompt's pass without asking the draft model). llama_cpp is imported by
this module only: ``import draftd`` does not need it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import httpx
import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel

from .client import Client
from .errors import APIError, DraftdError, TransportError
from .policy import BOUNDS, LengthPolicy, confidence_info
from .session import Session, SessionStats
from .types import Info, check_min_confidence

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["Acceptance", "DraftdDraftModel", "Generation", "generate", "verify_logits_only", "TESTED_LLAMA_CPP_PYTHON"]

#: The llama-cpp-python versions this draft model was tested with (the
#: ``llamacpp`` extra of pyproject.toml).
TESTED_LLAMA_CPP_PYTHON = ">=0.3.36,<0.4"

_EMPTY: npt.NDArray[np.intc] = np.zeros(0, dtype=np.intc)

log = logging.getLogger("draftd.llamacpp")

#: Statuses that say the request is wrong, not the server busy (draftd.vllm's).
PERMANENT = frozenset({400, 404, 405, 413, 422})


@dataclass
class Acceptance:
    """The verification steps of one generation, in order: ``drafted[i]``
    draft tokens proposed at step i, ``accepted[i]`` of them the target
    accepted. Step 0 is the prompt's pass (no draft). The target adds one
    token per step, except that the last step may be cut by ``max_tokens``
    (or EOS): ``tokens`` is what the generation produced."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    tokens: int = 0

    @property
    def steps(self) -> int:
        return len(self.accepted)

    @property
    def tau(self) -> float:
        """Mean acceptance length: tokens per verification step."""
        return self.tokens / self.steps if self.steps else 0.0

    def by_position(self, n: int) -> tuple[list[int], list[int]]:
        """(reached, accepted) of positions 0..n-1: how many steps' drafts
        had a token at position i, and how many of those were accepted
        (``draftd eval``'s ``position_reached`` / ``position_accepted``)."""
        reached, acc = [0] * n, [0] * n
        for d, a in zip(self.drafted, self.accepted):
            for i in range(min(d, n)):
                reached[i] += 1
            for i in range(min(a, n)):
                acc[i] += 1
        return reached, acc


@dataclass
class Generation:
    """What :func:`generate` returns: the generated ``tokens`` (EOS
    included when the target produced it), their :class:`Acceptance`, and
    ``seconds`` of wall time (prompt included)."""

    tokens: list[int]
    acceptance: Acceptance
    seconds: float


@dataclass
class _Pending:
    """The last draft returned: the context it continued, the draft, and
    when the call that returned it returned."""

    context: list[int]
    draft: list[int]
    t: float = 0.0
    bound: float | None = None  # the confidence bound the draft was asked with (None: none, or not known)
    confidences: list[float] | None = None  # its tokens' confidences, when the answer had them
    stopped: bool = False  # its chain stopped on the bound (stop_reason "confidence")


class DraftdDraftModel(LlamaDraftModel):
    """A llama-cpp-python draft model that drafts through draftd.

    ``url``: the draftd server. ``n``: draft tokens asked per step (≥ 1; at
    most the server's ``--max-draft-len``). ``strategy``: one of the
    server's strategies (``model``, ``lookup``, ``hybrid``, ``pld``; None:
    its ``--strategy``). ``timeout``: seconds a request may take (connect
    included) before the step drafts nothing; the first request of a
    generation sends the whole prompt, which the server prefills, so it is
    allowed ``first_timeout``; each bounds the whole step, a resend
    included. ``cooldown``: seconds without requests after a miss.
    ``session``: draft through a session (see the module).
    ``adaptive``: choose each draft's length in [0, n] from this model's own
    measured acceptance by position, draft call times and the target's time
    per verification length (n: the most it asks; 0: no request and an
    empty draft, while drafting does not pay; see
    :class:`draftd.policy.LengthPolicy`), and, when draftd reports its
    tokens' confidences (``confidence_signal`` in /v1/info) and
    ``min_confidence`` is None, each draft's confidence bound with it (the
    policy's ``bound``, sent as ``min_confidence``, each answer asked for its
    confidences); each generation (a :meth:`budget`, else a call whose
    context does not extend the last call's) begins a generation of the policy
    (:meth:`draftd.policy.LengthPolicy.begin_generation`: its own drafts'
    acceptance counts most); off, every draft asks n. ``client``:
    a :class:`draftd.Client` of your own instead of one made from ``url``
    (its timeouts and retries are then yours; it is not closed by
    :meth:`close`). ``n_vocab``: the target's vocabulary size (None: read
    from the ``Llama`` that calls the draft model, or given by
    :func:`generate`); draft ids must be below it. ``min_confidence``: a
    confidence bound sent with every draft request (0 ≤ x ≤ 1: the draft
    stops before the first token below it; None: not sent, the server's
    ``--min-confidence`` for sessions, exactly n tokens without a session).
    ``context``: the most prompt tokens draftd sees (None: all): a
    generation's drafts are made from the last ``context`` tokens of its
    prompt and every token after them, so draftd prefills at most
    ``context`` tokens per prompt — on cores the target shares, draftd's
    prefill of a prompt delays the target's own prompt pass by about its
    time (the 0.5B drafter on the 2-core Ice Lake Xeon: 2.2 ms per token, a
    sixth of the Q4_K_M 1.5B target's own pass); a
    draft from a shorter window is the same proposal a document starting
    there would get, and the target verifies it as any other.
    ``shared_cores``: draftd runs on the target's cores (the default), so
    with ``adaptive`` a budgeted generation (:meth:`budget`) drafts at all
    only when the time the policy expects drafting to save over its
    ``max_tokens`` exceeds draftd's measured prefill of its prompt
    (:meth:`draftd.policy.LengthPolicy.draft_generation`, with probes); a generation that
    would not win it back sends nothing and counts in
    ``skipped_generations``. False: draftd's prefill costs the target
    nothing (cores of its own), every generation drafts.

    Counters: ``calls`` (steps that asked for a draft), ``requests`` (sent,
    primes included), ``primes`` (prompts sent ahead, :meth:`prime`; their
    time in ``prime_seconds``),
    ``misses`` (failed or timed out: an empty draft), ``skipped`` (no
    request: cooldown), ``miss_kinds`` (misses by exception class name),
    ``draft_seconds`` (time spent waiting for draftd, misses included),
    ``invalid`` (drafts dropped: an id the target cannot take),
    ``skipped_generations`` (budgeted generations that drafted nothing:
    their prefill would not pay, ``shared_cores``),
    ``handshakes`` (reads of /v1/info), :attr:`session_stats`. Not
    thread-safe: one generation at a time.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        n: int = 8,
        strategy: str | None = None,
        timeout: float = 2.0,
        first_timeout: float = 30.0,
        cooldown: float = 1.0,
        session: bool = True,
        adaptive: bool = False,
        client: Client | None = None,
        n_vocab: int | None = None,
        min_confidence: float | None = None,
        context: int | None = None,
        shared_cores: bool = True,
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n {n!r} must be an int ≥ 1")
        if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
            raise ValueError(f"context {context!r} must be an int ≥ 1 or None")
        for name, v in (("timeout", timeout), ("first_timeout", first_timeout)):
            if not (isinstance(v, (int, float)) and v > 0):
                raise ValueError(f"{name} {v!r} must be a number of seconds > 0")
        if not (isinstance(cooldown, (int, float)) and cooldown >= 0):
            raise ValueError(f"cooldown {cooldown!r} must be a number of seconds ≥ 0")
        if strategy is not None and not isinstance(strategy, str):
            raise TypeError(f"strategy is {type(strategy).__name__}; want a str or None")
        if n_vocab is not None and (isinstance(n_vocab, bool) or not isinstance(n_vocab, int) or n_vocab < 1):
            raise ValueError(f"n_vocab {n_vocab!r} must be an int ≥ 1 or None")
        if min_confidence is not None:
            min_confidence = check_min_confidence(min_confidence)
        self.n = n
        self.strategy = strategy
        self.timeout = float(timeout)
        self.first_timeout = float(first_timeout)
        self.cooldown = float(cooldown)
        self._own = client is None
        # No retries: a 503 is a miss now, not a wait (the target does not wait).
        self.client = client if client is not None else Client(url, timeout=httpx.Timeout(first_timeout), max_retries=0)
        self.min_confidence = min_confidence
        self._session: Session | None = (self.client.session(n=n, strategy=strategy, min_confidence=min_confidence,
                                                             confidences=adaptive)
                                         if session else None)
        self.calls = 0
        self.requests = 0
        self.misses = 0
        self.skipped = 0
        self.miss_kinds: collections.Counter[str] = collections.Counter()
        self.draft_seconds = 0.0
        self._quiet_until = 0.0
        self._last_sent: list[int] | None = None  # the whole context of the last request that succeeded
        self.context = context
        self.shared_cores = bool(shared_cores)
        self.skipped_generations = 0
        self._skip = False  # this budgeted generation drafts nothing: its prefill would not pay
        self._offset = 0  # where this generation's window starts in its context (context: the first token sent)
        self._primer: threading.Thread | None = None
        self.primes = 0
        self.prime_seconds = 0.0
        self._pending: _Pending | None = None
        self._prompt_len = 0
        self._end: int | None = None  # context length at which the budgeted generation ends
        self._acc: Acceptance | None = None
        # A bound of the caller's is the policy's only one: it chooses the length alone.
        self._adaptive = (LengthPolicy(n, bounds=BOUNDS if min_confidence is None else (min_confidence,))
                          if adaptive else None)
        self.confidence_signal: str | None = None  # /v1/info's: draftd reports draft tokens' confidences
        self.server_bound: float | None = None  # /v1/info's min_confidence: a session's bound when it sends none
        self.unresolved = 0
        self.n_vocab = n_vocab
        self.info: Info | None = None  # draftd's /v1/info, from the handshake
        self.invalid = 0
        self.handshakes = 0
        self._nmax = n  # n clipped to the server's max_draft_len
        self._stale = True
        self._warned: set[str] = set()
        try:
            with self.client.deadline(self.timeout):
                self._handshake()
        except DraftdError as e:
            log.warning("draftd draft model: %s does not answer /v1/info (%s); the handshake is done at the "
                        "first step it answers", self.client.base_url, e)

    @property
    def session_stats(self) -> SessionStats | None:
        """The requests the session sent by form (None without a session)."""
        return self._session.stats if self._session is not None else None

    @contextlib.contextmanager
    def budget(self, prompt_len: int, max_tokens: int | None) -> Iterator[Acceptance]:
        """Within the block, one generation of at most ``max_tokens`` tokens
        after a prompt of ``prompt_len`` tokens: drafts never run past its
        end (``max_tokens`` None: drafts of ``n`` whatever the room, as
        ``draftd eval`` replays them), and its steps are counted in the
        :class:`Acceptance` yielded. The last step's acceptance shows only
        in the output: call :meth:`finish` with it before the block ends
        (:func:`generate` does)."""
        for name, v in (("prompt_len", prompt_len), ("max_tokens", max_tokens)):
            if v is None and name == "max_tokens":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} {v!r} must be an int ≥ 1")
        acc = Acceptance(drafted=[0], accepted=[0])  # step 0: the prompt's pass
        self._prompt_len, self._acc, self._pending = prompt_len, acc, None
        self._end = None if max_tokens is None else prompt_len + max_tokens
        pol = self._adaptive
        if pol is not None:
            pol.begin_generation()  # before its decision: the stack's estimate, not the last generation's
        sent = prompt_len if self.context is None else min(prompt_len, self.context)
        self._skip = (pol is not None and self.shared_cores and max_tokens is not None
                      and not pol.draft_generation(sent, max_tokens))
        self.skipped_generations += self._skip
        try:
            yield acc
        finally:
            self._end, self._acc, self._pending, self._skip = None, None, None, False

    def finish(self, output: Sequence[int]) -> None:
        """Ends the budgeted generation whose whole output (prompt +
        generated tokens) is ``output``: the last draft's acceptance is its
        longest common prefix with what followed it (what ``draftd eval``
        counts when the continuation ends inside a draft), and ``tokens``
        the generated count."""
        acc = self._acc
        if acc is None:
            raise RuntimeError("finish() outside budget()")
        out = [int(t) for t in output]
        p = self._pending
        if p is not None:
            if out[: len(p.context)] != p.context:
                raise ValueError("finish(): the output does not extend the last drafted context")
            acc.accepted.append(_common_prefix(p.draft, out[len(p.context):]))
            self._pending = None
        acc.tokens = len(out) - self._prompt_len

    def prime(self, prompt: Sequence[int]) -> None:
        """Sends ``prompt`` to draftd now, in a background thread, so that
        the server prefills it while the target runs the prompt's pass: the
        first draft of the generation (after the target's first token) is
        then an incremental request that finds the prompt's KV cached. The
        next call waits for it; a failure only means that call sends the
        whole context. :func:`generate` primes every generation."""
        self._join()
        ctx = [int(t) for t in prompt]
        if not ctx:
            raise ValueError("prompt is empty")

        if time.monotonic() < self._quiet_until or self._skip:
            return
        self._offset = self._window(ctx)
        view = ctx[self._offset:]

        def send() -> None:
            t0 = time.monotonic()
            try:
                with self._timeout(httpx.Timeout(self.first_timeout)), self.client.deadline(self.first_timeout):
                    if self._stale:
                        self._handshake()
                    whole = self._session.stats.tokens if self._session is not None else 0
                    if self._session is not None:
                        self._session.draft(view, n=1)
                    else:
                        self.client.draft(view, 1, strategy=self.strategy)
                self._last_sent = ctx
                if self._adaptive is not None and (self._session is None or self._session.stats.tokens > whole):
                    self._adaptive.prefill_time(time.monotonic() - t0, len(view))  # sent whole: a prefill
            except (DraftdError, ValueError) as e:
                self._missed(e)
            except Exception as e:  # noqa: BLE001 - a bug here must not fail the generation
                log.exception("draftd draft model: unexpected error priming")
                self._missed(e)
            finally:
                self.prime_seconds += time.monotonic() - t0

        self.primes += 1
        self.requests += 1
        self._primer = threading.Thread(target=send, name="draftd-prime", daemon=True)
        self._primer.start()

    def _join(self) -> None:
        if self._primer is not None:
            self._primer.join()
            self._primer = None

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        ctx: list[int] = input_ids.tolist()
        self.calls += 1
        self._join()
        now = time.perf_counter()
        p = self._pending
        if (self._adaptive is not None and self._acc is None
                and (p is None or len(ctx) <= len(p.context) or ctx[: len(p.context)] != p.context)):
            self._adaptive.begin_generation()  # outside budget() (a server's requests): a context that does not extend the last
        self._resolve(ctx, now)
        room = 0 if self._skip else self.n if self._adaptive is None else self._adaptive.choose()
        room = min(room, self._nmax)
        if self._end is not None:
            room = min(room, self._end - len(ctx) - 1)  # the target's bonus token must still fit
        pending = _Pending(ctx, [])
        if room > 0:
            pending = self._draft(ctx, room)
        draft = pending.draft
        if self._acc is not None:
            self._acc.drafted.append(len(draft))
        pending.t = time.perf_counter()
        self._pending = pending
        return np.asarray(draft, dtype=np.intc) if draft else _EMPTY

    def _resolve(self, ctx: list[int], now: float) -> None:
        """Counts the last draft's acceptance from the context that follows
        it (the last context + draft[:k] + [the target's token]). A context
        that does not extend it starts a new generation; inside
        :meth:`budget` that is not llama-cpp-python's loop as tested, and
        is counted in ``unresolved`` (the step's acceptance is unknown)."""
        p = self._pending
        if p is None:
            return
        self._pending = None
        c = len(p.context)
        k = len(ctx) - c - 1
        if 0 <= k <= len(p.draft) and ctx[c: c + k] == p.draft[:k] and ctx[:c] == p.context:
            if self._acc is not None:
                self._acc.accepted.append(k)
            if self._adaptive is not None:
                self._adaptive.observe(len(p.draft), k, confidences=p.confidences, bound=p.bound, stopped=p.stopped)
                self._adaptive.verify_time(now - p.t, len(p.draft) + 1)  # the target since the answer
        elif self._acc is not None:
            self.unresolved += 1

    def _bound(self) -> float | None:
        """The confidence bound of this step's request: the adaptive
        policy's (when draftd reports confidences and the caller gave
        none), else the caller's ``min_confidence`` (None: not sent)."""
        if self._adaptive is not None and self.confidence_signal and self.min_confidence is None:
            return self._adaptive.bound
        return self.min_confidence

    def _draft(self, ctx: list[int], n: int) -> _Pending:
        """This step's draft of at most n tokens after ctx (an empty one on
        a miss), with what the policy learns from it."""
        now = time.monotonic()
        none = _Pending(ctx, [])
        if now < self._quiet_until:
            self.skipped += 1
            return none
        # The server prefills what it has not seen: a context that does not
        # extend the last one sent (a new generation) may take first_timeout.
        last = self._last_sent
        first = last is None or len(ctx) <= len(last) or ctx[: len(last)] != last
        if first:
            self._offset = self._window(ctx)
        view = ctx[self._offset:]
        seconds = self.first_timeout if first else self.timeout
        vocab = self.n_vocab if self.n_vocab is not None else self._caller_vocab()
        s = self._session
        self.requests += 1
        try:
            # One deadline for the step: the handshake, the request and a
            # session's resend after 409.
            with self._timeout(httpx.Timeout(seconds)), self.client.deadline(seconds):
                if self._stale:
                    self._handshake(vocab)
                elif self.info is not None:
                    self._check_vocab(self.info, vocab)  # a target found since the handshake
                resent = s.stats.resent if s is not None else 0
                catchup = s.stats.catchup if s is not None else 0
                bound = self._bound()
                if s is not None:
                    d = s.draft(view, n=n, min_confidence=bound)
                else:
                    d = self.client.draft(view, n, strategy=self.strategy, min_confidence=bound,
                                          confidences=self._adaptive is not None)
                if s is not None and s.stats.resent != resent:
                    self._stale = True  # the server lost the session: perhaps a restarted one
        except (DraftdError, ValueError) as e:
            self._missed(e)
            return none
        except Exception as e:  # noqa: BLE001 - a bug here must not fail the generation
            log.exception("draftd draft model: unexpected error; no draft this step")
            self._missed(e)
            return none
        finally:
            self.draft_seconds += time.monotonic() - now
        # a first request's time is the prompt's prefill; a catch-up's (steps without
        # a draft before it) includes those steps' tokens: neither is a draft call's time
        if self._adaptive is not None and not first and (s is None or s.stats.catchup == catchup):
            # a bounded chain stops after the pass that found a token below the bound
            passes = min(n, len(d.tokens) + 1) if d.stop_reason == "confidence" else n
            self._adaptive.draft_time(time.monotonic() - now, passes)
        self._last_sent = ctx
        draft = d.tokens[:n]
        limit = vocab if vocab is not None else self.info.vocab_size if self.info is not None else None
        if limit is not None and any(not 0 <= t < limit for t in draft):
            self.invalid += 1
            self._warn_once("invalid", "draftd draft model: dropped a draft with an id outside the target's "
                            "vocabulary [0, %d): %s", limit, str(draft)[:80])
            return none
        # What the draft says about confidence bounds: the bound in force
        # (the server's --min-confidence for a session that sent none) when
        # the answer says why its chain ended.
        asked = bound if bound is not None else self.server_bound if s is not None else 0.0
        known = d.stop_reason is not None and asked is not None
        conf = d.confidences[: len(draft)] if d.confidences is not None else None
        return _Pending(ctx, draft, bound=asked if known else None, confidences=conf,
                        stopped=d.stop_reason == "confidence")

    def _window(self, ctx: list[int]) -> int:
        """Where a generation whose first context sent is ctx starts its
        window (``context``)."""
        return 0 if self.context is None else max(0, len(ctx) - self.context)

    def _caller_vocab(self) -> int | None:
        """The vocabulary size of the Llama whose generate() called this
        draft model (``self.draft_model(...)`` in llama-cpp-python 0.3.x:
        its frame's ``self``), kept once found; None when it is not there."""
        try:
            f: FrameType | None = sys._getframe(2)  # __call__ → _draft → here: 2 up is llama's generate
            while f is not None:
                cand = f.f_locals.get("self")
                if cand is not None and cand is not self and callable(getattr(cand, "n_vocab", None)) and \
                        getattr(cand, "draft_model", None) is self:
                    v = cand.n_vocab()
                    if isinstance(v, int) and v > 0:
                        self.n_vocab = v
                        return v
                f = f.f_back
        except Exception:  # noqa: BLE001 - llama-cpp-python changed: no check against the target
            pass
        return None

    def check(self, n_vocab: int | None = None) -> None:
        """The handshake now (:func:`generate` calls it before a
        generation): raises ValueError naming both sizes when draftd's
        vocabulary is larger than the target's (``n_vocab``, else the one
        given or found before). A draftd that does not answer is not an
        error here: its steps miss."""
        if n_vocab is not None:
            self.n_vocab = n_vocab
        if self.info is not None and not self._stale:
            self._check_vocab(self.info, self.n_vocab)
            return
        try:
            with self.client.deadline(self.timeout):
                self._handshake()
        except DraftdError as e:
            log.warning("draftd draft model: /v1/info: %s", e)

    def _handshake(self, vocab: int | None = None) -> None:
        """Reads /v1/info: the vocabularies (ValueError naming both sizes
        when draftd's is larger than the target's) and n clipped to the
        server's max_draft_len (one warning)."""
        info = self.client.info()
        self.handshakes += 1
        self._check_vocab(info, self.n_vocab if vocab is None else vocab)
        self.info = info
        self.confidence_signal, self.server_bound = confidence_info(info.raw)
        self._nmax = min(self.n, info.max_draft_len)
        if self._nmax < self.n:
            self._warn_once("max_draft_len", "draftd draft model: n = %d is above draftd's --max-draft-len %d: "
                            "drafts are clipped to %d tokens", self.n, info.max_draft_len, self._nmax)
        self._stale = False

    def _check_vocab(self, info: Info, vocab: int | None) -> None:
        if vocab is not None and info.vocab_size > vocab:
            self.info = None
            self._stale = True
            raise ValueError(f"draftd at {self.client.base_url} drafts from a vocabulary of {info.vocab_size} "
                             f"tokens; the target's has {vocab}: its drafts could hold ids the target cannot take")

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)

    def _missed(self, e: Exception) -> None:
        self._last_sent = None
        self.misses += 1
        self.miss_kinds[type(e).__name__] += 1
        if isinstance(e, APIError) and e.status in PERMANENT:
            # The request is wrong: no cooldown (waiting does not fix it);
            # read /v1/info again, the server's limits may have changed.
            self._stale = True
            self._warn_once(f"{e.status} {e.code}", "draftd at %s refused a draft request (%s): the request is "
                            "wrong, not the server busy; such steps draft nothing", self.client.base_url, e)
            return
        if isinstance(e, ValueError):
            self._warn_once("vocab", "draftd draft model: %s", e)  # a vocabulary mismatch found in a step
        if isinstance(e, TransportError):
            self._stale = True  # perhaps another server when it answers again
        self._quiet_until = time.monotonic() + self.cooldown

    @contextlib.contextmanager
    def _timeout(self, t: httpx.Timeout) -> Iterator[None]:
        http = getattr(self.client, "_http", None)
        if not self._own or http is None:
            yield
            return
        old = http.timeout
        http.timeout = t
        try:
            yield
        finally:
            http.timeout = old

    def close(self) -> None:
        """Deletes the session on the server (errors ignored: it expires
        anyway) and closes the client made from ``url``."""
        self._join()
        if self._session is not None:
            try:
                self._session.close()
            except DraftdError:
                pass
        if self._own:
            self.client.close()

    def __enter__(self) -> DraftdDraftModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@contextlib.contextmanager
def verify_logits_only(llama: Llama) -> Iterator[None]:
    """Within the block, ``llama`` computes every position's logits only in
    the batches that verify a draft (the token and its draft, after the
    prompt's pass); the prompt's pass and the steps without a draft compute
    their last position's alone, as llama.cpp without a draft model does.

    llama-cpp-python turns ``logits_all`` on for the whole life of a
    ``Llama`` made with a draft model, so its prompt's pass computes the LM
    head over every prompt position: on a 1,317-token prompt of the Q4_K_M
    1.5B target (2 cores, Ice Lake Xeon) 21–22 s against 17–19 s without —
    a cost drafting has to win back before it saves anything. The logits
    row of each position that chose a token is still kept in
    ``llama.scores`` (the near-tie rule reads them); the other prompt rows
    are not, so ``logprobs`` of the prompt need a ``Llama`` outside this
    block. Does nothing for a ``Llama`` made without a draft model or
    ``logits_all`` (a draft needs every position's logits: that ``Llama``
    cannot verify one either way) or without the private ``_logits_all`` of
    the tested versions (:data:`TESTED_LLAMA_CPP_PYTHON`)."""
    scores = getattr(llama, "scores", None)
    if getattr(llama, "_logits_all", None) is not True or scores is None:
        yield
        return
    own = vars(llama).get("eval")  # an eval the caller set on the instance (a timer): wrapped, then restored
    orig = llama.eval
    n_vocab = llama.n_vocab()

    def eval(tokens: Sequence[int]) -> None:  # noqa: A001 - it is Llama.eval
        drafted = llama.n_tokens > 0 and len(tokens) > 1  # the token and a draft after it
        llama._logits_all = drafted
        try:
            orig(tokens)
        finally:
            llama._logits_all = True
        if not drafted and 0 < llama.n_tokens <= llama.scores.shape[0]:
            # the last position's row, as eval keeps every row with logits_all
            row = np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(n_vocab,))
            llama.scores[llama.n_tokens - 1, :] = row

    llama.eval = eval  # type: ignore[method-assign]  # generate() calls self.eval: the instance's
    try:
        yield
    finally:
        if own is None:
            del llama.eval
        else:
            llama.eval = own  # type: ignore[method-assign]
        llama._logits_all = True


def generate(llama: Llama, prompt: Sequence[int], max_tokens: int, *, stop: Sequence[int] | None = None,
             budget: bool = True, on_token: Callable[[int], None] | None = None) -> Generation:
    """Greedy ``llama.generate`` (``temp=0``, no penalties) of at most
    ``max_tokens`` tokens after ``prompt`` (token ids), the whole prompt
    evaluated (no prefix kept from an earlier generation, so the output does
    not depend on what ran before), stopping after a
    token of ``stop`` (default: the model's EOS). With a
    :class:`DraftdDraftModel` as ``llama.draft_model`` its drafts are
    budgeted (:meth:`DraftdDraftModel.budget`; ``budget=False``: every
    draft asks for n, as ``draftd eval`` replays, which changes no output)
    and the result carries the acceptance of every step; with no draft
    model it is plain greedy decoding (``acceptance`` empty). Another kind
    of draft model raises.

    ``on_token``: called with each generated token as it is emitted, once
    each and in order — exactly the ``tokens`` returned, the stop token
    included, none verified past it — while the generation runs: a
    verification step that accepts k draft tokens calls it k + 1 times in a
    row (after the step's batch is evaluated, no draft or evaluation
    between them), so a timer sees when each token became known. Its time
    counts in ``seconds``; an exception it raises ends the generation and
    propagates (no :class:`Generation`)."""
    dm = llama.draft_model
    if dm is not None and not isinstance(dm, DraftdDraftModel):
        raise TypeError(f"llama.draft_model is a {type(dm).__name__}; want a DraftdDraftModel or None")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens {max_tokens!r} must be an int ≥ 1")
    ids = [int(t) for t in prompt]
    if not ids:
        raise ValueError("prompt is empty")
    ends = {llama.token_eos()} if stop is None else {int(t) for t in stop}
    if dm is not None:
        dm.check(llama.n_vocab())  # draftd's vocabulary must fit the target's
        rows, n_ctx = llama.scores.shape[0], llama.n_ctx()
        if rows < n_ctx:
            # llama-cpp-python sizes scores by the logits_all it was given, not the one
            # a draft model forces: verifying a draft past row `rows` fails (ValueError)
            raise ValueError(f"this Llama keeps the logits of {rows} positions (n_batch) but its context holds "
                             f"{n_ctx}: llama-cpp-python fails verifying a draft past position {rows}; "
                             "make it with logits_all=True (or n_ctx ≤ n_batch)")
    out: list[int] = []
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        acc = stack.enter_context(dm.budget(len(ids), max_tokens if budget else None)) if dm is not None else Acceptance()
        if dm is not None:
            dm.prime(ids)
        # The whole prompt evaluated, whatever ran before: llama-cpp-python
        # would keep the KV of the prefix shared with the last generation and
        # evaluate only the rest, its last position alone when the prompt is
        # the same — logits that differ from a batched pass in their last
        # bits, which can flip a near-tie (docs/serving.md, llama.cpp).
        cast(Any, llama).reset()  # untyped in llama-cpp-python 0.3.x
        stack.enter_context(verify_logits_only(llama))
        gen = llama.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True)
        stack.callback(gen.close)
        for tok in gen:
            t = int(tok)
            out.append(t)
            if on_token is not None:
                on_token(t)
            if t in ends or len(out) >= max_tokens:
                break
        if dm is not None:
            dm.finish(ids + out)
        else:
            acc.tokens = len(out)
    return Generation(tokens=out, acceptance=acc, seconds=time.perf_counter() - t0)
