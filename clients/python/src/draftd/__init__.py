"""draftd: a client for the draftd drafter service (docs/protocol.md: /draft,
/v1/drafts, sessions, /health, /v1/info), blocking (:class:`Client`) and asyncio
(:class:`AsyncClient`), with typed answers and exceptions carrying the
server's error codes. The transformers integration is :mod:`draftd.hf`
(install the ``hf`` extra); it is not imported here, so the client needs only
httpx."""

from .client import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, SESSION_HEADER, AsyncClient, Client
from .errors import (
    CODES,
    APIError,
    BadRequestError,
    ConnectError,
    DraftdError,
    InternalServerError,
    InvalidAcceptedError,
    MethodNotAllowedError,
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    RequestTimeoutError,
    ServiceUnavailableError,
    TimeoutError,
    TransportError,
    UnknownSessionError,
)
from .session import AsyncSession, Session, SessionStats
from .types import MAX_SESSION_ID_LEN, Draft, DraftRequest, DraftResult, Health, Info, WeightShare

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "Client", "DEFAULT_MAX_RETRIES", "DEFAULT_TIMEOUT", "SESSION_HEADER", "MAX_SESSION_ID_LEN",
    "Session", "AsyncSession", "SessionStats",
    "CODES", "APIError", "BadRequestError", "ConnectError", "DraftdError", "InternalServerError", "InvalidAcceptedError",
    "MethodNotAllowedError", "NotFoundError", "PayloadTooLargeError", "ProtocolError", "RequestTimeoutError",
    "ServiceUnavailableError", "TimeoutError", "TransportError", "UnknownSessionError",
    "Draft", "DraftRequest", "DraftResult", "Health", "Info", "WeightShare",
]
