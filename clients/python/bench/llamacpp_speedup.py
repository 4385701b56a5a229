#!/usr/bin/env python3
"""llama.cpp with draftd, side by side with llama.cpp alone and with its own
speculative methods, on the real pair: the target is Qwen2.5-Coder-1.5B-Instruct
(the Q4_K_M GGUF file), the drafter Qwen2.5-Coder-0.5B-Instruct (its GGUF
file), greedy, one request at a time, on this machine.

Rows (each on the same prompts, --tokens tokens each):
- llama.cpp alone: llama-cpp-python, no draft model (T threads; 1 and 2);
- llama.cpp's own draft model with the same 0.5B file: llama-speculative-simple
  --spec-type draft-simple --spec-draft-n-max N (target and draft T threads);
- llama.cpp's n-gram methods: llama-server --spec-type ngram-* (POST /completion);
- draftd model / hybrid through draftd.llamacpp.DraftdDraftModel (sessions,
  budgeted drafts): sequential, and with pre-drafted branches (draftd serve
  --predraft-branches B: the next draft made while the target verifies), at
  each thread split: 1+1 (the target pinned to CPU 0, draftd to CPU 1) and
  2+2 (both on both CPUs, time-shared); the drafter file is --drafter's;
- the recommended configuration (docs/serving.md): hybrid, draftd serve
  --confidence-signal chain_prob --min-confidence --chain-bound on
  --chain-drafter, n ≤ --chain-n, 2+2 (with --adaptive also with the policy's
  own length and bound); --chain-n 0 leaves these rows out.
--serve adds draftd serve flags to every draftd row (e.g. a trimmed head).
Columns: output tokens/s (decode: from the first generated token to the last,
the prompt's pass left out alike for every row), speed-up over llama.cpp alone
at 2 threads, τ (tokens per target verification step), outputs equal to plain
greedy (llama.cpp alone's tokens; llama-speculative-simple's text), and the
speed-up docs/serving.md#the-predicted-speed-up predicts from component times measured in isolation
(T_step: alone's decode time per token; T_verify(k): one Llama.eval of k
positions with every position's logits, as the speculative path runs it;
the draft round trip R(k) of draftd alone; the engine's per-cycle work).
Then a per-cycle breakdown of every draftd row: draft (draftd's own time per
request, from its /metrics), HTTP (the client's round trip minus that), verify
(Llama.eval), engine (the rest: llama-cpp-python's sampling and bookkeeping).

Every configuration runs in its own process (so OMP_WAIT_POLICY and the CPU
affinity are its own). This build of llama.cpp uses OpenMP; --omp-wait sets
OMP_WAIT_POLICY for the draftd rows. Unset (the default) is the faster: with
PASSIVE the target's threads sleep at every barrier of a graph and its
5-position verification took 205 ms instead of 145 (2 threads); OpenMP's
default spins only briefly after a graph, so it does not hold the cores
draftd then drafts on.

Prompt sets (--prompts): short — code, chat instructions, prose (~20–400
tokens) — and long — source files and chat histories of this repository's
own Go and Python sources and docs, ~600–2,400 tokens
(draftd._testing.realtarget.long_texts, the chat histories in Qwen2.5's
template) — or both, each its own components (T_step, T_verify(k) at that
context), rows and table (--out/short, --out/long). --quick: one prompt per
kind and only the rows alone (2 threads), llama.cpp's draft model and draftd
model 2+2 (with --adaptive, also the adaptive row).

  DRAFTD_LLAMACPP_TOOLS=$(scripts/llamacpp-python | tail -n1) \\
  ~/.cache/draftd/venv/bin/python clients/python/bench/llamacpp_speedup.py --prompts both --adaptive --out /tmp/sbs

A measurement, not a test (nothing asserted; equality is reported). The test of
the same path is tests/test_llamacpp_e2e.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from draftd._testing import metrics as prom
from draftd._testing.neartie import from_top, gap_for
from draftd._testing.neartie import near_tie as _near_tie

# realtarget imports torch only in load_target, which never runs here (torch's
# OpenMP runtime must not share a worker's process with llama.cpp's)
from draftd._testing.realtarget import PROSE, chat_text, long_texts
from draftd._testing.serve import DRAFTER_FILE, REPO, TARGET_FILE, build_draftd, real_models_dir, start_server

if TYPE_CHECKING:  # draftd.llamacpp imports llama_cpp: a worker imports it once its environment is set
    from draftd.llamacpp import Acceptance

#: draftd._testing.neartie's gap for llama.cpp (its batched quantized kernels).
NEAR_TIE_GAP = gap_for("llama.cpp")


def add_draftd_flags(ap: argparse.ArgumentParser, drafter_help: str) -> None:
    """--drafter (a drafter GGUF, default None: the real 0.5B file) and
    --serve (more ``draftd serve`` flags, one shell-quoted string: split
    them with shlex) of the llama.cpp benches."""
    ap.add_argument("--drafter", type=Path, help=drafter_help)
    ap.add_argument("--serve", default="", help="more draftd serve flags of every draftd server, e.g. "
                    "'--draft-vocab 65536 --draft-vocab-file vocab.json'")


def prompt_texts(per_kind: int) -> list[tuple[str, str]]:
    """(id, text) of per_kind prompts of each kind: code to complete (the
    start of a Go standard-library file and of a Python file of this
    repository), chat-templated instructions (scripts/realtau.d/chat.json, the
    real-τ set's), prose."""
    goroot = Path(os.environ.get("GOROOT", "/usr/local/go"))
    code = [
        ("code-go", "\n".join((goroot / "src/sort/sort.go").read_text().splitlines()[:40]) + "\n"),
        ("code-py", "\n".join((REPO / "testdata/reference/quantize_ref.py").read_text().splitlines()[:40]) + "\n"),
    ]
    chat_q = json.loads((REPO / "scripts/realtau.d/chat.json").read_text())
    chat = [(f"chat-{i}", chat_text(q)) for i, q in enumerate(chat_q)]
    prose = [(f"prose-{i}", p) for i, p in enumerate(PROSE)]
    if per_kind > min(len(code), len(chat), len(prose)):
        raise SystemExit(f"--per-kind {per_kind}: at most {min(len(code), len(chat), len(prose))}")
    out = []
    for i in range(per_kind):
        out += [code[i], chat[i], prose[i]]
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# ---------------------------------------------------------------- workers
# A worker is this script run with --worker SPEC (JSON); it prints one JSON
# line with its results. Each imports llama_cpp itself (after the env is set).


def _llama(path: str, threads: int, logits_all: bool, draft_model: Any = None, n_ctx: int = 2048) -> Any:
    from llama_cpp import Llama

    return Llama(model_path=path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, seed=0, verbose=False,
                 logits_all=logits_all, draft_model=draft_model)


def _timed_generate(llama: Any, ids: list[int], tokens: int) -> tuple[list[int], float, float, float, Acceptance]:
    """draftd.llamacpp.generate of at most ``tokens`` tokens (greedy, every
    position's logits only where a draft is verified: llama.cpp alone's
    prompt pass), with the time it started, the times the first and the
    last token became known (its ``on_token``), and the Acceptance (empty
    without a draft model)."""
    from draftd.llamacpp import generate

    stamps: list[float] = []
    t_start = time.perf_counter()
    g = generate(llama, ids, tokens, on_token=lambda _: stamps.append(time.perf_counter()))
    return g.tokens, t_start, stamps[0], stamps[-1], g.acceptance


def _top2(llama: Any, ids: list[int], out: list[int]) -> list[list[float]]:
    """Per output token, the two best tokens and their logits in the row
    that chose it: [[id1, logit1, id2, logit2], …] (the near-tie rule)."""
    import numpy as np

    rows = np.asarray(llama.scores[len(ids) - 1: len(ids) - 1 + len(out)])
    two = np.argpartition(rows, -2, axis=1)[:, -2:]
    res = []
    for r, (i, j) in zip(rows, two):
        if r[j] > r[i]:
            i, j = j, i
        res.append([int(i), float(r[i]), int(j), float(r[j])])
    return res


def near_tie(plain: list[int], plain_top: list[list[float]], got: list[int], got_top: list[list[float]]) -> tuple[bool, str]:
    """draftd._testing.neartie's rule on each run's top-2 ([id, logit, id, logit] per position)."""
    def pairs(top: list[list[float]]) -> list[list[tuple[int, float]]]:
        return [[(int(t[0]), t[1]), (int(t[2]), t[3])] for t in top]

    return _near_tie(plain, got, from_top(pairs(plain_top)), from_top(pairs(got_top)), NEAR_TIE_GAP)


def worker_plain(spec: dict[str, Any]) -> dict[str, Any]:
    llama = _llama(spec["target"], spec["threads"], True, n_ctx=spec.get("n_ctx", 2048))  # every position's logits: the near-tie rule
    res = []
    for sid, ids in spec["prompts"]:
        out, ts, t0, t1, _ = _timed_generate(llama, ids, spec["tokens"])
        res.append({"id": sid, "tokens": out, "decode_s": t1 - t0, "request_s": t1 - ts, "top2": _top2(llama, ids, out)})
    return {"samples": res}


def worker_components(spec: dict[str, Any]) -> dict[str, Any]:
    """T_verify(k) for k = 1..kmax: one Llama.eval of k positions (every
    position's logits, as with a draft model) after each prompt + 32 tokens;
    and the per-position cost of llama-cpp-python's sampling."""
    llama = _llama(spec["target"], spec["threads"], True, n_ctx=spec.get("n_ctx", 2048))
    # generate()'s sampler (kept for the whole generation, not made per call)
    llama._sampler = llama._init_sampler(temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
    kmax, reps = spec["kmax"], spec["reps"]
    times: dict[int, list[float]] = {k: [] for k in range(1, kmax + 1)}
    sample_s: list[float] = []
    for sid, ids in spec["prompts"]:
        ctx = ids + spec["continuations"][sid][:32]
        llama.reset()
        llama.eval(ctx)
        base = llama.n_tokens
        for _ in range(reps):
            for k in range(1, kmax + 1):
                llama.n_tokens = base
                toks = spec["continuations"][sid][32:32 + k]
                t = time.perf_counter()
                llama.eval(toks)
                times[k].append(time.perf_counter() - t)
                t = time.perf_counter()
                for j in range(k):
                    llama.sample(temp=0.0, top_k=1, repeat_penalty=1.0, idx=base + j)
                sample_s.append((time.perf_counter() - t) / k)
    return {"verify_s": {k: statistics.median(v) for k, v in times.items()},
            "sample_s": statistics.median(sample_s)}


def worker_draftd(spec: dict[str, Any]) -> dict[str, Any]:
    import httpx

    from draftd.llamacpp import DraftdDraftModel

    dm = DraftdDraftModel(spec["url"], n=spec["n"], strategy=spec["strategy"], timeout=30.0,
                          adaptive=spec.get("adaptive", False), context=spec.get("context"))
    llama = _llama(spec["target"], spec["threads"], True, draft_model=dm, n_ctx=spec.get("n_ctx", 2048))
    evals: list[tuple[int, float]] = []  # (positions, seconds) of each Llama.eval
    drafts: list[tuple[int, float]] = []  # (n asked, seconds) of each draft request
    orig_eval, orig_draft = llama.eval, dm._draft

    def timed_eval(tokens: Any) -> None:
        t = time.perf_counter()
        orig_eval(tokens)
        evals.append((len(tokens), time.perf_counter() - t))

    def timed_draft(ctx: list[int], n: int) -> Any:
        t = time.perf_counter()
        d = orig_draft(ctx, n)
        drafts.append((n, time.perf_counter() - t))
        return d

    llama.eval = timed_eval  # instance attributes shadow the methods generate() and __call__ use
    dm._draft = timed_draft  # type: ignore[method-assign]
    res = []
    for sid, ids in spec["prompts"]:
        evals.clear()
        drafts.clear()
        m0 = _metrics(httpx, spec["url"])
        out, ts, t0, t1, acc = _timed_generate(llama, ids, spec["tokens"])
        m1 = _metrics(httpx, spec["url"])
        res.append({
            "id": sid, "tokens": out, "decode_s": t1 - t0, "request_s": t1 - ts,
            "drafted": acc.drafted, "accepted": acc.accepted,
            "top2": _top2(llama, ids, out),
            # the first eval is the prompt's pass, the first draft request establishes the session (prefill)
            "evals": evals[1:], "drafts": drafts[1:], "first_draft_s": drafts[0][1] if drafts else 0.0,
            "server_s": m1["sum"] - m0["sum"], "server_requests": m1["count"] - m0["count"],
            "server_first_s": 0.0,
            "predraft": {k: m1.get(k, 0) - m0.get(k, 0) for k in ("hit", "partial_hit", "miss", "none")},
        })
    dm.close()
    pol = dm._adaptive
    policy = None if pol is None else {  # what the adaptive policy believed at the end
        "acceptance": pol.acceptance(), "bound": pol.bound,
        "t_draft": [pol.t_draft(k) for k in range(spec["n"] + 1)],
        "t_verify": [pol.t_verify(k) for k in range(1, spec["n"] + 2)],
        "rate": [pol.rate(k) for k in range(spec["n"] + 1)]}
    return {"samples": res, "misses": dm.misses, "session": vars(dm.session_stats) if dm.session_stats else None,
            "policy": policy}


def _req_tok_s(samples: list[dict[str, Any]]) -> float:
    """Generated tokens per second of whole requests: the prompt's pass (and
    draftd's prefill beside it) included."""
    return sum(len(s["tokens"]) for s in samples) / sum(s["request_s"] for s in samples)


def _metrics(httpx: Any, url: str) -> dict[str, float]:
    """/draft's request-duration sum and count, and the pre-draft outcomes."""
    m = prom.parse(httpx.get(url + "/metrics", timeout=10).text)
    out = {"sum": prom.value(m, "draftd_http_request_duration_seconds_sum", {"route": "/draft"}),
           "count": prom.value(m, "draftd_http_request_duration_seconds_count", {"route": "/draft"})}
    for name, labels, v in m:
        if name == "draftd_predraft_requests_total" and "outcome" in labels:
            out[labels["outcome"]] = v
    return out


WORKERS = {"plain": worker_plain, "components": worker_components, "draftd": worker_draftd}


class DraftdRow(NamedTuple):
    """One draftd row of a prompt set's table: its draftd serve, its draft model and its name."""

    split: str  # threads T+D of the target and draftd: "1+1" pinned (CPU 0, CPU 1), "2+2" time-shared
    strategy: str  # draftd serve --strategy
    predraft: int  # draftd serve --predraft-branches (0: sequential)
    adaptive: bool  # DraftdDraftModel(adaptive=...)
    n: int  # DraftdDraftModel(n=...): the longest draft
    drafter: Path  # the GGUF file draftd serves
    serve_flags: list[str]  # further draftd serve flags
    name: str  # the row's configuration column
    context: int | None  # DraftdDraftModel(context=...)


def run_worker(spec: dict[str, Any], cpus: str | None, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "-"]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    p = subprocess.run(cmd, input=json.dumps(spec), capture_output=True, text=True, env={**os.environ, **env})
    if p.returncode != 0:
        raise RuntimeError(f"worker {spec['kind']} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    r: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return r


# ------------------------------------------------------- llama.cpp's own tools


def run_specsimple(tools: Path, target: Path, drafter: Path, text: str, tokens: int, n: int, threads: int,
                   tmp: Path, n_ctx: int = 2048) -> dict[str, Any]:
    pf = tmp / "prompt.txt"
    # llama.cpp's -f drops one trailing newline of the file, and turns escape
    # sequences (a backslash and n in code) into characters unless --no-escape:
    # the prompt it reads is then exactly text.
    pf.write_text(text + "\n")
    cmd = [str(tools / "llama-speculative-simple"), "-m", str(target), "-md", str(drafter), "--spec-type", "draft-simple",
           "--spec-draft-n-max", str(n), "--spec-draft-n-min", "0", "-f", str(pf), "-n", str(tokens), "--temp", "0",
           "--top-k", "1", "-t", str(threads), "-tb", str(threads), "-td", str(threads), "-c", str(n_ctx), "--seed", "0",
           "-ngl", "0", "--no-escape"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"llama-speculative-simple failed ({p.returncode}):\n{p.stderr[-3000:]}")
    log = p.stderr + p.stdout
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", log)
    acc = re.search(r"n_accept\s*=\s*(\d+)", log)
    if not (m and drafted and acc):
        raise RuntimeError(f"llama-speculative-simple: no summary in its output:\n{log[-3000:]}")
    # stdout: the prompt as the tool prints it back (not always byte-equal to
    # the text given), then the generated text: cut after the prompt's tail.
    out_text, tail = p.stdout, text[-24:]
    i = out_text.find(tail)
    if i < 0:
        raise RuntimeError(f"llama-speculative-simple: the prompt's end {tail!r} is not in its output")
    out_text = out_text[i + len(tail):]
    return {"tokens": int(m.group(1)), "decode_s": float(m.group(2)), "drafted": int(drafted.group(1)),
            "accepted": int(acc.group(1)), "text": out_text}


def start_llama_server(tools: Path, target: Path, threads: int, extra: list[str], cpus: str | None,
                       n_ctx: int = 2048) -> tuple[subprocess.Popen[str], str]:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cmd = [str(tools / "llama-server"), "-m", str(target), "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
           "-tb", str(threads), "-c", str(n_ctx), "-np", "1", "--no-webui", *extra]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited {proc.returncode}: {proc.stderr.read()[-3000:] if proc.stderr else ''}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("llama-server did not become healthy in 300 s")


def server_complete(url: str, ids: list[int], tokens: int) -> dict[str, Any]:
    import httpx

    r = httpx.post(url + "/completion", json={"prompt": ids, "n_predict": tokens, "temperature": 0, "top_k": 1,
                                               "cache_prompt": False, "return_tokens": True, "samplers": ["top_k"]},
                   timeout=600).json()
    t = r.get("timings", {})
    return {"tokens": r.get("tokens", []), "decode_s": t.get("predicted_ms", 0) / 1000, "n": t.get("predicted_n", 0),
            "drafted": t.get("draft_n", 0), "accepted": t.get("draft_n_accepted", 0)}


# ------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--models", type=Path, default=real_models_dir())
    ap.add_argument("--tools", type=Path, default=os.environ.get("DRAFTD_LLAMACPP_TOOLS"),
                    help="directory of llama-server and llama-speculative-simple (scripts/llamacpp-python's last line)")
    ap.add_argument("--draftd", type=Path, help="draftd binary (default: $DRAFTD_BIN, else go build the repository's)")
    ap.add_argument("--prompts", choices=("short", "long", "both"), default="short",
                    help="the prompt set: short (code, chat, prose of ~20–400 tokens), long (source files and chat "
                    "histories of this repository, ~600–2,400 tokens), both (each its own table in --out/SET)")
    ap.add_argument("--per-kind", type=int, help="prompts of each kind (short: code, chat, prose, default 2; long: "
                    "code, chat, default 2; --quick: 1)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--n", type=int, default=4, help="draft length of every speculative row")
    ap.add_argument("--strategies", default="model,hybrid")
    ap.add_argument("--splits", default="1+1,2+2", help="draftd rows' thread splits: T+D (1+1 is pinned)")
    ap.add_argument("--predraft", type=int, default=4, help="branches of the overlapped rows (0: no overlapped rows)")
    ap.add_argument("--ngram", default="ngram-simple,ngram-map-k,ngram-mod", help="llama-server --spec-type rows ('' none)")
    ap.add_argument("--adaptive", action="store_true", help="also draftd rows with adaptive draft lengths (at most --n)")
    ap.add_argument("--context", default="", type=lambda v: [int(x) for x in v.split(",") if x],
                    help="also each draftd row (not the recommended ones) with DraftdDraftModel(context=W) for each W "
                         "of this comma-separated list: draftd sees the last W prompt tokens")
    ap.add_argument("--chain-n", type=int, default=16, help="draft length of the recommended rows (docs/serving.md: "
                    "hybrid, --confidence-signal chain_prob, --min-confidence --chain-bound; 0: no such rows)")
    ap.add_argument("--chain-bound", type=float, default=0.05, help="serve --min-confidence of the recommended row")
    ap.add_argument("--chain-drafter", type=Path, help="the recommended rows' drafter GGUF (default: the real 0.5B file)")
    add_draftd_flags(ap, "the draftd rows' drafter GGUF but the recommended ones' (default: the real 0.5B file)")
    ap.add_argument("--omp-wait", default="", help="OMP_WAIT_POLICY of the draftd rows ('' leaves it unset: PASSIVE "
                    "made the target's batched eval ~40 %% slower, its threads sleeping at every barrier)")
    ap.add_argument("--quick", action="store_true", help="one prompt of each kind, only alone (2), llama.cpp's draft "
                    "model, draftd model 2+2 (and adaptive with --adaptive)")
    ap.add_argument("--out", type=Path, help="directory for table.md and results.json (required)")
    a = ap.parse_args()
    if a.worker:
        spec = json.loads(sys.stdin.read() if a.worker == "-" else a.worker)
        print(json.dumps(WORKERS[spec["kind"]](spec)))
        return 0
    if a.out is None:
        ap.error("--out DIR is required")
    if a.tools is None or not (a.tools / "llama-server").exists():
        ap.error("--tools DIR (or $DRAFTD_LLAMACPP_TOOLS): run scripts/llamacpp-python")
    if a.per_kind is None:
        a.per_kind = 1 if a.quick else 2
    if a.n < 1 or a.tokens < 2 or a.per_kind < 1 or a.chain_n < 0 or not 0 <= a.chain_bound <= 1:
        ap.error("--n ≥ 1, --tokens ≥ 2, --per-kind ≥ 1, --chain-n ≥ 0, 0 ≤ --chain-bound ≤ 1")
    a.out.mkdir(parents=True, exist_ok=True)
    target, drafter = a.models / TARGET_FILE, a.models / DRAFTER_FILE
    draftd_bin = a.draftd or build_draftd(a.out / "draftd")
    for pset in ("short", "long") if a.prompts == "both" else (a.prompts,):
        texts = prompt_texts(a.per_kind) if pset == "short" else long_prompt_texts(a.per_kind)
        out = a.out / pset if a.prompts == "both" else a.out
        out.mkdir(exist_ok=True)
        run_set(a, pset, texts, out, target, drafter, draftd_bin)
    return 0


def long_prompt_texts(per_kind: int) -> list[tuple[str, str]]:
    """(id, text) of per_kind prompts of each long kind: source files of this
    repository to continue, chat histories (draftd._testing.realtarget.long_texts)."""
    texts = long_texts()
    code = [t for t in texts if t[0].startswith("long-code")]
    chat = [t for t in texts if t[0].startswith("long-chat")]
    if per_kind > min(len(code), len(chat)):
        raise SystemExit(f"--per-kind {per_kind}: at most {min(len(code), len(chat))} long prompts of each kind")
    out = []
    for i in range(per_kind):
        out += [code[i], chat[i]]
    return out


def run_set(a: Any, pset: str, texts: list[tuple[str, str]], out: Path, target: Path, drafter: Path,
            draftd_bin: Path) -> None:
    """Every row on one prompt set; table.md and results.json in out."""
    log = lambda *x: print(*x, file=sys.stderr, flush=True)  # noqa: E731
    loads = [loadavg()]

    # Prompts as the target's token ids (the same tokenizer as the drafter's).
    from llama_cpp import Llama

    tok = Llama(model_path=str(target), vocab_only=True, verbose=False)
    prompts = [(sid, tok.tokenize(t.encode(), add_bos=False, special=True)) for sid, t in texts]
    del tok
    # the context llama.cpp must hold: the longest prompt, its output and a draft past it
    n_max = max(a.n, a.chain_n)
    n_ctx = max(2048, 1 << (max(len(ids) for _, ids in prompts) + a.tokens + 2 * n_max).bit_length())
    log(f"{pset} prompts: {', '.join(f'{sid} {len(ids)}' for sid, ids in prompts)} tokens; n_ctx {n_ctx}")
    base = {"target": str(target), "prompts": prompts, "tokens": a.tokens, "n_ctx": n_ctx}

    rows: list[dict[str, Any]] = []
    log(f"load {loadavg()}: llama.cpp alone")
    alone = {t: run_worker({**base, "kind": "plain", "threads": t}, None, {}) for t in ((2,) if a.quick else (2, 1))}
    plain = {s["id"]: s["tokens"] for s in alone[2]["samples"]}
    plain_top = {s["id"]: s["top2"] for s in alone[2]["samples"]}
    n_out = sum(len(v) for v in plain.values())
    t_step = {t: sum(s["decode_s"] for s in r["samples"]) / sum(len(s["tokens"]) - 1 for s in r["samples"])
              for t, r in alone.items()}
    for t, r in alone.items():
        ties = [near_tie(plain[x["id"]], plain_top[x["id"]], x["tokens"], x["top2"]) for x in r["samples"]]
        rows.append({"config": f"llama.cpp alone ({t} thread{'s' if t > 1 else ''})", "tok_s": 1 / t_step[t],
                     "req_tok_s": _req_tok_s(r["samples"]),
                     "tau": None, "equal": sum(ok for ok, _ in ties), "ties": sum(ok and w != "equal" for ok, w in ties),
                     "n_samples": len(r["samples"]), "pred": None})
    ref_tok_s = 1 / t_step[2]
    ref_req = _req_tok_s(alone[2]["samples"])

    conts = {sid: toks for sid, toks in plain.items()}
    comps = {}
    for t in ((2,) if a.quick else (2, 1)):
        log(f"load {loadavg()}: components, {t} thread(s)")
        comps[t] = run_worker({**base, "kind": "components", "threads": t, "kmax": n_max + 1, "reps": 3,
                               "continuations": conts}, None, {})

    # llama.cpp's own draft model (llama-speculative-simple), same n, 2+2 threads (in one process: sequential).
    with tempfile.TemporaryDirectory() as tmpd:
        log(f"load {loadavg()}: llama-speculative-simple")
        ss = [run_specsimple(a.tools, target, drafter, text, a.tokens, a.n, 2, Path(tmpd), n_ctx) for _, text in texts]
    from llama_cpp import Llama as _L

    detok = _L(model_path=str(target), vocab_only=True, verbose=False)
    def same(a: str, b: str) -> bool:  # equal over the shorter (the tool may stop a token later)
        a, b = a.rstrip("\n"), b.rstrip("\n")
        m = min(len(a), len(b))
        return m > 0 and a[:m] == b[:m]

    eq = sum(same(detok.detokenize(plain[sid]).decode(errors="replace"), r["text"]) for (sid, _), r in zip(texts, ss))
    for (sid, _), r in zip(texts, ss):
        pt = detok.detokenize(plain[sid]).decode(errors="replace")
        i = next((j for j in range(min(len(pt), len(r["text"]))) if pt[j] != r["text"][j]), None)
        if i is not None:
            log(f"llama-speculative-simple {sid}: differs from plain greedy at character {i}: "
                f"{pt[max(0, i - 20):i + 20]!r} vs {r['text'][max(0, i - 20):i + 20]!r}")
    toks = sum(r["tokens"] for r in ss)
    rows.append({"config": f"llama.cpp draft model, same 0.5B file (llama-speculative-simple, n ≤ {a.n}, 2 threads each, in turn)",
                 "tok_s": toks / sum(r["decode_s"] for r in ss), "tau": toks / max(1, toks - sum(r["accepted"] for r in ss)),
                 "equal": eq, "n_samples": len(ss), "pred": None,
                 "note": f"accepted {sum(r['accepted'] for r in ss)}/{sum(r['drafted'] for r in ss)} drafted"})

    # llama.cpp's n-gram methods (llama-server), 2 threads.
    ngrams = [] if a.quick or not a.ngram else a.ngram.split(",")
    for kind in ["", *ngrams]:
        log(f"load {loadavg()}: llama-server {kind or 'alone'}")
        extra = ["--spec-type", kind, "--spec-draft-n-max", str(a.n)] if kind else []
        proc, url = start_llama_server(a.tools, target, 2, extra, None, n_ctx)
        try:
            rs = [server_complete(url, ids, a.tokens) for _, ids in prompts]
        finally:
            proc.terminate()
            proc.wait(30)
        toks = sum(r["n"] for r in rs)
        rows.append({"config": f"llama-server {'--spec-type ' + kind if kind else 'alone'} (2 threads)",
                     "tok_s": toks / sum(r["decode_s"] for r in rs),
                     "tau": toks / max(1, toks - sum(r["accepted"] for r in rs)) if kind else None,
                     "equal": sum(r["tokens"] == plain[sid] for (sid, _), r in zip(prompts, rs)), "n_samples": len(rs),
                     "pred": None, "note": f"accepted {sum(r['accepted'] for r in rs)}/{sum(r['drafted'] for r in rs)} drafted" if kind else ""})

    # draftd rows.
    breakdown = []
    splits = ["2+2"] if a.quick else a.splits.split(",")
    strategies = ["model"] if a.quick else a.strategies.split(",")
    predraft = [0] if a.quick or a.predraft == 0 else [0, a.predraft]
    specs: list[DraftdRow] = []
    for split in splits:
        pinned = split == "1+1"
        for strategy in strategies:
            for b, adaptive in [(b, False) for b in predraft] + ([(0, True)] if a.adaptive else []):
                for w in [None, *a.context]:
                    specs.append(DraftdRow(
                        split=split, strategy=strategy, predraft=b, adaptive=adaptive, n=a.n,
                        drafter=a.drafter or drafter, serve_flags=shlex.split(a.serve), context=w,
                        name=f"draftd {strategy}{', adaptive n' if adaptive else ''}, "
                        f"{'pre-drafted (B = ' + str(b) + ')' if b else 'sequential'}, "
                        f"{split}{' pinned' if pinned else ' time-shared'}" + (f", context {w}" if w else "")))
    if a.chain_n:
        chain = ["--confidence-signal", "chain_prob", "--min-confidence", str(a.chain_bound), *shlex.split(a.serve)]
        for adaptive in (False, True) if a.adaptive else (False,):
            specs.append(DraftdRow(
                split="2+2", strategy="hybrid", predraft=0, adaptive=adaptive, n=a.chain_n,
                drafter=a.chain_drafter or drafter, serve_flags=chain, context=None,
                name=f"draftd recommended (hybrid, {(a.chain_drafter or drafter).name}, chain_prob "
                + (f"bound the policy's, n ≤ {a.chain_n}, adaptive" if adaptive
                   else f"≥ {a.chain_bound}, n ≤ {a.chain_n}") + "), 2+2 time-shared"))
    for row in specs:
        tt, dt = (int(x) for x in row.split.split("+"))
        pinned = row.split == "1+1"
        comp = comps.get(tt) or comps[2]
        verify = {int(k): v for k, v in comp["verify_s"].items()}
        flags = ["--threads", str(dt), "--kv-cache-bytes", str(1 << 30), "--strategy", row.strategy, *row.serve_flags]
        if row.predraft:
            flags += ["--predraft-branches", str(row.predraft)]
        srv = _start_draftd(draftd_bin, row.drafter, flags, "1" if pinned else None)
        try:
            iso = {k: _draft_rtt(srv.url, prompts[0][1], k) for k in (1, row.n)}
            log(f"load {loadavg()}: {row.name}")
            env = {"OMP_WAIT_POLICY": a.omp_wait} if a.omp_wait else {}
            r = run_worker({**base, "kind": "draftd", "threads": tt, "url": srv.url, "n": row.n, "strategy": row.strategy,
                            "adaptive": row.adaptive, "context": row.context}, "0" if pinned else None, env)
        finally:
            srv.stop()
        ss = r["samples"]
        lengths = Counter(d for smp in ss for d in smp["drafted"][1:])
        log(f"  draft lengths {dict(sorted(lengths.items()))}; session {r['session']}")
        if r.get("policy"):
            log("  policy: " + ", ".join(f"{k} {[round(x, 3) if x is not None else None for x in v]}"
                                       if isinstance(v, list) else f"{k} {v}" for k, v in r["policy"].items()))
        ties = [near_tie(plain[smp["id"]], plain_top[smp["id"]], smp["tokens"], smp["top2"]) for smp in ss]
        for smp, (ok, why) in zip(ss, ties):
            if why != "equal":
                log(f"  {smp['id']}: {why}{'' if ok else ' — NOT a near-tie'}")
        # Isolated components: a draft of d tokens costs R(d) = R(1) + (d-1)·per-token
        # round trip (server part S(d) likewise), verification V(d+1), the engine's
        # sampling sample_s per position it samples.
        per_tok = (iso[row.n]["rtt"] - iso[1]["rtt"]) / max(1, row.n - 1)
        per_tok_srv = (iso[row.n]["server"] - iso[1]["server"]) / max(1, row.n - 1)
        http = statistics.mean(iso[k]["rtt"] - iso[k]["server"] for k in iso)
        R = lambda d: 0.0 if d == 0 else iso[1]["rtt"] + (d - 1) * per_tok  # noqa: E731
        S = lambda d: 0.0 if d == 0 else iso[1]["server"] + (d - 1) * per_tok_srv  # noqa: E731
        toks = cycles = 0
        dec = first = pred_s = ver_s = cli_s = srv_s = 0.0
        for smp in ss:
            toks += len(smp["tokens"]) - 1
            dec += smp["decode_s"]
            first += smp["first_draft_s"]
            cycles += len(smp["evals"])
            ver_s += sum(t for _, t in smp["evals"])
            cli_s += sum(t for _, t in smp["drafts"])
            srv_s += smp["server_s"]
            # cycles: the steps after the prompt's pass (drafted[1:], accepted[1:])
            for d, acc in zip(smp["drafted"][1:], smp["accepted"][1:]):
                e = comp["sample_s"] * (acc + 1)
                if row.predraft and pinned:
                    pred_s += max(S(d), verify[d + 1]) + (R(d) - S(d)) + e
                else:
                    pred_s += R(d) + verify[d + 1] + e
            pred_s += smp["first_draft_s"]
        # the first request's server part ≈ its round trip minus the HTTP part
        srv_cycles = srv_s - (first - http * len(ss))
        tau = toks / max(1, cycles)
        rows.append({"config": row.name, "tok_s": toks / dec, "tau": tau, "req_tok_s": _req_tok_s(ss),
                     "equal": sum(ok for ok, _ in ties), "ties": sum(ok and why != "equal" for ok, why in ties),
                     "n_samples": len(ss),
                     "pred": toks / pred_s / ref_tok_s, "note": f"misses {r['misses']}; load {loadavg()}"})
        breakdown.append({
            "config": row.name, "cycles": cycles, "cycle_ms": 1000 * (dec - first) / max(1, cycles),
            "first_ms": 1000 * first / len(ss),
            "draft_ms": 1000 * srv_cycles / max(1, cycles), "http_ms": 1000 * (cli_s - srv_cycles) / max(1, cycles),
            "verify_ms": 1000 * ver_s / max(1, cycles), "engine_ms": 1000 * (dec - first - cli_s - ver_s) / max(1, cycles),
            "predraft": {k: sum(smp["predraft"][k] for smp in ss) for k in ("hit", "partial_hit", "miss", "none")},
            "iso": {"R1_ms": 1000 * iso[1]["rtt"], f"R{row.n}_ms": 1000 * iso[row.n]["rtt"], "http_ms": 1000 * http,
                    "server_per_token_ms": 1000 * per_tok_srv}})
    loads.append(loadavg())
    md = f"### {pset} prompts ({', '.join(str(len(ids)) for _, ids in prompts)} tokens)\n\n" + render(
        rows, breakdown, ref_tok_s, a, n_out, loads, comps, t_step, len(prompts), ref_req)
    (out / "table.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"rows": rows, "breakdown": breakdown, "components": comps,
                                                   "t_step": t_step, "loads": loads, "prompts": pset}, indent=1))
    print(md)


def _start_draftd(bin_: Path, model: Path, flags: list[str], cpus: str | None) -> Any:
    s = start_server(bin_, model, *flags, cpus=cpus)
    s.wait_healthy(300)
    return s


def _draft_rtt(url: str, ids: list[int], n: int, reps: int = 12) -> dict[str, float]:
    """draftd alone: the round trip of a session step drafting n tokens (no bound)
    (accepted 0 + a bonus: one new context token), its server-side part
    (/metrics), and the HTTP part of a 1-token draft."""
    import httpx

    import draftd

    with draftd.Client(url) as c:
        s = c.session(n=n, strategy=None, min_confidence=0.0)  # n tokens, whatever the server's bound
        ctx = list(ids)
        s.draft(ctx)
        rt: list[float] = []
        m0 = _metrics(httpx, url)
        for i in range(reps):
            ctx = ctx + [ids[i % len(ids)]]
            t = time.perf_counter()
            s.draft(ctx)
            rt.append(time.perf_counter() - t)
        m1 = _metrics(httpx, url)
        s.close()
    server = (m1["sum"] - m0["sum"]) / max(1, m1["count"] - m0["count"])
    mean = statistics.mean(rt)
    return {"rtt": mean, "server": server, "http": mean - server}


def render(rows: list[dict[str, Any]], breakdown: list[dict[str, Any]], ref: float, a: Any, n_out: int,
           loads: list[str], comps: dict[int, Any], t_step: dict[int, float], n_prompts: int, ref_req: float) -> str:
    L = [f"Greedy, {n_prompts} prompts × {a.tokens} tokens, draft length {a.n}; "
         f"load average before / after: {loads[0]} / {loads[-1]}. Decode: tokens/s from the first generated "
         "token to the last; request: generated tokens / the whole request (the prompt's pass, draftd's "
         "prefill beside it, the decode).", "",
         "| configuration | decode tokens/s | vs llama.cpp alone (2 threads) | τ | outputs = plain greedy | predicted speed-up "
         "| request tokens/s | vs alone | |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        tau = f"{r['tau']:.2f}" if r["tau"] else "–"
        pred = f"{r['pred']:.2f}×" if r.get("pred") else "–"
        eq = f"{r['equal']}/{r['n_samples']}" + (f" ({r['ties']} near-tie)" if r.get("ties") else "")
        req = r.get("req_tok_s")
        reqs = f"{req:.2f} | {req / ref_req:.2f}×" if req else "– | –"
        L.append(f"| {r['config']} | {r['tok_s']:.2f} | {r['tok_s'] / ref:.2f}× | {tau} | {eq} | {pred} | {reqs} | "
                 f"{r.get('note', '')} |")
    L += ["", "Components (isolated): " + "; ".join(
        f"{t} thread(s): T_step {1000 * t_step[t]:.1f} ms, T_verify(k) " +
        ", ".join(f"{k}: {1000 * v:.0f}" for k, v in comps[t]["verify_s"].items()) + " ms, sampling "
        f"{1000 * comps[t]['sample_s']:.2f} ms per position" for t in comps), ""]
    L += ["Per cycle (one draft + one verification), ms; a generation's first draft request is left out of the "
          "cycles and shown per generation:", "",
          "| draftd row | cycles | per cycle | draft (server) | HTTP + client | verify (Llama.eval) | engine (rest) | first request | isolated R(1) / R(n), HTTP, per-token | pre-draft hit / partial / miss / none |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for b in breakdown:
        p, i = b["predraft"], b["iso"]
        iso = " / ".join(f"{v:.1f}" for v in i.values())
        L.append(f"| {b['config']} | {b['cycles']} | {b['cycle_ms']:.1f} | {b['draft_ms']:.1f} | {b['http_ms']:.1f} | "
                 f"{b['verify_ms']:.1f} | {b['engine_ms']:.1f} | {b['first_ms']:.0f} | {iso} | "
                 f"{p['hit']:.0f} / {p['partial_hit']:.0f} / {p['miss']:.0f} / {p['none']:.0f} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main())
