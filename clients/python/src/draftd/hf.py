"""draftd as the assistant of Hugging Face transformers' assisted generation.

:class:`DraftdCandidateGenerator` is a transformers ``CandidateGenerator``
(transformers/generation/candidate_generator.py) that asks a draftd server
for the draft at each step, modelled on ``PromptLookupCandidateGenerator``:
no assistant model in the process, the draft clipped so that the target's
bonus token still fits ``max_length``, cut before the first EOS, and no
logits (greedy verification needs none). :func:`assisted_generate` runs
``model.generate()`` with it and returns the output with the acceptance the
generator counted (:class:`AcceptanceStats`: drafted and accepted tokens per
verification step, the same steps ``draftd eval`` replays).

Sessions (optional, ``session=True`` or an id): the generator drafts through
a :class:`draftd.Session`, which sends the whole context once and then, each
step, only how many of the last draft's tokens the target accepted and its
bonus token (and the whole context again if the server lost the session).
The drafts are the ones the whole context gets (the protocol's guarantee),
so the output and the acceptance are those of the plain path; only the
bytes sent per step change.

Binding. transformers has no public argument for a custom candidate
generator. ``generate()`` takes the assisted path when the public
``prompt_lookup_num_tokens`` is set, and then asks the model's
``_get_candidate_generator(generation_config=..., ...)`` for its generator.
:func:`bind` shadows that one method *on the model instance* (not the class)
for the duration of a ``with`` block, and fails loudly if ``generate()``
finished without calling it (so a transformers that changed the path raises
instead of silently running prompt lookup). Tested with transformers 5.23.0
and torch 2.15.0: the ``hf`` extra pins those ranges.

Not here: sampling-based speculative decoding (drafts carry no logits, so
``do_sample=True`` verifies by sampling the target, which is lossless but
untested), batches (transformers' assisted generation takes batch size 1).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
import transformers
from transformers.generation.candidate_generator import CandidateGenerator

from .client import Client
from .errors import DraftdError
from .session import Session, SessionStats

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["AcceptanceStats", "DraftdCandidateGenerator", "bind", "assisted_generate", "TESTED_TRANSFORMERS"]

#: The transformers versions this binding was tested with (pyproject's hf extra).
TESTED_TRANSFORMERS = ">=5.23,<5.24"


@dataclass
class AcceptanceStats:
    """Per verification step: ``drafted[i]`` tokens proposed (after clipping
    to max_length and EOS), ``accepted[i]`` of them the target accepted. The
    target adds one token per step, so ``tokens == Σ accepted + steps``."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    requests: int = 0  # draft requests sent (a step with no room to draft sends none)
    session: SessionStats | None = None  # the requests by form, when drafting through a session

    @property
    def steps(self) -> int:
        return len(self.accepted)

    @property
    def tokens(self) -> int:
        return sum(self.accepted) + self.steps

    @property
    def tau(self) -> float:
        """Mean acceptance length: tokens per verification step."""
        return self.tokens / self.steps if self.steps else 0.0


class DraftdCandidateGenerator(CandidateGenerator):
    """Drafts through a draftd server.

    ``num_tokens``: the n of each request. The draft is asked at full length
    and clipped here (never asked shorter), so each step proposes exactly the
    prefix of what ``draftd eval --n num_tokens`` gets for the same context.
    ``strategy``: a strategy the server offers (None: its default).
    ``eos_token_id``: a tensor of EOS ids; the draft is cut before the first.
    ``max_length``: the generation's max_length (prompt included).
    ``session``: a :class:`draftd.Session` of ``client`` to draft through
    (incremental requests; its n and strategy must be ``num_tokens`` and
    ``strategy``), or None for a whole-context ``/draft`` each step.
    """

    def __init__(
        self,
        client: Client,
        num_tokens: int = 16,
        *,
        strategy: str | None = None,
        eos_token_id: torch.Tensor | None = None,
        max_length: int = 20,
        stats: AcceptanceStats | None = None,
        session: Session | None = None,
    ) -> None:
        if num_tokens < 1:
            raise ValueError(f"num_tokens {num_tokens} must be ≥ 1")
        if session is not None:
            if session.client is not client:
                raise ValueError(f"session {session.id!r} belongs to another client")
            if (session.n, session.strategy) != (num_tokens, strategy):
                raise ValueError(f"session {session.id!r} drafts n={session.n}, strategy={session.strategy!r}; "
                                 f"the generator wants n={num_tokens}, strategy={strategy!r}")
        self.session = session
        self.client = client
        self.num_tokens = num_tokens
        self.strategy = strategy
        self.eos_token_id = eos_token_id
        self.max_length = max_length
        self.stats = stats if stats is not None else AcceptanceStats()
        if session is not None:
            self.stats.session = session.stats

    # The base class declares a logits tensor; like PromptLookupCandidateGenerator
    # this returns None (greedy verification needs no draft logits).
    def get_candidates(self, input_ids: torch.LongTensor, **kwargs: Any) -> tuple[torch.LongTensor, None]:  # type: ignore[override]
        bsz, length = input_ids.shape
        if bsz != 1:
            raise ValueError(f"assisted generation takes batch size 1, got {bsz}")
        # The target adds one token after the draft: at most room − 1 drafted.
        room = self.max_length - length - 1
        draft: list[int] = []
        if room > 0:
            self.stats.requests += 1
            ctx = input_ids[0].tolist()
            if self.session is not None:
                d = self.session.draft(ctx)
            else:
                d = self.client.draft(ctx, self.num_tokens, strategy=self.strategy)
            draft = d.tokens[:room]
            if self.eos_token_id is not None and draft:
                eos = set(self.eos_token_id.reshape(-1).tolist())
                for i, t in enumerate(draft):
                    if t in eos:
                        draft = draft[:i]
                        break
        self.stats.drafted.append(len(draft))
        if not draft:
            return input_ids, None
        cand = torch.tensor([draft], dtype=input_ids.dtype, device=input_ids.device)
        return cast(torch.LongTensor, torch.cat((input_ids, cand), dim=1)), None

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int) -> None:
        self.stats.accepted.append(int(num_matches))


_bind_lock = threading.Lock()


@contextlib.contextmanager
def bind(
    model: PreTrainedModel,
    client: Client,
    num_tokens: int = 16,
    *,
    strategy: str | None = None,
    stats: AcceptanceStats | None = None,
    session: bool | str = False,
) -> Iterator[AcceptanceStats]:
    """Within the block, ``model.generate(..., prompt_lookup_num_tokens=K)``
    drafts through draftd (K itself is not used: ``num_tokens`` is each
    request's n). Yields the stats the generator fills. One generate() at a
    time per process while bound. ``session``: True (a random id) or a
    session id: draft through one :class:`draftd.Session` for the whole
    block (each generate() starts with its whole prompt, then goes
    incrementally), deleted on the server when the block ends."""
    st = stats if stats is not None else AcceptanceStats()
    made: list[DraftdCandidateGenerator] = []
    sess: Session | None = None
    if session is not False:
        if session is True:
            sess = client.session(n=num_tokens, strategy=strategy)
        elif isinstance(session, str):
            sess = client.session(session, n=num_tokens, strategy=strategy)
        else:
            raise TypeError(f"session is {type(session).__name__}; want True, False or a session id")

    def factory(*args: Any, generation_config: Any = None, **kwargs: Any) -> DraftdCandidateGenerator:
        if generation_config is None:
            raise RuntimeError(
                f"transformers {transformers.__version__} called _get_candidate_generator without generation_config; "
                f"draftd.hf was tested with transformers{TESTED_TRANSFORMERS}"
            )
        g = DraftdCandidateGenerator(
            client, num_tokens, strategy=strategy,
            eos_token_id=getattr(generation_config, "_eos_token_tensor", None),
            max_length=generation_config.max_length, stats=st, session=sess,
        )
        made.append(g)
        return g

    if not hasattr(type(model), "_get_candidate_generator"):
        raise RuntimeError(
            f"transformers {transformers.__version__}: {type(model).__name__} has no _get_candidate_generator; "
            f"draftd.hf was tested with transformers{TESTED_TRANSFORMERS}"
        )
    with _bind_lock:
        setattr(model, "_get_candidate_generator", factory)  # noqa: B010 - shadows the method on this instance only
        try:
            yield st
        finally:
            del model._get_candidate_generator
            if sess is not None:
                try:
                    sess.close()
                except DraftdError:
                    if sys.exc_info()[1] is None:
                        raise  # else the block's own exception is the one to see
    if not made:
        raise RuntimeError(
            f"transformers {transformers.__version__}: generate() ran without asking for a candidate generator "
            f"(was prompt_lookup_num_tokens given and do_sample/num_beams left for assisted generation?); "
            f"draftd.hf was tested with transformers{TESTED_TRANSFORMERS}"
        )


def assisted_generate(
    model: PreTrainedModel,
    input_ids: torch.LongTensor | Sequence[int],
    client: Client,
    num_tokens: int = 16,
    *,
    strategy: str | None = None,
    session: bool | str = False,
    **generate_kwargs: Any,
) -> tuple[Any, AcceptanceStats]:
    """Greedy ``model.generate()`` with draftd as the assistant; returns
    ``(generate's output, AcceptanceStats)``. ``session``: see :func:`bind`.
    ``generate_kwargs`` go to generate() (max_new_tokens,
    return_dict_in_generate, ...)."""
    ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.tensor([list(input_ids)], dtype=torch.long)
    generate_kwargs.setdefault("do_sample", False)
    generate: Any = getattr(model, "generate")  # noqa: B009 - typed Any: torch's Module stubs hide it
    with bind(model, client, num_tokens, strategy=strategy, session=session) as st:
        out = generate(ids, prompt_lookup_num_tokens=num_tokens, **generate_kwargs)
    return out, st
