"""llama-cpp-python's OpenAI-compatible server with draftd as its draft model.

    python -m draftd.llamacpp_server --model T.gguf --draftd http://127.0.0.1:8080 [--draftd_n 3]
        [--draftd_strategy S] [--draftd_timeout SECONDS] [--prefix_reuse false]
        [any flag of python -m llama_cpp.server: --n_threads, --n_ctx, --host, --port, --chat_format, …]

It is ``python -m llama_cpp.server`` (the same flags, routes and settings;
llama-cpp-python's ``server`` extra) with three differences:

- ``--draftd URL``: every generation drafts through a
  :class:`draftd.llamacpp.DraftdDraftModel` on that draftd server (``--draftd_n``
  tokens a step, default 3; ``--draftd_strategy``: the server's strategy when
  not given; ``--draftd_timeout``: seconds a step waits for its draft, default
  2). A draftd that is down or slow costs drafts, never a request (the step
  decodes one token). Without ``--draftd`` the server runs with no draft
  model: the same server, for comparison. llama-cpp-python's own
  ``--draft_model`` (prompt lookup) cannot be combined with it.
- ``--prefix_reuse false`` (the default here): each generation evaluates its
  whole prompt. llama-cpp-python otherwise keeps the KV of the prompt prefix
  the previous generation shares and evaluates only the rest — a prompt equal
  to the last one re-evaluates its last position alone, and those logits
  differ from a batched prompt pass in their last bits, so a near-tie can
  flip: the output of a request would depend on the one before it.
  ``--prefix_reuse true`` keeps llama-cpp-python's behaviour (faster for chat
  histories that grow; ``--cache`` has an effect only then).
- ``--interrupt_requests false`` by default: the requests queue and each is
  served whole. llama-cpp-python's default (true) ends a streaming response
  early, with ``[DONE]``, when another request arrives.

llama-cpp-python serves one request at a time (one ``Llama``, behind a
lock): concurrent requests wait for one another; drafting does not change
that.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("draftd.llamacpp_server")

DEFAULT_N = 3
DEFAULT_TIMEOUT = 2.0


def _flag(v: str) -> bool:
    s = v.strip().lower()
    if s in ("1", "true", "yes", "on", "t", "y"):
        return True
    if s in ("0", "false", "no", "off", "f", "n"):
        return False
    raise argparse.ArgumentTypeError(f"{v!r} is not a boolean (true/false)")


def _positive_int(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v} must be ≥ 1")
    return n


def _positive_float(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{v} must be > 0")
    return x


def parser() -> argparse.ArgumentParser:
    from llama_cpp.server.cli import add_args_from_model
    from llama_cpp.server.settings import Settings

    p = argparse.ArgumentParser(prog="python -m draftd.llamacpp_server",
                                description="llama-cpp-python's OpenAI-compatible server, drafting through draftd.")
    add_args_from_model(p, Settings)
    p.add_argument("--draftd", metavar="URL", help="the draftd server to draft with (none: no draft model)")
    p.add_argument("--draftd_n", type=_positive_int, default=DEFAULT_N,
                   help=f"draft tokens asked per step (default: {DEFAULT_N})")
    p.add_argument("--draftd_strategy", help="model, lookup, hybrid or pld (default: the draftd server's)")
    p.add_argument("--draftd_timeout", type=_positive_float, default=DEFAULT_TIMEOUT,
                   help=f"seconds one step waits for its draft (default: {DEFAULT_TIMEOUT})")
    p.add_argument("--prefix_reuse", type=_flag, default=False,
                   help="keep the KV of the prompt prefix shared with the previous generation (default: false)")
    return p


def fresh_prompts(llama: Any) -> None:
    """Makes every generation of llama evaluate its whole prompt (no prefix
    kept from the generation before; see the module doc)."""
    generate = llama.generate

    def whole_prompt(tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("reset", True):
            llama.reset()
        return generate(tokens, *args, **kwargs)

    llama.generate = whole_prompt


def configure(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """(server settings, model settings) from the parsed flags, with the
    loader of llama-cpp-python's server set to give each model the draftd
    draft model and whole-prompt evaluation the flags ask for."""
    import llama_cpp.server.model as server_model
    from llama_cpp.server.cli import parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    from .llamacpp import DraftdDraftModel

    if args.draftd is not None and args.draft_model is not None:
        raise SystemExit("--draftd and --draft_model (llama-cpp-python's prompt lookup) cannot be combined")
    if args.draftd is not None and not args.draftd.startswith(("http://", "https://")):
        raise SystemExit(f"--draftd {args.draftd!r} must be an http:// or https:// URL")
    if args.interrupt_requests is None:
        args.interrupt_requests = False
    if args.draftd is not None:
        args.logits_all = True  # llama-cpp-python verifies a draft from every position's logits
    server_settings = parse_model_from_args(ServerSettings, args)
    model_settings = [parse_model_from_args(ModelSettings, args)]

    load = server_model.LlamaProxy.load_llama_from_model_settings
    url, n, strategy, timeout, reuse = (args.draftd, args.draftd_n, args.draftd_strategy, args.draftd_timeout,
                                        args.prefix_reuse)

    def load_with_draftd(settings: Any) -> Any:
        llama = load(settings)
        if url is not None:
            llama.draft_model = DraftdDraftModel(url, n=n, strategy=strategy, timeout=timeout)
            log.info("draftd draft model: %s, n = %d, strategy %s", url, n, strategy or "(server's)")
        if not reuse:
            fresh_prompts(llama)
        return llama

    server_model.LlamaProxy.load_llama_from_model_settings = staticmethod(load_with_draftd)  # type: ignore[method-assign]
    return server_settings, model_settings


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parser().parse_args(argv)
    if args.model is None:
        raise SystemExit("--model T.gguf is required")
    if not os.path.isfile(args.model):
        raise SystemExit(f"--model {args.model}: no such file")
    server_settings, model_settings = configure(args)

    import uvicorn
    from llama_cpp.server.app import create_app

    app = create_app(server_settings=server_settings, model_settings=model_settings)
    print(f"draftd.llamacpp_server: listening on http://{server_settings.host}:{server_settings.port}",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=os.getenv("HOST", server_settings.host), port=int(os.getenv("PORT", server_settings.port)),
                ssl_keyfile=server_settings.ssl_keyfile, ssl_certfile=server_settings.ssl_certfile)


if __name__ == "__main__":
    main()
