"""Typed answers of the draftd protocol (docs/protocol.md): what ``/draft``,
``/health`` and ``/v1/info`` return, decoded and checked. Parsing only; no
requests are sent here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ProtocolError

__all__ = ["Draft", "Health", "Info", "WeightShare"]


def _int_list(v: Any, what: str) -> list[int]:
    if not isinstance(v, list) or not all(type(x) is int for x in v):
        raise ProtocolError(f"{what} is not a list of integers: {str(v)[:80]}")
    return v


@dataclass(frozen=True)
class Draft:
    """A draft: ``tokens`` is the drafted continuation (at most the ``n``
    asked; shorter when the model's maximum context leaves less room)."""

    tokens: list[int]

    @classmethod
    def from_json(cls, body: Any) -> Draft:
        if not isinstance(body, dict) or "draft" not in body:
            raise ProtocolError(f'answer has no "draft": {str(body)[:80]}')
        return cls(tokens=_int_list(body["draft"], '"draft"'))


@dataclass(frozen=True)
class Health:
    """``GET /health``: ``status`` is ``ok``, ``loading`` or
    ``shutting_down``; ``ok`` is true only for 200 ``ok``."""

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
        if not isinstance(body, dict):
            raise ProtocolError(f"/v1/info answer is not a JSON object: {str(body)[:80]}")
        try:
            return cls(
                architecture=str(body["architecture"]),
                model=str(body["model"]),
                parameters=int(body["parameters"]),
                vocab_size=int(body["vocab_size"]),
                max_context=int(body["max_context"]),
                max_draft_len=int(body["max_draft_len"]),
                draft_len=int(body["draft_len"]),
                strategy=str(body["strategy"]),
                strategies=[str(s) for s in body["strategies"]],
                version=str(body["version"]),
                threads=int(body["threads"]),
                kernels=str(body["kernels"]),
                weight_mix={
                    k: WeightShare(int(v["tensors"]), int(v["parameters"]), int(v["bytes"]), float(v["bits_per_weight"]))
                    for k, v in (body.get("weight_mix") or {}).items()
                },
                raw=body,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"/v1/info answer lacks or mistypes a field: {e!r}") from e
