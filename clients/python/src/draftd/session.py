"""Sessions (docs/protocol.md, sessions): a conversation whose context the
server keeps, so that each step sends only how much of the last draft the
target accepted and the token it added.

:class:`Session` (and :class:`AsyncSession`) is the helper a serving loop
uses: give it the whole context at every step, as a plain ``/draft`` would
get; it remembers what the server holds (the context it last sent and the
draft it got back) and sends ``accepted``+``bonus`` when the new context is
that context + a prefix of that draft + one token (or more: ``bonus`` a list,
after steps that asked no draft), else the whole context as ``tokens``. When the server answers ``409 unknown_session`` (expired,
evicted, deleted, a restarted or another replica) or ``400
invalid_accepted`` to an incremental request, it sends the whole context
again at once, so a caller never loses a step to a lost session. After a
failed connection it cannot know whether the server applied the request, so
its next request sends the whole context. Nothing is guessed: every draft it
returns is the one ``/draft`` returns for the same whole context.

This module keeps the state and chooses the form; it is built on the HTTP
clients of draftd._http, which send the requests, and draftd.client offers it
as ``Client.session`` and ``Client.session_drafts``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from . import errors
from ._http import AsyncBaseClient, BaseClient
from .types import Draft, DraftRequest, DraftResult, check_min_confidence, check_session_id, check_tokens

__all__ = ["Session", "AsyncSession", "SessionStats"]


@dataclass
class SessionStats:
    """Requests a session sent, by form: ``tokens`` (the whole context:
    the first, or after a lost session), ``incremental`` (accepted+bonus),
    and ``resent`` (incremental requests answered 409 / invalid_accepted
    and sent again as tokens; counted in ``tokens`` too); ``catchup``:
    incremental requests whose bonus was more than one token (steps that
    asked no draft came before: the server prefills those tokens too, so
    such a request's time is no draft call's alone)."""

    tokens: int = 0
    incremental: int = 0
    resent: int = 0
    catchup: int = 0


class _State:
    """What the server holds for one session, as far as this client knows:
    ``context`` (None: nothing known) and ``last``, the draft answered to
    it."""

    def __init__(self, session: str | None, n: int | None, strategy: str | None,
                 min_confidence: float | None = None, confidences: bool = False,
                 confidence_signal: str | None = None) -> None:
        self.id = check_session_id(session) if session is not None else f"py-{uuid.uuid4().hex}"
        # Checked once here, by building a request with them.
        DraftRequest(tokens=[0], n=n, strategy=strategy, session=self.id, min_confidence=min_confidence,
                     confidences=confidences, confidence_signal=confidence_signal)
        self.n = n
        self.strategy = strategy
        self.min_confidence = min_confidence
        self.confidences = confidences
        self.confidence_signal = confidence_signal
        self.context: list[int] | None = None
        self.last: list[int] = []
        self.stats = SessionStats()

    def plan(self, tokens: list[int], n: int | None = None, min_confidence: float | None = None) -> DraftRequest:
        """The request for the whole context ``tokens``: incremental when it
        extends the held context — by last[:k] and the bonus, or by more
        tokens than that (steps that asked no draft: ``bonus`` a list of
        them) — else tokens. k is the longest prefix of the last draft that
        the new tokens repeat, short of the last new token. ``n``,
        ``min_confidence``: this request's (None: the session's)."""
        n = self.n if n is None else n
        mc = self.min_confidence if min_confidence is None else min_confidence
        c = self.context
        if c is not None and len(tokens) > len(c) and tokens[: len(c)] == c:
            extra = tokens[len(c):]
            k, most = 0, min(len(self.last), len(extra) - 1)
            while k < most and extra[k] == self.last[k]:
                k += 1
            return DraftRequest(session=self.id, accepted=k, bonus=extra[k:], n=n, strategy=self.strategy,
                                id=self.id, min_confidence=mc, confidences=self.confidences,
                                confidence_signal=self.confidence_signal)
        return self.full(tokens, n, mc)

    def full(self, tokens: list[int], n: int | None = None, min_confidence: float | None = None) -> DraftRequest:
        return DraftRequest(tokens=tokens, session=self.id, n=self.n if n is None else n, strategy=self.strategy,
                            id=self.id, min_confidence=self.min_confidence if min_confidence is None else min_confidence,
                            confidences=self.confidences, confidence_signal=self.confidence_signal)

    def sent(self, req: DraftRequest, resend: bool = False) -> None:
        if req.incremental:
            self.stats.incremental += 1
            if isinstance(req.bonus, list) and len(req.bonus) > 1:
                self.stats.catchup += 1
        else:
            self.stats.tokens += 1
            self.stats.resent += int(resend)

    def commit(self, tokens: list[int], draft: Draft) -> None:
        self.context, self.last = tokens, list(draft.tokens)

    def lose(self) -> None:
        self.context, self.last = None, []


def _resend(req: DraftRequest, err: errors.APIError | None) -> bool:
    """Whether a failed request is sent again as tokens: an incremental one
    the server could not apply to the session it holds, or one whose bonus
    list a draftd older than bonus lists refused (400 invalid_token)."""
    return req.incremental and (isinstance(err, (errors.UnknownSessionError, errors.InvalidAcceptedError))
                                or isinstance(req.bonus, list) and isinstance(err, errors.BadRequestError)
                                and err.code == "invalid_token")


class _Base:
    client: object

    def __init__(self, session: str | None, n: int | None, strategy: str | None,
                 min_confidence: float | None = None, confidences: bool = False,
                 confidence_signal: str | None = None) -> None:
        self._st = _State(session, n, strategy, min_confidence, confidences, confidence_signal)

    @property
    def id(self) -> str:
        """The session id (sent as ``session`` and ``X-Draftd-Session``)."""
        return self._st.id

    @property
    def n(self) -> int | None:
        """The n of this session's drafts (None: the server's); settable,
        for the next request on (a caller that matches the draft length to
        what the target can use)."""
        return self._st.n

    @n.setter
    def n(self, n: int | None) -> None:
        DraftRequest(tokens=[0], n=n)  # checked as the request will be
        self._st.n = n

    @property
    def strategy(self) -> str | None:
        """The strategy of this session's drafts (None: the server's)."""
        return self._st.strategy

    @property
    def min_confidence(self) -> float | None:
        """The confidence bound sent with this session's drafts (None: not
        sent, the server's ``--min-confidence``; 0: off); settable, for the
        next request on."""
        return self._st.min_confidence

    @min_confidence.setter
    def min_confidence(self, v: float | None) -> None:
        self._st.min_confidence = None if v is None else check_min_confidence(v)

    @property
    def confidences(self) -> bool:
        """Whether this session's drafts ask for each token's confidence."""
        return self._st.confidences

    @property
    def stats(self) -> SessionStats:
        return self._st.stats

    @property
    def context(self) -> list[int] | None:
        """The context the server holds for this session as far as this
        client knows (None: unknown; the next request sends tokens)."""
        return None if self._st.context is None else list(self._st.context)

    def forget(self) -> None:
        """Make the next request send the whole context."""
        self._st.lose()


class Session(_Base):
    """A session on a :class:`draftd.Client` (``client.session(...)``).
    ``session``: its id (None: a random ``py-…`` one); ``n``, ``strategy``:
    those of every draft (None: the server's); ``min_confidence``,
    ``confidences``, ``confidence_signal``: a confidence bound sent with
    every draft, whether to ask for each token's confidence, and which
    signal (:class:`draftd.DraftRequest`). Not
    thread-safe: one step at a time per session (the server applies a
    session's requests in order anyway)."""

    def __init__(self, client: BaseClient, session: str | None = None, *, n: int | None = None,
                 strategy: str | None = None, min_confidence: float | None = None,
                 confidences: bool = False, confidence_signal: str | None = None) -> None:
        super().__init__(session, n, strategy, min_confidence, confidences, confidence_signal)
        self.client: BaseClient = client

    def draft(self, tokens: Sequence[int], *, n: int | None = None, min_confidence: float | None = None) -> Draft:
        """The draft after the whole context ``tokens`` (prompt + every
        token so far): sent incrementally when it extends the last one, and
        resent whole after 409 ``unknown_session`` / 400
        ``invalid_accepted``. ``n``: this draft's length (None: the
        session's n); ``min_confidence``: this draft's bound (None: the
        session's). Other errors raise; after an error answer the session
        is as before, after a failed connection the next request sends the
        whole context. The client's timeout bounds the step, resend
        included."""
        toks = check_tokens(tokens)
        st = self._st
        req = st.plan(toks, n, min_confidence)
        try:
            st.sent(req)
            with self.client.deadline():
                try:
                    d = self.client.send(req)
                except errors.APIError as e:
                    if not _resend(req, e):
                        raise
                    req = st.full(toks, n, min_confidence)
                    st.sent(req, resend=True)
                    d = self.client.send(req)
        except errors.APIError:
            if req.incremental:
                raise  # an error answer leaves the session as it was
            st.lose()  # a tokens request failed: the server's state is not known here
            raise
        except BaseException:
            # No answer (a failed connection, a timeout, a cancellation) or
            # one that is not the protocol: the server may have moved the
            # session on, so the next request sends the whole context.
            st.lose()
            raise
        st.commit(toks, d)
        return d

    def close(self) -> None:
        """``DELETE /v1/sessions/ID``."""
        self._st.lose()
        self.client.delete_session(self.id)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSession(_Base):
    """The asyncio form of :class:`Session` (``async_client.session(...)``)."""

    def __init__(self, client: AsyncBaseClient, session: str | None = None, *, n: int | None = None,
                 strategy: str | None = None, min_confidence: float | None = None,
                 confidences: bool = False, confidence_signal: str | None = None) -> None:
        super().__init__(session, n, strategy, min_confidence, confidences, confidence_signal)
        self.client: AsyncBaseClient = client

    async def draft(self, tokens: Sequence[int], *, n: int | None = None,
                    min_confidence: float | None = None) -> Draft:
        """See :meth:`Session.draft`."""
        toks = check_tokens(tokens)
        st = self._st
        req = st.plan(toks, n, min_confidence)
        try:
            st.sent(req)
            with self.client.deadline():
                try:
                    d = await self.client.send(req)
                except errors.APIError as e:
                    if not _resend(req, e):
                        raise
                    req = st.full(toks, n, min_confidence)
                    st.sent(req, resend=True)
                    d = await self.client.send(req)
        except errors.APIError:
            if req.incremental:
                raise
            st.lose()
            raise
        except BaseException:
            st.lose()
            raise
        st.commit(toks, d)
        return d

    async def close(self) -> None:
        """See :meth:`Session.close`."""
        self._st.lose()
        await self.client.delete_session(self.id)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Plan:
    """One session's step inside a batch (Client.session_drafts)."""

    def __init__(self, state: _State, tokens: list[int]) -> None:
        self.state = state
        self.tokens = tokens
        self.request = state.plan(tokens)

    def full(self) -> DraftRequest:
        self.request = self.state.full(self.tokens)
        self.state.sent(self.request, resend=True)
        return self.request

    def settle(self, r: DraftResult) -> DraftResult:
        if r.draft is not None:
            self.state.commit(self.tokens, r.draft)
        elif not self.request.incremental:
            self.state.lose()
        return r


def _plan_steps(client: object, steps: Sequence[tuple[_Base, Sequence[int]]]) -> list[_Plan]:
    if not isinstance(steps, Sequence) or not steps:
        raise ValueError("steps must be a non-empty sequence of (session, tokens)")
    seen: set[str] = set()
    plans: list[_Plan] = []
    for i, step in enumerate(steps):
        if not isinstance(step, tuple) or len(step) != 2 or not isinstance(step[0], _Base):
            raise TypeError(f"steps[{i}] is not a (session, tokens) pair")
        s, toks = step
        if s.client is not client:
            raise ValueError(f"steps[{i}]: session {s.id!r} belongs to another client")
        if s.id in seen:
            raise ValueError(f"steps[{i}]: session {s.id!r} appears twice; a call carries one step per session")
        seen.add(s.id)
        plans.append(_Plan(s._st, check_tokens(toks, f"steps[{i}] tokens")))
    for p in plans:
        p.state.sent(p.request)
    return plans


def session_drafts(client: BaseClient, steps: Sequence[tuple[Session, Sequence[int]]]) -> list[DraftResult]:
    """:meth:`draftd.Client.session_drafts`: one ``POST /v1/drafts`` for
    several sessions' next drafts on ``client``."""
    plans = _plan_steps(client, steps)
    try:
        with client.deadline():  # one bound for both calls
            results = client.drafts([p.request for p in plans])
            again = [i for i, r in enumerate(results) if _resend(plans[i].request, r.error)]
            if again:
                for i, r in zip(again, client.drafts([plans[i].full() for i in again])):
                    results[i] = r
    except BaseException:
        # no answer, or one that is not the protocol: the server may
        # have moved these sessions on; their next requests send tokens
        for p in plans:
            p.state.lose()
        raise
    return [p.settle(r) for p, r in zip(plans, results)]


async def async_session_drafts(client: AsyncBaseClient,
                               steps: Sequence[tuple[AsyncSession, Sequence[int]]]) -> list[DraftResult]:
    """The asyncio form of :func:`session_drafts`."""
    plans = _plan_steps(client, steps)
    try:
        with client.deadline():
            results = await client.drafts([p.request for p in plans])
            again = [i for i, r in enumerate(results) if _resend(plans[i].request, r.error)]
            if again:
                for i, r in zip(again, await client.drafts([plans[i].full() for i in again])):
                    results[i] = r
    except BaseException:
        for p in plans:
            p.state.lose()
        raise
    return [p.settle(r) for p, r in zip(plans, results)]
