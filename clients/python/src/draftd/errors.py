"""Exceptions of the draftd client.

Every error the server answers is a JSON body ``{"error":{"code","message"}}``
(internal/server/errors.go); :func:`error_for` turns one into the exception
class of its status, carrying the server's ``code`` and message. Failures
that never reached an answer (connect, timeout) are :class:`TransportError`;
an answer that is not the protocol's is :class:`ProtocolError`. This module
does not send requests.
"""

from __future__ import annotations

__all__ = [
    "DraftdError",
    "TransportError",
    "ConnectError",
    "TimeoutError",
    "ProtocolError",
    "APIError",
    "BadRequestError",
    "NotFoundError",
    "MethodNotAllowedError",
    "RequestTimeoutError",
    "UnknownSessionError",
    "InvalidAcceptedError",
    "PayloadTooLargeError",
    "ServiceUnavailableError",
    "InternalServerError",
    "error_for",
    "item_error_for",
    "CODES",
]


class DraftdError(Exception):
    """Base of every exception this package raises."""


class TransportError(DraftdError):
    """The request got no answer: the connection failed or timed out."""


class ConnectError(TransportError):
    """Could not connect to the server (nothing listening, refused, DNS)."""


class TimeoutError(TransportError):  # noqa: A001 - the package's own, a TransportError
    """The client's timeout (connect, write, read or pool) expired."""


class ProtocolError(DraftdError):
    """The server answered something that is not the draft protocol (for
    example a proxy's HTML page, or a draft that is not a list of ids)."""


class APIError(DraftdError):
    """The server answered an error: ``status``, its ``code`` (one of
    :data:`CODES`, or what a newer server sends), ``message`` and the
    ``retry_after`` seconds of a 503 (``None`` without the header)."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class BadRequestError(APIError):
    """400: the request is wrong (bad JSON, tokens, n, strategy, context too
    long). Retrying the same request gives the same answer."""


class InvalidAcceptedError(BadRequestError):
    """400 ``invalid_accepted`` (docs/protocol.md, sessions): ``accepted`` is
    more than the session's last draft. The session is unchanged; resend the
    context as ``tokens`` (:class:`draftd.Session` does)."""


class NotFoundError(APIError):
    """404 ``not_found``: no such route (a wrong base URL or path prefix)."""


class MethodNotAllowedError(APIError):
    """405 ``method_not_allowed``."""


class RequestTimeoutError(APIError):
    """408 ``body_timeout``: the server did not receive the body in time."""


class UnknownSessionError(APIError):
    """409 ``unknown_session`` (docs/protocol.md, sessions): the server does
    not hold the session (never established, deleted, expired, evicted, or
    another replica / a restarted one). Resend the whole context as
    ``tokens`` with the same session (:class:`draftd.Session` does)."""


class PayloadTooLargeError(APIError):
    """413 ``body_too_large``: the body is over the server's --max-body-bytes."""


class ServiceUnavailableError(APIError):
    """503: loading, queue full, queue timeout, busy, shutting down or a
    server-side timeout. The server sends ``Retry-After``; the clients retry
    these (and only these) up to ``max_retries`` times."""


class InternalServerError(APIError):
    """500 ``internal``: a bug in the server."""


#: Every error code internal/server/errors.go defines, with its status.
#: ``client_closed`` (499) is only logged by the server, never sent.
CODES: dict[str, int] = {
    "invalid_json": 400,
    "invalid_request": 400,
    "missing_tokens": 400,
    "invalid_token": 400,
    "token_out_of_range": 400,
    "invalid_n": 400,
    "context_too_long": 400,
    "context_over_kv_budget": 400,
    "invalid_strategy": 400,
    "invalid_input": 400,
    "invalid_accepted": 400,  # docs/protocol.md, sessions
    "too_many_items": 400,  # docs/protocol.md, /v1/drafts
    "unknown_session": 409,  # docs/protocol.md, sessions
    "body_too_large": 413,
    "body_timeout": 408,
    "not_found": 404,
    "method_not_allowed": 405,
    "loading": 503,
    "queue_full": 503,
    "queue_timeout": 503,
    "busy": 503,
    "shutting_down": 503,
    "timeout": 503,
    "internal": 500,
}

_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    408: RequestTimeoutError,
    409: UnknownSessionError,
    413: PayloadTooLargeError,
    500: InternalServerError,
    503: ServiceUnavailableError,
}


_BY_CODE: dict[str, type[APIError]] = {
    "invalid_accepted": InvalidAcceptedError,
    "unknown_session": UnknownSessionError,
}


def error_for(status: int, code: str, message: str, retry_after: float | None = None) -> APIError:
    """The exception for an error answer: its class follows the status (a
    status this client does not know gives a plain :class:`APIError`), and
    for the codes with a class of their own (``invalid_accepted``) that
    class when the status is the code's."""
    cls = _BY_STATUS.get(status, APIError)
    if (sub := _BY_CODE.get(code)) is not None and CODES.get(code) == status:
        cls = sub
    return cls(status, code, message, retry_after)


def item_error_for(code: str, message: str) -> APIError:
    """The exception of a failed item of ``POST /v1/drafts``: an item's error
    has a code but no status of its own, so ``status`` is the one the code
    has on ``/draft`` (:data:`CODES`), and 0 for a code this client does not
    know (a plain :class:`APIError`)."""
    return error_for(CODES.get(code, 0), code, message)
