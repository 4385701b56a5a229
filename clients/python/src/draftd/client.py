"""The public clients of the draft protocol (docs/protocol.md):
:class:`Client` (blocking) and :class:`AsyncClient` (asyncio). Each is the
HTTP client of draftd._http (``/draft``, ``/v1/drafts``, ``extend``,
``delete_session``, ``/health``, ``/v1/info``) plus the session helper of
draftd.session (:meth:`Client.session`, :meth:`Client.session_drafts`).

The modules import one another in one direction: _http knows nothing of
sessions, session is built on _http's clients, and this module puts the two
together. It holds no logic of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._http import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_RETRY_WAIT,
    DEFAULT_TIMEOUT,
    MAX_ANSWER_BYTES,
    SESSION_HEADER,
    AsyncBaseClient,
    BaseClient,
    _Protocol,  # noqa: F401 (the request building and answer reading, for tests)
)
from .session import AsyncSession, Session, async_session_drafts, session_drafts
from .types import DraftResult

__all__ = ["Client", "AsyncClient", "DEFAULT_TIMEOUT", "DEFAULT_MAX_RETRIES", "SESSION_HEADER", "MAX_ANSWER_BYTES"]


class Client(BaseClient):
    """A blocking draftd client. Use it as a context manager, or call
    :meth:`close`.

    ``timeout``: seconds for each call as a whole (connect, the server's
    queue, every byte of the answer, retries; see :meth:`deadline`), or an
    ``httpx.Timeout`` whose phases bound each phase and whose ``read``
    bounds the call (default :data:`DEFAULT_TIMEOUT`: 5 s to connect, 60 s
    for the call). ``max_retries``: retries of a 503 with
    Retry-After. ``http_client``: an ``httpx.Client`` of your own (its
    timeouts and pool are then yours; it is not closed by :meth:`close`).
    """

    def session(self, session: str | None = None, *, n: int | None = None, strategy: str | None = None,
                min_confidence: float | None = None, confidences: bool = False,
                confidence_signal: str | None = None) -> Session:
        """A :class:`draftd.Session` on this client: ``session`` is its id
        (None: a random one), ``n``, ``strategy``, ``min_confidence`` and
        ``confidences``, ``confidence_signal`` those of its drafts."""
        return Session(self, session, n=n, strategy=strategy, min_confidence=min_confidence, confidences=confidences,
                       confidence_signal=confidence_signal)

    def session_drafts(self, steps: Sequence[tuple[Session, Sequence[int]]]) -> list[DraftResult]:
        """One ``POST /v1/drafts`` for several sessions' next drafts: each
        step is (session, its whole context now), and goes as
        ``accepted``+``bonus`` when the context extends the session's last
        one, else as ``tokens``; items answered ``unknown_session`` or
        ``invalid_accepted`` are sent again as ``tokens`` in a second call.
        The result ids are the session ids."""
        return session_drafts(self, steps)


class AsyncClient(AsyncBaseClient):
    """The asyncio form of :class:`Client`: the same methods, awaited."""

    def session(self, session: str | None = None, *, n: int | None = None,
                strategy: str | None = None, min_confidence: float | None = None,
                confidences: bool = False, confidence_signal: str | None = None) -> AsyncSession:
        """See :meth:`Client.session`: an :class:`draftd.AsyncSession`."""
        return AsyncSession(self, session, n=n, strategy=strategy, min_confidence=min_confidence,
                            confidences=confidences, confidence_signal=confidence_signal)

    async def session_drafts(self, steps: Sequence[tuple[AsyncSession, Sequence[int]]]) -> list[DraftResult]:
        """See :meth:`Client.session_drafts`."""
        return await async_session_drafts(self, steps)
