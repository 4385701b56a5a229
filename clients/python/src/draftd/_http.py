"""The HTTP clients of the draft protocol (docs/protocol.md), without the
session helper: :class:`BaseClient` (blocking) and :class:`AsyncBaseClient`
(asyncio), one ``httpx`` connection pool each, kept alive between requests:
``/draft``, the batch ``/v1/drafts``, sessions as requests (``extend``,
``delete_session``), ``/health`` and ``/v1/info``. draftd.session builds the
session helper on them, and draftd.client puts the two together as the public
:class:`draftd.Client` and :class:`draftd.AsyncClient`: the modules import
one another in that one direction (_http, then session, then client).

Both share :class:`_Protocol`, which builds every request and reads every
answer (success or error), so the two differ only in how they wait.

Deadlines: a number ``timeout`` bounds each call as a whole (connect, send,
the server's queue, every byte of the answer, retries and their waits), not
each socket read: :meth:`BaseClient.deadline` is that bound, and a block
``with client.deadline(s):`` bounds every call inside it together (the
drafters bound a whole step, a session's resend included). The blocking
client enforces it in every socket operation (:class:`_DeadlineBackend`, so
that an answer dribbled a byte at a time or endless ``102`` interim answers
end on time too); the asyncio one cancels the call at the deadline.

Answers are read raw (``Accept-Encoding: identity``; any other
``Content-Encoding`` is a :class:`draftd.ProtocolError`, never a
decompression) and at most :data:`MAX_ANSWER_BYTES` of them; every failure
of httpx is mapped to a :class:`draftd.DraftdError`. Drafts are checked: ids
are ints in [0, the server's ``vocab_size``) (its ``/v1/info``, read once
and again after a failed connection) and no more than the ``n`` asked.

Retries
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
import contextlib
import contextvars
import email.utils
import json
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpcore
import httpx

from . import errors
from .errors import ProtocolError
from .types import Draft, DraftRequest, DraftResult, Health, Info, check_session_id

__all__ = ["BaseClient", "AsyncBaseClient", "DEFAULT_TIMEOUT", "DEFAULT_MAX_RETRIES", "SESSION_HEADER",
           "MAX_ANSWER_BYTES"]

#: The header a proxy routes sessions on; sent with every request that names
#: one session (docs/protocol.md, sessions).
SESSION_HEADER = "X-Draftd-Session"

#: connect 5 s; a draft may wait in the server's queue, so 60 s for a call
#: (its read value: the deadline of the whole call, and each read's bound).
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
DEFAULT_MAX_RETRIES = 2
DEFAULT_MAX_RETRY_WAIT = 10.0

#: The largest answer the clients read (bytes on the wire): a /v1/drafts
#: answer of the server's largest batch (256 items × 64 ids) is ~120 KiB.
MAX_ANSWER_BYTES = 8 << 20

#: The deadline (time.monotonic()) of the call in progress in this thread or
#: task; None: none. Set by BaseClient.deadline, read by every socket
#: operation of the blocking client (_DeadlineBackend) and by _send.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("draftd_deadline", default=None)


def _left(what: str) -> float | None:
    """Seconds left before the deadline of the call in progress (None: no
    deadline); raises httpcore's timeout of ``what`` when none is."""
    d = _DEADLINE.get()
    if d is None:
        return None
    left = d - time.monotonic()
    if left <= 0:
        raise {"connect": httpcore.ConnectTimeout, "write": httpcore.WriteTimeout}.get(what, httpcore.ReadTimeout)(
            "the call's deadline passed")
    return left


def _bound(timeout: float | None, what: str) -> float | None:
    left = _left(what)
    if left is None:
        return timeout
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write waits at most until the
    deadline of the call in progress (httpcore gives each read the same
    per-read timeout, so a peer sending a byte at a time, or 102 after 102,
    would otherwise hold a call without end)."""

    def __init__(self, s: httpcore.NetworkStream) -> None:
        self._s = s

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._s.read(max_bytes, _bound(timeout, "read"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._s.write(buffer, _bound(timeout, "write"))

    def close(self) -> None:
        self._s.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._s.start_tls(ssl_context, server_hostname, _bound(timeout, "connect")))

    def get_extra_info(self, info: str) -> Any:
        return self._s.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's socket backend with connects, reads and writes bounded by
    the deadline of the call in progress (:data:`_DEADLINE`)."""

    def __init__(self) -> None:
        self._b = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._b.connect_tcp(host, port, _bound(timeout, "connect"), local_address,
                                                   socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._b.connect_unix_socket(path, _bound(timeout, "connect"), socket_options))

    def sleep(self, seconds: float) -> None:
        self._b.sleep(seconds)


def _transport() -> httpx.HTTPTransport:
    """httpx's transport with its connection pool on :class:`_DeadlineBackend`.
    httpx (0.27–0.28) has no argument for the backend: its pool (the
    ``_pool`` its requests go through) is replaced by the same pool built on
    that backend. Should a newer httpx keep it elsewhere, the transport is
    left as it is: the deadline then bounds each read's timeout and the
    answer's body, not a peer dribbling the answer's headers."""
    ssl = httpx.create_ssl_context()
    t = httpx.HTTPTransport(verify=ssl)
    if isinstance(getattr(t, "_pool", None), httpcore.ConnectionPool):
        lim = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)  # httpx's defaults
        t._pool = httpcore.ConnectionPool(  # noqa: SLF001 (see above)
            ssl_context=ssl, max_connections=lim.max_connections,
            max_keepalive_connections=lim.max_keepalive_connections, keepalive_expiry=lim.keepalive_expiry,
            network_backend=_DeadlineBackend())
    return t

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


@dataclass(frozen=True)
class _Answer:
    """An answer read whole (at most MAX_ANSWER_BYTES, not decoded): what
    _Protocol reads of an httpx.Response, and no more."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    request: httpx.Request

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


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

    def results(self, resp: httpx.Response | _Answer, reqs: Sequence[DraftRequest]) -> list[DraftResult]:
        out = DraftResult.list_from_json(self.json(resp), len(reqs))
        for i, (r, q) in enumerate(zip(out, reqs)):
            if r.id != q.id:
                raise ProtocolError(f"/v1/drafts result {i} has id {str(r.id)[:64]!r}; request {i} had {str(q.id)[:64]!r}")
        return out

    @staticmethod
    def check_draft(tokens: Sequence[int], n: int | None, info: Info, what: str) -> None:
        """Raises ProtocolError unless tokens are ids of the server's
        vocabulary (ints in [0, vocab_size)), at most n of them (None: the
        server's draft_len)."""
        limit = info.draft_len if n is None else n
        if len(tokens) > limit:
            raise ProtocolError(f"{what} has {len(tokens)} tokens; {limit} were asked")
        for j, t in enumerate(tokens):
            if not 0 <= t < info.vocab_size:
                raise ProtocolError(f"{what}[{j}] is {str(t)[:32]}, not an id of the server's vocabulary "
                                    f"[0, {info.vocab_size})")

    def no_content(self, resp: httpx.Response | _Answer) -> None:
        if resp.status_code != 204:
            raise self.error(resp) if resp.status_code >= 300 else ProtocolError(
                f"{resp.request.method} {resp.request.url.path}: HTTP {resp.status_code}; want 204")

    @staticmethod
    def headers(req: _Request) -> dict[str, str]:
        # identity: an answer is never decompressed (no decompression bomb)
        h: dict[str, str] = {"Accept-Encoding": "identity"}
        if req.body is not None:
            h["Content-Type"] = "application/json"
        if req.session is not None:
            h[SESSION_HEADER] = req.session
        return h

    @staticmethod
    def retry_after(resp: httpx.Response | _Answer) -> float | None:
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

    def retry_wait(self, resp: httpx.Response | _Answer, attempt: int) -> float | None:
        """How long to wait before retrying resp (attempt counts from 0), or
        None when it must not be retried (also when the wait would pass the
        deadline of the call)."""
        if resp.status_code != 503 or attempt >= self.max_retries:
            return None
        ra = self.retry_after(resp)
        if ra is None:
            return None
        wait = min(ra, self.max_retry_wait)
        d = _DEADLINE.get()
        if d is not None and time.monotonic() + wait >= d:
            return None
        return wait

    def error(self, resp: httpx.Response | _Answer) -> errors.APIError | ProtocolError:
        """The exception of a non-2xx answer."""
        try:
            e = resp.json()["error"]
            code, message = e["code"], e["message"]
            if not isinstance(code, str) or not isinstance(message, str):
                raise TypeError
        except (ValueError, KeyError, TypeError, RecursionError):
            return ProtocolError(f"{resp.request.method} {resp.request.url.path}: HTTP {resp.status_code} without a draftd error body: {resp.text[:120]!r}")
        return errors.error_for(resp.status_code, code, message, self.retry_after(resp))

    def json(self, resp: httpx.Response | _Answer) -> Any:
        if resp.status_code != 200:
            raise self.error(resp)
        try:
            return resp.json()
        except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep to decode
            raise ProtocolError(f"{resp.request.url.path}: answer is not JSON the client can read: {resp.text[:120]!r}") from e

    @staticmethod
    def health(resp: httpx.Response | _Answer, p: _Protocol) -> Health:
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
    def transport(e: Exception, req: _Request) -> errors.DraftdError:
        """The DraftdError of a failure of httpx (or of the socket under
        it): no answer is a TransportError, an answer httpx could not read
        (a broken encoding or framing) a ProtocolError."""
        what = f"{req.method} {req.path}"
        if isinstance(e, (httpx.TimeoutException, httpcore.TimeoutException, asyncio.TimeoutError)):
            return errors.TimeoutError(f"{what}: {type(e).__name__}: {e}")
        if isinstance(e, httpx.ConnectError):
            return errors.ConnectError(f"{what}: {e}")
        if isinstance(e, (httpx.TransportError, OSError)):
            return errors.TransportError(f"{what}: {type(e).__name__}: {e}")
        return ProtocolError(f"{what}: the answer cannot be read: {type(e).__name__}: {e}")

    @staticmethod
    def encoding(resp: httpx.Response, req: _Request) -> None:
        enc = resp.headers.get("content-encoding", "identity").strip().lower()
        if enc not in ("", "identity"):
            raise ProtocolError(f"{req.method} {req.path}: answer has Content-Encoding {enc[:32]!r}; "
                                "the client asks for identity")

    @staticmethod
    def add(body: bytearray, chunk: bytes, req: _Request) -> None:
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise ProtocolError(f"{req.method} {req.path}: answer is over {MAX_ANSWER_BYTES} bytes")
        d = _DEADLINE.get()
        if d is not None and time.monotonic() > d:
            raise errors.TimeoutError(f"{req.method} {req.path}: the call's deadline passed while reading the answer")

    @staticmethod
    def phases(t: httpx.Timeout) -> httpx.Timeout:
        """t with each phase at most the time left before the deadline."""
        left = _left("connect")
        if left is None:
            return t

        def cap(v: float | None) -> float:
            return left if v is None else min(v, left)

        return httpx.Timeout(connect=cap(t.connect), read=cap(t.read), write=cap(t.write), pool=cap(t.pool))


def _timeout(t: float | httpx.Timeout | None) -> httpx.Timeout:
    if t is None:
        return DEFAULT_TIMEOUT
    if isinstance(t, httpx.Timeout):
        return t
    return httpx.Timeout(float(t))


def _call_seconds(t: float | httpx.Timeout | None, own: bool) -> float | None:
    """The deadline of one call: a number's seconds, an httpx.Timeout's
    read (DEFAULT_TIMEOUT: 60 s); none for an http_client of the caller's."""
    if not own:
        return None
    return _timeout(t).read


class _Deadlines:
    """The deadline and /v1/info cache both clients share."""

    _call_s: float | None
    _info: Info | None

    @contextlib.contextmanager
    def deadline(self, seconds: float | None = None) -> Iterator[None]:
        """Within the block, every call of this thread (or asyncio task)
        ends within ``seconds`` from now (None: the client's own
        ``timeout``), connect, retries, the server's queue and every byte
        of the answer included, or raises :class:`draftd.TimeoutError`. An
        enclosing deadline that ends sooner stays in force."""
        s = self._call_s if seconds is None else seconds
        if s is None:
            yield
            return
        d = time.monotonic() + s
        outer = _DEADLINE.get()
        token = _DEADLINE.set(d if outer is None else min(outer, d))
        try:
            yield
        finally:
            _DEADLINE.reset(token)


class BaseClient(_Deadlines):
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
        self._call_s = _call_seconds(timeout, self._own)
        self._info = None
        self._http = http_client or httpx.Client(timeout=_timeout(timeout), headers={"User-Agent": "draftd-python"},
                                                 transport=_transport())

    @property
    def base_url(self) -> str:
        return self._p.base_url

    def _send(self, req: _Request, retry: bool = True) -> _Answer:
        attempt = 0
        while True:
            try:
                resp = self._once(req)
            except (httpx.HTTPError, httpcore.TimeoutException, OSError) as e:
                self._info = None  # the server may be another one now: read /v1/info again
                raise self._p.transport(e, req) from e
            wait = self._p.retry_wait(resp, attempt) if retry else None
            if wait is None:
                return resp
            time.sleep(wait)
            attempt += 1

    def _once(self, req: _Request) -> _Answer:
        r = self._http.build_request(req.method, self._p.base_url + req.path, content=req.body,
                                     headers=self._p.headers(req), timeout=self._p.phases(self._http.timeout))
        resp = self._http.send(r, stream=True)
        try:
            self._p.encoding(resp, req)
            body = bytearray()
            # An answer a transport made whole (httpx.MockTransport's) is read already.
            for chunk in [resp.content] if resp.is_stream_consumed else resp.iter_raw():
                self._p.add(body, chunk, req)
        finally:
            resp.close()
        return _Answer(resp.status_code, resp.headers, bytes(body), r)

    def _limits(self) -> Info:
        """The server's /v1/info, read once (again after a failed connection)."""
        if self._info is None:
            self.info()
        assert self._info is not None
        return self._info

    def draft(self, tokens: Sequence[int], n: int | None = None, *, strategy: str | None = None,
              session: str | None = None, min_confidence: float | None = None, confidences: bool = False,
              confidence_signal: str | None = None) -> Draft:
        """``POST /draft``: the draft after context ``tokens``; ``n`` draft
        tokens (None: the server's --draft-len); ``strategy`` one of
        ``info().strategies`` (None: the server's --strategy). With
        ``session``, the request also establishes (or replaces) that
        session's context (see :meth:`extend`, and :meth:`draftd.Client.session`
        for the helper that chooses the form and recovers from 409).
        ``min_confidence``, ``confidences``, ``confidence_signal``: a
        confidence-bounded draft, each token's confidence, and which signal
        (:class:`draftd.DraftRequest`)."""
        return self.send(DraftRequest(tokens=tokens, n=n, strategy=strategy, session=session,
                                      min_confidence=min_confidence, confidences=confidences,
                                      confidence_signal=confidence_signal))

    def extend(self, session: str, accepted: int, bonus: int, n: int | None = None, *,
               strategy: str | None = None, min_confidence: float | None = None, confidences: bool = False,
               confidence_signal: str | None = None) -> Draft:
        """``POST /draft {"session","accepted","bonus"}``: the first
        ``accepted`` tokens of the session's last draft were accepted and the
        target produced ``bonus``; the draft after that context. Raises
        :class:`draftd.UnknownSessionError` (409) when the server does not
        hold the session and :class:`draftd.InvalidAcceptedError` (400) when
        ``accepted`` is more than the last draft: resend the whole context
        with :meth:`draft` (``session=``). ``min_confidence``,
        ``confidences``, ``confidence_signal``: as in :meth:`draft`."""
        return self.send(DraftRequest(session=session, accepted=accepted, bonus=bonus, n=n, strategy=strategy,
                                      min_confidence=min_confidence, confidences=confidences,
                                      confidence_signal=confidence_signal))

    def send(self, request: DraftRequest) -> Draft:
        """``POST /draft`` with one :class:`draftd.DraftRequest` (its ``id``
        is not sent)."""
        if not isinstance(request, DraftRequest):
            raise TypeError(f"request is {type(request).__name__}; want a draftd.DraftRequest")
        with self.deadline():
            d = Draft.from_json(self._p.json(self._send(self._p.draft_request(request))))
            if d.tokens:
                self._p.check_draft(d.tokens, request.n, self._limits(), '"draft"')
        return d

    def drafts(self, requests: Sequence[DraftRequest]) -> list[DraftResult]:
        """``POST /v1/drafts``: one call for all ``requests``; one
        :class:`draftd.DraftResult` per request, in order, each with its
        draft or its own error (a bad item fails only itself). An error of
        the whole call (``too_many_items``, ``body_too_large``, a 503, …)
        raises."""
        req = self._p.drafts_request(requests)
        with self.deadline():
            out = self._p.results(self._send(req), requests)
            for i, (r, q) in enumerate(zip(out, requests)):
                if r.draft is not None and r.draft.tokens:
                    self._p.check_draft(r.draft.tokens, q.n, self._limits(), f"/v1/drafts result {i} draft")
        return out

    def delete_session(self, session: str) -> None:
        """``DELETE /v1/sessions/ID`` (204 also when the session is unknown)."""
        with self.deadline():
            self._p.no_content(self._send(self._p.delete_request(session)))

    def health(self) -> Health:
        """``GET /health`` once (a 503 while loading is an answer, not an
        error, and is not retried)."""
        with self.deadline():
            return _Protocol.health(self._send(_Request("GET", "/health"), retry=False), self._p)

    def info(self) -> Info:
        """``GET /v1/info`` (also kept: drafts are checked against its
        ``vocab_size`` and ``draft_len``)."""
        with self.deadline():
            self._info = Info.from_json(self._p.json(self._send(_Request("GET", "/v1/info"))))
        return self._info

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


class AsyncBaseClient(_Deadlines):
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
        self._call_s = _call_seconds(timeout, self._own)
        self._info = None
        self._http = http_client or httpx.AsyncClient(timeout=_timeout(timeout), headers={"User-Agent": "draftd-python"})

    @property
    def base_url(self) -> str:
        return self._p.base_url

    async def _send(self, req: _Request, retry: bool = True) -> _Answer:
        attempt = 0
        while True:
            try:
                left = _left("connect")
                # the call is cancelled at the deadline, wherever it waits
                resp = await (self._once(req) if left is None else asyncio.wait_for(self._once(req), left))
            except (httpx.HTTPError, httpcore.TimeoutException, asyncio.TimeoutError, OSError) as e:
                self._info = None
                raise self._p.transport(e, req) from e
            wait = self._p.retry_wait(resp, attempt) if retry else None
            if wait is None:
                return resp
            await asyncio.sleep(wait)
            attempt += 1

    async def _once(self, req: _Request) -> _Answer:
        r = self._http.build_request(req.method, self._p.base_url + req.path, content=req.body,
                                     headers=self._p.headers(req), timeout=self._p.phases(self._http.timeout))
        resp = await self._http.send(r, stream=True)
        try:
            self._p.encoding(resp, req)
            body = bytearray()
            if resp.is_stream_consumed:  # see BaseClient._once
                self._p.add(body, resp.content, req)
            else:
                chunks: AsyncIterator[bytes] = resp.aiter_raw()
                async for chunk in chunks:
                    self._p.add(body, chunk, req)
        finally:
            await resp.aclose()
        return _Answer(resp.status_code, resp.headers, bytes(body), r)

    async def _limits(self) -> Info:
        if self._info is None:
            await self.info()
        assert self._info is not None
        return self._info

    async def draft(self, tokens: Sequence[int], n: int | None = None, *, strategy: str | None = None,
                    session: str | None = None, min_confidence: float | None = None,
                    confidences: bool = False, confidence_signal: str | None = None) -> Draft:
        """See :meth:`Client.draft`."""
        return await self.send(DraftRequest(tokens=tokens, n=n, strategy=strategy, session=session,
                                            min_confidence=min_confidence, confidences=confidences,
                                            confidence_signal=confidence_signal))

    async def extend(self, session: str, accepted: int, bonus: int, n: int | None = None, *,
                     strategy: str | None = None, min_confidence: float | None = None,
                     confidences: bool = False, confidence_signal: str | None = None) -> Draft:
        """See :meth:`Client.extend`."""
        return await self.send(DraftRequest(session=session, accepted=accepted, bonus=bonus, n=n, strategy=strategy,
                                            min_confidence=min_confidence, confidences=confidences,
                                            confidence_signal=confidence_signal))

    async def send(self, request: DraftRequest) -> Draft:
        """See :meth:`Client.send`."""
        if not isinstance(request, DraftRequest):
            raise TypeError(f"request is {type(request).__name__}; want a draftd.DraftRequest")
        with self.deadline():
            d = Draft.from_json(self._p.json(await self._send(self._p.draft_request(request))))
            if d.tokens:
                self._p.check_draft(d.tokens, request.n, await self._limits(), '"draft"')
        return d

    async def drafts(self, requests: Sequence[DraftRequest]) -> list[DraftResult]:
        """See :meth:`Client.drafts`."""
        req = self._p.drafts_request(requests)
        with self.deadline():
            out = self._p.results(await self._send(req), requests)
            for i, (r, q) in enumerate(zip(out, requests)):
                if r.draft is not None and r.draft.tokens:
                    self._p.check_draft(r.draft.tokens, q.n, await self._limits(), f"/v1/drafts result {i} draft")
        return out

    async def delete_session(self, session: str) -> None:
        """See :meth:`Client.delete_session`."""
        with self.deadline():
            self._p.no_content(await self._send(self._p.delete_request(session)))

    async def health(self) -> Health:
        """See :meth:`Client.health`."""
        with self.deadline():
            return _Protocol.health(await self._send(_Request("GET", "/health"), retry=False), self._p)

    async def info(self) -> Info:
        """See :meth:`Client.info`."""
        with self.deadline():
            self._info = Info.from_json(self._p.json(await self._send(_Request("GET", "/v1/info"))))
        return self._info

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
