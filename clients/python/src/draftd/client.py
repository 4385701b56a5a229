"""The HTTP clients of the draft protocol (docs/protocol.md): :class:`Client`
(blocking) and :class:`AsyncClient` (asyncio), one ``httpx`` connection pool
each, kept alive between requests.

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
from typing import Any

import httpx

from . import errors
from .errors import ProtocolError
from .types import Draft, Health, Info

__all__ = ["Client", "AsyncClient", "DEFAULT_TIMEOUT", "DEFAULT_MAX_RETRIES"]

#: connect 5 s; a draft may wait in the server's queue, so read 60 s.
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
DEFAULT_MAX_RETRIES = 2
DEFAULT_MAX_RETRY_WAIT = 10.0


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    body: bytes | None = None


def _check_tokens(tokens: Sequence[int]) -> list[int]:
    # Types only, so that the JSON is what the caller meant (a bool or a
    # numpy scalar would not encode as an id); the values (range, length)
    # are the server's to judge, against its model.
    out: list[int] = []
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not hasattr(t, "__index__"):
            raise TypeError(f"tokens[{i}] is {type(t).__name__}; token ids must be integers")
        out.append(t.__index__())
    return out


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
    def draft_request(tokens: Sequence[int], n: int | None, strategy: str | None) -> _Request:
        body: dict[str, Any] = {"tokens": _check_tokens(tokens)}
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, int):
                raise TypeError(f"n is {type(n).__name__}; want an int")
            body["n"] = n
        if strategy is not None:
            if not isinstance(strategy, str):
                raise TypeError(f"strategy is {type(strategy).__name__}; want a str")
            body["strategy"] = strategy
        return _Request("POST", "/draft", json.dumps(body, separators=(",", ":")).encode())

    @staticmethod
    def retry_after(resp: httpx.Response) -> float | None:
        """The Retry-After of resp in seconds (delta-seconds or an HTTP
        date), None when absent or unreadable."""
        v = resp.headers.get("retry-after")
        if v is None:
            return None
        v = v.strip()
        if v.isdigit():
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
        except (ValueError, KeyError, TypeError):
            return ProtocolError(f"{resp.request.method} {resp.request.url.path}: HTTP {resp.status_code} without a draftd error body: {resp.text[:120]!r}")
        return errors.error_for(resp.status_code, code, message, self.retry_after(resp))

    def json(self, resp: httpx.Response) -> Any:
        if resp.status_code != 200:
            raise self.error(resp)
        try:
            return resp.json()
        except ValueError as e:
            raise ProtocolError(f"{resp.request.url.path}: answer is not JSON: {resp.text[:120]!r}") from e

    @staticmethod
    def health(resp: httpx.Response, p: _Protocol) -> Health:
        if resp.status_code not in (200, 503):
            raise p.error(resp)
        try:
            status = resp.json()["status"]
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"/health answer has no status: {resp.text[:120]!r}") from e
        return Health(status=str(status), ok=resp.status_code == 200 and status == "ok", retry_after=p.retry_after(resp))

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


class Client:
    """A blocking draftd client. Use it as a context manager, or call
    :meth:`close`.

    ``timeout``: seconds for every phase, or an ``httpx.Timeout``
    (default :data:`DEFAULT_TIMEOUT`). ``max_retries``: retries of a 503 with
    Retry-After. ``http_client``: an ``httpx.Client`` of your own (its
    timeouts and pool are then yours; it is not closed by :meth:`close`).
    """

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
                resp = self._http.request(
                    req.method, self._p.base_url + req.path, content=req.body,
                    headers={"Content-Type": "application/json"} if req.body is not None else None,
                )
            except httpx.TransportError as e:
                raise self._p.transport(e, req) from e
            wait = self._p.retry_wait(resp, attempt) if retry else None
            if wait is None:
                return resp
            resp.close()
            time.sleep(wait)
            attempt += 1

    def draft(self, tokens: Sequence[int], n: int | None = None, *, strategy: str | None = None) -> Draft:
        """``POST /draft``: the draft after context ``tokens``; ``n`` draft
        tokens (None: the server's --draft-len); ``strategy`` one of
        ``info().strategies`` (None: the server's --strategy)."""
        return Draft.from_json(self._p.json(self._send(self._p.draft_request(tokens, n, strategy))))

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

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """The asyncio form of :class:`Client`: the same methods, awaited."""

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
                resp = await self._http.request(
                    req.method, self._p.base_url + req.path, content=req.body,
                    headers={"Content-Type": "application/json"} if req.body is not None else None,
                )
            except httpx.TransportError as e:
                raise self._p.transport(e, req) from e
            wait = self._p.retry_wait(resp, attempt) if retry else None
            if wait is None:
                return resp
            await resp.aclose()
            await asyncio.sleep(wait)
            attempt += 1

    async def draft(self, tokens: Sequence[int], n: int | None = None, *, strategy: str | None = None) -> Draft:
        """See :meth:`Client.draft`."""
        return Draft.from_json(self._p.json(await self._send(self._p.draft_request(tokens, n, strategy))))

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

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
