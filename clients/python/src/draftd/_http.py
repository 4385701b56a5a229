"""The HTTP clients of the draft protocol (docs/protocol.md), without the
session helper: :class:`BaseClient` (blocking) and :class:`AsyncBaseClient`
(asyncio), one ``httpx`` connection pool each, kept alive between requests:
``/draft``, the batch ``/v1/drafts``, sessions as requests (``extend``,
``delete_session``), ``/health`` and ``/v1/info``. draftd.session builds the
session helper on them, and draftd.client puts the two together as the public
:class:`draftd.Client` and :class:`draftd.AsyncClient`: the modules import
one another in that one direction (_http, then session, then client).

Both share :class:`_Protocol`, which builds every request and reads every
answer (success or error), so the two differ only in how they wait. Retries
are explicit: only a 503 that carries ``Retry-After`` (the server marks it
retryable: loading, queue full, busy, shutting down, timeout) is retried, at
most ``max_retries`` times, after the server's Retry-After (capped at
``max_retry_wait`` seconds). Nothing else is retried: a 400 would fail again,
and a timed-out or dropped request may have been served.

This module does not decide what to draft nor how acceptance is counted
(draftd.hf does).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from . import errors
from .errors import ProtocolError
from .types import Draft, DraftRequest, DraftResult, Health, Info, check_session_id

__all__ = ["BaseClient", "AsyncBaseClient", "DEFAULT_TIMEOUT", "DEFAULT_MAX_RETRIES", "SESSION_HEADER"]

#: The header a proxy routes sessions on; sent with every request that names
#: one session (docs/protocol.md, sessions).
SESSION_HEADER = "X-Draftd-Session"

#: connect 5 s; a draft may wait in the server's queue, so read 60 s.
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
DEFAULT_MAX_RETRIES = 2
DEFAULT_MAX_RETRY_WAIT = 10.0

_C = TypeVar("_C", bound="BaseClient")
_A = TypeVar("_A", bound="AsyncBaseClient")


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    body: bytes | None = None
    session: str | None = None  # sent as X-Draftd-Session (proxies route on it)


def _dumps(v: Any) -> bytes:
    return json.dumps(v, separators=(",", ":")).encode()


class _Protocol:
    """Request building and answer reading, shared by both clients."""

    def __init__(self, base_url: str, max_retries: int, max_retry_wait: float) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url {base_url!r} must start with http:// or https://")
        if max_retries < 0:
            raise ValueError(f"max_retries {max_retries} must be ≥ 0")
        if not max_retry_wait >= 0:
            raise ValueError(f"max_retry_wait {max_retry_wait} must be ≥ 0")
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait

    @staticmethod
    def draft_request(req: DraftRequest) -> _Request:
        body = req.to_json()
        body.pop("id", None)  # /draft has no id
        return _Request("POST", "/draft", _dumps(body), req.session)

    @staticmethod
    def drafts_request(reqs: Sequence[DraftRequest]) -> _Request:
        if isinstance(reqs, DraftRequest) or not isinstance(reqs, Sequence):
            raise TypeError(f"requests is {type(reqs).__name__}; want a sequence of draftd.DraftRequest")
        if not reqs:
            raise ValueError("requests is empty; give at least one DraftRequest")
        for i, r in enumerate(reqs):
            if not isinstance(r, DraftRequest):
                raise TypeError(f"requests[{i}] is {type(r).__name__}; want a draftd.DraftRequest")
        # One distinct session in the call: say it in the header too, so a
        # proxy routes the call to that session's replica.
        sessions = {r.session for r in reqs if r.session is not None}
        return _Request("POST", "/v1/drafts", _dumps({"requests": [r.to_json() for r in reqs]}),
                        sessions.pop() if len(sessions) == 1 else None)

    @staticmethod
    def delete_request(session: str) -> _Request:
        return _Request("DELETE", "/v1/sessions/" + check_session_id(session), None, session)

    def results(self, resp: httpx.Response, reqs: Sequence[DraftRequest]) -> list[DraftResult]:
        out = DraftResult.list_from_json(self.json(resp), len(reqs))
        for i, (r, q) in enumerate(zip(out, reqs)):
            if r.id != q.id:
                raise ProtocolError(f"/v1/drafts result {i} has id {str(r.id)[:64]!r}; request {i} had {str(q.id)[:64]!r}")
        return out

    def no_content(self, resp: httpx.Response) -> None:
        if resp.status_code != 204:
            raise self.error(resp) if resp.status_code >= 300 else ProtocolError(
                f"{resp.request.method} {resp.request.url.path}: HTTP {resp.status_code}; want 204")

    @staticmethod
    def headers(req: _Request) -> dict[str, str] | None:
        h: dict[str, str] = {}
        if req.body is not None:
            h["Content-Type"] = "application/json"
        if req.session is not None:
            h[SESSION_HEADER] = req.session
        return h or None

    @staticmethod
    def retry_after(resp: httpx.Response) -> float | None:
        """The Retry-After of resp in seconds (delta-seconds or an HTTP
        date), None when absent or unreadable."""
        v = resp.headers.get("retry-after")
        if v is None:
            return None
        v = v.strip()
        if v.isascii() and v.isdigit():  # str.isdigit alone takes "²" and "٣"
            return float(v)
        try:
            when = email.utils.parsedate_to_datetime(v)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())

    def retry_wait(self, resp: httpx.Response, attempt: int) -> float | None:
        """How long to wait before retrying resp (attempt counts from 0), or
        None when it must not be retried."""
        if resp.status_code != 503 or attempt >= self.max_retries:
            return None
        ra = self.retry_after(resp)
        if ra is None:
            return None
        return min(ra, self.max_retry_wait)

    def error(self, resp: httpx.Response) -> errors.APIError | ProtocolError:
        """The exception of a non-2xx answer."""
        try:
            e = resp.json()["error"]
            code, message = e["code"], e["message"]
            if not isinstance(code, str) or not isinstance(message, str):
                raise TypeError
        except (ValueError, KeyError, TypeError, RecursionError):
            return ProtocolError(f"{resp.request.method} {resp.request.url.path}: HTTP {resp.status_code} without a draftd error body: {resp.text[:120]!r}")
        return errors.error_for(resp.status_code, code, message, self.retry_after(resp))

    def json(self, resp: httpx.Response) -> Any:
        if resp.status_code != 200:
            raise self.error(resp)
        try:
            return resp.json()
        except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep to decode
            raise ProtocolError(f"{resp.request.url.path}: answer is not JSON the client can read: {resp.text[:120]!r}") from e

    @staticmethod
    def health(resp: httpx.Response, p: _Protocol) -> Health:
        if resp.status_code not in (200, 503):
            raise p.error(resp)
        try:
            status = resp.json()["status"]
            if not isinstance(status, str):
                raise TypeError
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            if resp.status_code == 503:
                # Unavailable all the same (a proxy's 503 has no draftd body).
                return Health(status="unavailable", ok=False, retry_after=p.retry_after(resp))
            raise ProtocolError(f"/health answer has no status: {resp.text[:120]!r}") from e
        return Health(status=status, ok=resp.status_code == 200 and status == "ok", retry_after=p.retry_after(resp))

    @staticmethod
    def transport(e: httpx.TransportError, req: _Request) -> errors.TransportError:
        what = f"{req.method} {req.path}"
        if isinstance(e, httpx.TimeoutException):
            return errors.TimeoutError(f"{what}: {type(e).__name__}: {e}")
        if isinstance(e, httpx.ConnectError):
            return errors.ConnectError(f"{what}: {e}")
        return errors.TransportError(f"{what}: {type(e).__name__}: {e}")


def _timeout(t: float | httpx.Timeout | None) -> httpx.Timeout:
    if t is None:
        return DEFAULT_TIMEOUT
    if isinstance(t, httpx.Timeout):
        return t
    return httpx.Timeout(float(t))


class BaseClient:
    """The blocking client without the session helper (draftd.Client is this
    plus :meth:`draftd.Client.session` and :meth:`draftd.Client.session_drafts`)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        *,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._p = _Protocol(base_url, max_retries, max_retry_wait)
        self._own = http_client is None
        self._http = http_client or httpx.Client(timeout=_timeout(timeout), headers={"User-Agent": "draftd-python"})

    @property
    def base_url(self) -> str:
        return self._p.base_url

    def _send(self, req: _Request, retry: bool = True) -> httpx.Response:
        attempt = 0
        while True:
            try:
                resp = self._http.request(req.method, self._p.base_url + req.path, content=req.body,
                                          headers=self._p.headers(req))
            except httpx.TransportError as e:
                raise self._p.transport(e, req) from e
            wait = self._p.retry_wait(resp, attempt) if retry else None
            if wait is None:
                return resp
            resp.close()
            time.sleep(wait)
            attempt += 1

    def draft(self, tokens: Sequence[int], n: int | None = None, *, strategy: str | None = None,
              session: str | None = None, min_confidence: float | None = None, confidences: bool = False) -> Draft:
        """``POST /draft``: the draft after context ``tokens``; ``n`` draft
        tokens (None: the server's --draft-len); ``strategy`` one of
        ``info().strategies`` (None: the server's --strategy). With
        ``session``, the request also establishes (or replaces) that
        session's context (see :meth:`extend`, and :meth:`draftd.Client.session`
        for the helper that chooses the form and recovers from 409).
        ``min_confidence``, ``confidences``: a confidence-bounded draft, and
        each token's confidence (:class:`draftd.DraftRequest`)."""
        return self.send(DraftRequest(tokens=tokens, n=n, strategy=strategy, session=session,
                                      min_confidence=min_confidence, confidences=confidences))

    def extend(self, session: str, accepted: int, bonus: int, n: int | None = None, *,
               strategy: str | None = None, min_confidence: float | None = None, confidences: bool = False) -> Draft:
        """``POST /draft {"session","accepted","bonus"}``: the first
        ``accepted`` tokens of the session's last draft were accepted and the
        target produced ``bonus``; the draft after that context. Raises
        :class:`draftd.UnknownSessionError` (409) when the server does not
        hold the session and :class:`draftd.InvalidAcceptedError` (400) when
        ``accepted`` is more than the last draft: resend the whole context
        with :meth:`draft` (``session=``). ``min_confidence``,
        ``confidences``: as in :meth:`draft`."""
        return self.send(DraftRequest(session=session, accepted=accepted, bonus=bonus, n=n, strategy=strategy,
                                      min_confidence=min_confidence, confidences=confidences))

    def send(self, request: DraftRequest) -> Draft:
        """``POST /draft`` with one :class:`draftd.DraftRequest` (its ``id``
        is not sent)."""
        if not isinstance(request, DraftRequest):
            raise TypeError(f"request is {type(request).__name__}; want a draftd.DraftRequest")
        return Draft.from_json(self._p.json(self._send(self._p.draft_request(request))))

    def drafts(self, requests: Sequence[DraftRequest]) -> list[DraftResult]:
        """``POST /v1/drafts``: one call for all ``requests``; one
        :class:`draftd.DraftResult` per request, in order, each with its
        draft or its own error (a bad item fails only itself). An error of
        the whole call (``too_many_items``, ``body_too_large``, a 503, …)
        raises."""
        req = self._p.drafts_request(requests)
        return self._p.results(self._send(req), requests)

    def delete_session(self, session: str) -> None:
        """``DELETE /v1/sessions/ID`` (204 also when the session is unknown)."""
        self._p.no_content(self._send(self._p.delete_request(session)))

    def health(self) -> Health:
        """``GET /health`` once (a 503 while loading is an answer, not an
        error, and is not retried)."""
        return _Protocol.health(self._send(_Request("GET", "/health"), retry=False), self._p)

    def info(self) -> Info:
        """``GET /v1/info``."""
        return Info.from_json(self._p.json(self._send(_Request("GET", "/v1/info"))))

    def wait_ready(self, timeout: float = 300.0, interval: float = 0.2) -> Health:
        """Polls ``/health`` until it is ok; raises :class:`draftd.TimeoutError`
        after ``timeout`` seconds (connection errors count as not ready)."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            try:
                h = self.health()
                if h.ok:
                    return h
                last = h.status
            except errors.TransportError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise errors.TimeoutError(f"{self.base_url} not healthy after {timeout:g} s (last: {last})")
            time.sleep(interval)

    def close(self) -> None:
        if self._own:
            self._http.close()

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncBaseClient:
    """The asyncio form of :class:`BaseClient`: the same methods, awaited."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        *,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._p = _Protocol(base_url, max_retries, max_retry_wait)
        self._own = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=_timeout(timeout), headers={"User-Agent": "draftd-python"})

    @property
    def base_url(self) -> str:
        return self._p.base_url

    async def _send(self, req: _Request, retry: bool = True) -> httpx.Response:
        attempt = 0
        while True:
            try:
                resp = await self._http.request(req.method, self._p.base_url + req.path, content=req.body,
                                                headers=self._p.headers(req))
            except httpx.TransportError as e:
                raise self._p.transport(e, req) from e
            wait = self._p.retry_wait(resp, attempt) if retry else None
            if wait is None:
                return resp
            await resp.aclose()
            await asyncio.sleep(wait)
            attempt += 1

    async def draft(self, tokens: Sequence[int], n: int | None = None, *, strategy: str | None = None,
                    session: str | None = None, min_confidence: float | None = None,
                    confidences: bool = False) -> Draft:
        """See :meth:`Client.draft`."""
        return await self.send(DraftRequest(tokens=tokens, n=n, strategy=strategy, session=session,
                                            min_confidence=min_confidence, confidences=confidences))

    async def extend(self, session: str, accepted: int, bonus: int, n: int | None = None, *,
                     strategy: str | None = None, min_confidence: float | None = None,
                     confidences: bool = False) -> Draft:
        """See :meth:`Client.extend`."""
        return await self.send(DraftRequest(session=session, accepted=accepted, bonus=bonus, n=n, strategy=strategy,
                                            min_confidence=min_confidence, confidences=confidences))

    async def send(self, request: DraftRequest) -> Draft:
        """See :meth:`Client.send`."""
        if not isinstance(request, DraftRequest):
            raise TypeError(f"request is {type(request).__name__}; want a draftd.DraftRequest")
        return Draft.from_json(self._p.json(await self._send(self._p.draft_request(request))))

    async def drafts(self, requests: Sequence[DraftRequest]) -> list[DraftResult]:
        """See :meth:`Client.drafts`."""
        req = self._p.drafts_request(requests)
        return self._p.results(await self._send(req), requests)

    async def delete_session(self, session: str) -> None:
        """See :meth:`Client.delete_session`."""
        self._p.no_content(await self._send(self._p.delete_request(session)))

    async def health(self) -> Health:
        """See :meth:`Client.health`."""
        return _Protocol.health(await self._send(_Request("GET", "/health"), retry=False), self._p)

    async def info(self) -> Info:
        """See :meth:`Client.info`."""
        return Info.from_json(self._p.json(await self._send(_Request("GET", "/v1/info"))))

    async def wait_ready(self, timeout: float = 300.0, interval: float = 0.2) -> Health:
        """See :meth:`Client.wait_ready`."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            try:
                h = await self.health()
                if h.ok:
                    return h
                last = h.status
            except errors.TransportError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise errors.TimeoutError(f"{self.base_url} not healthy after {timeout:g} s (last: {last})")
            await asyncio.sleep(interval)

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
