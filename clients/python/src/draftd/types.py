"""Typed requests and answers of the draftd protocol (docs/protocol.md): what
``/draft``, ``/v1/drafts``, ``/health`` and ``/v1/info`` take and return,
checked and decoded. Building and parsing only; no requests are sent here."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import math
import re

from .errors import APIError, ProtocolError, item_error_for

__all__ = ["Draft", "DraftRequest", "DraftResult", "Health", "Info", "WeightShare", "MAX_SESSION_ID_LEN", "check_session_id"]

#: The longest session id the protocol allows (bytes of ``[A-Za-z0-9._:-]``).
MAX_SESSION_ID_LEN = 128
_SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,%d}" % MAX_SESSION_ID_LEN)


def _clip(v: object) -> str:
    """repr of v for a message, at most 64 characters then its length."""
    r = repr(v)
    return r if len(r) <= 64 else f"{r[:64]}… ({len(r)} chars)"


def check_session_id(session: object) -> str:
    """session when it is a valid session id (1–128 bytes of
    ``[A-Za-z0-9._:-]``); raises TypeError / ValueError naming it otherwise."""
    if not isinstance(session, str):
        raise TypeError(f"session is {type(session).__name__}; want a str of 1–{MAX_SESSION_ID_LEN} bytes of [A-Za-z0-9._:-]")
    if not _SESSION_ID.fullmatch(session):
        raise ValueError(f"session {_clip(session)} must be 1–{MAX_SESSION_ID_LEN} bytes of [A-Za-z0-9._:-]")
    return session


def check_tokens(tokens: Sequence[int], what: str = "tokens") -> list[int]:
    """tokens as a list of ints. Types only, so that the JSON is what the
    caller meant (a bool or a float would not encode as an id; a numpy
    integer is converted); the values (range, length) are the server's to
    judge, against its model."""
    if (isinstance(tokens, (str, bytes, AbstractSet, Mapping))  # a set has no order, a dict gives its keys
            or not isinstance(tokens, Sequence) and not hasattr(tokens, "__iter__")):
        raise TypeError(f"{what} is {type(tokens).__name__}; want a sequence of ints")
    out: list[int] = []
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not hasattr(t, "__index__"):
            raise TypeError(f"{what}[{i}] is {type(t).__name__}; token ids must be integers")
        out.append(t.__index__())
    return out


def _check_int(v: object, what: str) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{what} is {type(v).__name__}; want an int")
    return int(v.__index__())


@dataclass(frozen=True)
class DraftRequest:
    """One draft request: a ``/draft`` body, or an item of ``/v1/drafts``.

    Plain: ``tokens`` (the whole context), ``n`` (None: the server's
    --draft-len), ``strategy`` (None: the server's --strategy). Sessions
    (docs/protocol.md, sessions): ``session`` with ``tokens`` establishes or
    replaces the session's context; ``session`` with ``accepted`` and
    ``bonus`` instead of ``tokens`` extends it by the first ``accepted``
    tokens of its last draft and the target's ``bonus`` token — or, a
    sequence, the bonus and the tokens the target produced in steps no
    draft was asked for (a one-token sequence is sent as its int). ``id``: a
    string the batch answer echoes (``/v1/drafts`` only; ignored by
    ``/draft``). ``min_confidence``: a confidence-bounded draft — the chain
    stops before the first token whose confidence is below it, so the draft
    has 0 to n tokens (0 ≤ x ≤ 1; 0: off; None: not sent, the server's
    ``--min-confidence`` for ``/v1/drafts`` and sessions, exactly n tokens
    for a plain ``/draft``). ``confidences``: ask for each draft token's
    confidence (:attr:`Draft.confidences`). ``confidence_signal``: what a
    confidence is, ``"top1_prob"`` or ``"chain_prob"`` (``confidence_signals``
    in /v1/info; None: not sent, the server's ``--confidence-signal``).
    Checked when built: TypeError / ValueError name what is wrong, before
    anything is sent."""

    tokens: Sequence[int] | None = None
    n: int | None = None
    strategy: str | None = None
    session: str | None = None
    accepted: int | None = None
    bonus: int | Sequence[int] | None = None
    id: str | None = None
    min_confidence: float | None = None
    confidences: bool = False
    confidence_signal: str | None = None

    def __post_init__(self) -> None:
        if self.min_confidence is not None:
            object.__setattr__(self, "min_confidence", check_min_confidence(self.min_confidence))
        if not isinstance(self.confidences, bool):
            raise TypeError(f"confidences is {type(self.confidences).__name__}; want a bool")
        if self.confidence_signal is not None and (not isinstance(self.confidence_signal, str)
                                                   or not self.confidence_signal):
            raise TypeError(f"confidence_signal is {self.confidence_signal!r}; want a signal name such as "
                            "'chain_prob'")
        if self.tokens is not None:
            object.__setattr__(self, "tokens", check_tokens(self.tokens))
        if self.n is not None:
            object.__setattr__(self, "n", _check_int(self.n, "n"))
        if self.strategy is not None and not isinstance(self.strategy, str):
            raise TypeError(f"strategy is {type(self.strategy).__name__}; want a str")
        if self.id is not None and not isinstance(self.id, str):
            raise TypeError(f"id is {type(self.id).__name__}; want a str")
        if self.session is not None:
            check_session_id(self.session)
        inc = self.accepted is not None or self.bonus is not None
        if inc:
            if self.session is None:
                raise ValueError("accepted and bonus extend a session: give session too")
            if self.accepted is None or self.bonus is None:
                raise ValueError("give accepted and bonus together")
            object.__setattr__(self, "accepted", _check_int(self.accepted, "accepted"))
            if isinstance(self.bonus, Sequence) or not hasattr(self.bonus, "__index__"):
                b = check_tokens(self.bonus, "bonus")  # type: ignore[arg-type]
                if not b:
                    raise ValueError("bonus is empty; give the token the target produced (an int, or a "
                                     "sequence of at least one)")
                object.__setattr__(self, "bonus", b[0] if len(b) == 1 else b)
            else:
                object.__setattr__(self, "bonus", _check_int(self.bonus, "bonus"))
            if self.tokens is not None:
                raise ValueError("give either tokens or accepted and bonus, not both")
            if self.accepted < 0:
                raise ValueError(f"accepted {self.accepted} must be ≥ 0")
        elif self.tokens is None:
            raise ValueError("give tokens (or, with session, accepted and bonus)")

    @property
    def incremental(self) -> bool:
        """Whether this extends a session (``accepted`` + ``bonus``)."""
        return self.accepted is not None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this request (None fields left out)."""
        body: dict[str, Any] = {}
        if self.id is not None:
            body["id"] = self.id
        if self.session is not None:
            body["session"] = self.session
        if self.tokens is not None:
            body["tokens"] = self.tokens
        else:
            body["accepted"] = self.accepted
            body["bonus"] = self.bonus
        if self.n is not None:
            body["n"] = self.n
        if self.strategy is not None:
            body["strategy"] = self.strategy
        if self.min_confidence is not None:
            body["min_confidence"] = self.min_confidence
        if self.confidences:
            body["confidences"] = True
        if self.confidence_signal is not None:
            body["confidence_signal"] = self.confidence_signal
        return body


def check_min_confidence(v: object) -> float:
    """v as a confidence bound: a number 0 ≤ v ≤ 1 (TypeError / ValueError
    naming ``min_confidence`` otherwise)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"min_confidence is {type(v).__name__}; want a number in [0, 1]")
    if not (math.isfinite(v) and 0 <= v <= 1):
        raise ValueError(f"min_confidence {v!r} must be in [0, 1] (0: off)")
    return float(v)


def _int_list(v: Any, what: str) -> list[int]:
    if not isinstance(v, list) or not all(type(x) is int for x in v):
        raise ProtocolError(f"{what} is not a list of integers: {str(v)[:80]}")
    return v


@dataclass(frozen=True)
class Draft:
    """A draft: ``tokens`` is the drafted continuation (at most the ``n``
    asked; shorter when the model's maximum context leaves less room, or
    below a confidence bound). ``stop_reason`` (``"n"``, ``"confidence"``,
    ``"context"``: why the chain stopped) is there only when a bound was in
    force or confidences were asked for, ``confidences`` (one in [0, 1] per
    token) only when asked for; None otherwise."""

    tokens: list[int]
    stop_reason: str | None = None
    confidences: list[float] | None = None

    @classmethod
    def from_json(cls, body: Any) -> Draft:
        if not isinstance(body, dict) or "draft" not in body:
            raise ProtocolError(f'answer has no "draft": {str(body)[:80]}')
        return cls._from(body, '"draft"')

    @classmethod
    def _from(cls, body: dict[str, Any], what: str) -> Draft:
        """The draft of an answer object (a /draft body or a /v1/drafts
        result) that has "draft"; ``what`` names it in errors."""
        tokens = _int_list(body["draft"], what)
        stop = body.get("stop_reason")
        if stop is not None and not isinstance(stop, str):
            raise ProtocolError(f"{what}: stop_reason is not a string: {str(stop)[:80]}")
        conf = body.get("confidences")
        if conf is not None:
            if (not isinstance(conf, list) or len(conf) != len(tokens)
                    or not all(type(c) in (int, float) and 0 <= c <= 1 for c in conf)):
                raise ProtocolError(f"{what}: confidences is not {len(tokens)} numbers in [0, 1]: {str(conf)[:80]}")
            conf = [float(c) for c in conf]
        return cls(tokens=tokens, stop_reason=stop, confidences=conf)


@dataclass(frozen=True)
class DraftResult:
    """One item of a ``POST /v1/drafts`` answer, in request order: ``id`` as
    the request gave it (None without one), and either ``draft`` or
    ``error`` (the exception the same failure raises from ``/draft``: a
    :class:`draftd.BadRequestError`, :class:`draftd.UnknownSessionError`,
    …, whose ``status`` is the code's status on ``/draft``)."""

    id: str | None
    draft: Draft | None = None
    error: APIError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def stop_reason(self) -> str | None:
        """The draft's :attr:`Draft.stop_reason` (None: absent, or an error)."""
        return None if self.draft is None else self.draft.stop_reason

    @property
    def confidences(self) -> list[float] | None:
        """The draft's :attr:`Draft.confidences` (None: absent, or an error)."""
        return None if self.draft is None else self.draft.confidences

    def result(self) -> Draft:
        """The draft, or raises the item's error."""
        if self.error is not None:
            raise self.error
        assert self.draft is not None
        return self.draft

    @classmethod
    def list_from_json(cls, body: Any, count: int) -> list[DraftResult]:
        """The ``drafts`` of a ``/v1/drafts`` answer to ``count`` items."""
        if not isinstance(body, dict) or not isinstance(body.get("drafts"), list):
            raise ProtocolError(f'/v1/drafts answer has no "drafts" array: {str(body)[:80]}')
        items = body["drafts"]
        if len(items) != count:
            raise ProtocolError(f"/v1/drafts answered {len(items)} results for {count} requests")
        out: list[DraftResult] = []
        for i, r in enumerate(items):
            if not isinstance(r, dict) or "id" not in r:
                raise ProtocolError(f"/v1/drafts result {i} is not an object with an id: {str(r)[:80]}")
            rid = r["id"]
            if rid is not None and not isinstance(rid, str):
                raise ProtocolError(f"/v1/drafts result {i}: id is not a string: {str(rid)[:80]}")
            if "error" in r:
                e = r["error"]
                if not isinstance(e, dict) or not isinstance(e.get("code"), str) or not isinstance(e.get("message"), str):
                    raise ProtocolError(f"/v1/drafts result {i}: malformed error: {str(e)[:80]}")
                out.append(cls(rid, error=item_error_for(e["code"], e["message"])))
            elif "draft" in r:
                out.append(cls(rid, draft=Draft._from(r, f"/v1/drafts result {i} draft")))
            else:
                raise ProtocolError(f"/v1/drafts result {i} has neither draft nor error: {str(r)[:80]}")
        return out


@dataclass(frozen=True)
class Health:
    """``GET /health``: ``status`` is ``ok``, ``loading`` or
    ``shutting_down`` (``unavailable``: a 503 without a draftd body, such as
    a proxy's); ``ok`` is true only for 200 ``ok``."""

    status: str
    ok: bool
    retry_after: float | None = None


@dataclass(frozen=True)
class WeightShare:
    tensors: int
    parameters: int
    bytes: int
    bits_per_weight: float


@dataclass(frozen=True)
class Info:
    """``GET /v1/info``: the model and the server's settings. ``raw`` keeps
    the whole answer (fields a newer server adds are there)."""

    architecture: str
    model: str
    parameters: int
    vocab_size: int
    max_context: int
    max_draft_len: int
    draft_len: int
    strategy: str
    strategies: list[str]
    version: str
    threads: int
    kernels: str
    weight_mix: dict[str, WeightShare] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, body: Any) -> Info:
        """The Info of a /v1/info answer; ProtocolError naming the first
        field that is missing or not of its type (nothing is coerced: a
        string is not a list, 1.7 is not an int)."""
        if not isinstance(body, dict):
            raise ProtocolError(f"/v1/info answer is not a JSON object: {str(body)[:80]}")
        mix = body.get("weight_mix")
        if mix is None:
            mix = {}
        if not isinstance(mix, dict):
            raise ProtocolError(f'/v1/info "weight_mix" is {_kind(mix)}; want an object')
        strategies = _field(body, "strategies", list)
        for i, v in enumerate(strategies):
            if not isinstance(v, str):
                raise ProtocolError(f'/v1/info "strategies"[{i}] is {_kind(v)}; want a string')
        shares: dict[str, WeightShare] = {}
        for k, v in mix.items():
            if not isinstance(v, dict):
                raise ProtocolError(f'/v1/info "weight_mix"[{_clip(k)}] is {_kind(v)}; want an object')
            w = f'weight_mix"[{_clip(k)}]["'
            shares[k] = WeightShare(_int(v, "tensors", 0, w), _int(v, "parameters", 0, w), _int(v, "bytes", 0, w),
                                    _number(v, "bits_per_weight", w))
        return cls(
            architecture=_field(body, "architecture", str),
            model=_field(body, "model", str),
            parameters=_int(body, "parameters", 0),
            vocab_size=_int(body, "vocab_size", 1),
            max_context=_int(body, "max_context", 1),
            max_draft_len=_int(body, "max_draft_len", 1),
            draft_len=_int(body, "draft_len", 1),
            strategy=_field(body, "strategy", str),
            strategies=list(strategies),
            version=_field(body, "version", str),
            threads=_int(body, "threads", 0),
            kernels=_field(body, "kernels", str),
            weight_mix=shares,
            raw=body,
        )


def _kind(v: object) -> str:
    """The JSON kind of a decoded value, for a message."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return f"the number {_clip(v)}"
    if isinstance(v, str):
        return f"the string {_clip(v)}"
    return "an array" if isinstance(v, list) else "an object"


def _field(body: dict[str, Any], key: str, kind: type, where: str = "") -> Any:
    what = f'/v1/info "{where}{key}"'
    if key not in body:
        raise ProtocolError(f"{what} is missing")
    v = body[key]
    if not isinstance(v, kind):
        raise ProtocolError(f"{what} is {_kind(v)}; want {'a string' if kind is str else 'an array'}")
    return v


def _int(body: dict[str, Any], key: str, least: int, where: str = "") -> int:
    what = f'/v1/info "{where}{key}"'
    if key not in body:
        raise ProtocolError(f"{what} is missing")
    v = body[key]
    if type(v) is not int or v < least:
        raise ProtocolError(f"{what} is {_kind(v)}; want an integer ≥ {least}")
    return v


def _number(body: dict[str, Any], key: str, where: str = "") -> float:
    what = f'/v1/info "{where}{key}"'
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtocolError(f"{what} is {'missing' if key not in body else _kind(v)}; want a number")
    return float(v)
