#!/usr/bin/env python3
"""vLLM with draftd, side by side with vLLM's own speculative methods, end to
end on this machine (docs/serving.md): the target (a Hugging Face directory
``draftd export`` wrote, bf16 by default) generates greedily from the real
prompts (code, chat, prose), one request at a time and, for the rows marked
c = 4, four at once; each row is a fresh vLLM process (bench/vllm_run.py in
the vLLM venv). Rows:

  prefill, prefill-1  the prompt's pass alone (max_tokens 1), 2 / 1 threads
  alone-T           the target alone, T threads
  oracle-K[-t1]     the verification probe (below), 2 / 1 threads
  ngram             vLLM's n-gram proposer (prompt lookup), K = 4
  draft_model-K     vLLM's draft-model proposer with the same 0.5B drafter
                    (its bf16 export), K
  draftd-S-K-SPLIT  draftd (strategy S) as the custom proposer; SPLIT T+D:
                    vLLM T threads, draftd serve --threads D; "pin" pins
                    vLLM to core 0 and draftd to core 1, else both share
                    every core (time-shared: each runs while the other waits)
  …-predraft        draftd serve --predraft-branches 2: the next draft is
                    computed while the target verifies
  …-adaptive        the proposer's adaptive draft length (≤ K); with it
                    (shared_cores, the default) a request whose prefill
                    would not pay drafts nothing
  …-ctxC            the proposer's ``context`` = C (--context): draftd sees
                    a request's last C prompt tokens
  draftd-chain-K-2+2  the configuration docs/serving.md recommends: strategy
                    hybrid (eager proposals), K = --chain-k, draftd serve
                    --confidence-signal chain_prob --min-confidence
                    --chain-bound on --chain-drafter (the chain stops where
                    the drafter's probability of the whole chain falls
                    below the bound) and --chain-serve's flags; …-adaptive: the proposer's policy
                    chooses each step's length ≤ K and bound

and the components of the predicted speed-up (docs/serving.md#the-predicted-speed-up):
the target's prefill (max_tokens 1), its single step T_step (alone), its
(K+1)-position verification T_verify(K+1) (an oracle proposer that drafts
the known continuation, all accepted: bench/vllm_oracle.py; the rows
oracle-1, -4, -K and -(chain K) measure 2, 5, K + 1 and chain K + 1
positions, interpolated between for a row's mean draft length), the drafter's
time per call and its HTTP share (draftd's /metrics against the proposer's
own clock). Predicted (sequential) S = τ·T_step / (T_call + T_verify(n̄+1)),
with n̄ the mean draft length the row sent and T_call its measured draft
call (draft compute + HTTP); overlapped rows also show the bound
τ·T_step / max(T_call, T_verify).

Prompt sets (--prompts): short — a code snippet, a chat instruction, prose
(~20–110 tokens; draftd._testing.realtarget.prompts) — and long — source files
and chat histories of this repository's own Go and Python sources and docs,
~600–2,400 tokens (realtarget.long_texts, chat histories in Qwen2.5's
template) — or both, each set its own rows, components and table (T_step and
T_verify grow with the context). --quick: one prompt per set, 32 tokens, the
rows prefill, alone-2, oracle-K, ngram, draft_model-K, draftd-model-K-2+2
(sequential and adaptive) and draftd-chain-K-2+2.

  ~/.cache/draftd/venv/bin/python clients/python/bench/vllm_speedup.py --prompts both --out /tmp/vllm-bench

Every run's JSON is kept in --out/SET (SET: short, long); a run whose JSON
exists is not redone (delete it to redo), so an interrupted table resumes. A measurement, not a
test: nothing is asserted; outputs' equality with plain greedy is reported
(draftd._testing.neartie, the gap of --dtype, as in tests/test_vllm_e2e.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from draftd._testing import metrics as prom
from draftd._testing.neartie import gap_for
from draftd._testing.realtarget import vllm_near_tie
from draftd._testing.serve import build_draftd, start_server
from draftd._testing.vllmserve import engine_env

HERE = Path(__file__).resolve().parent

#: The row of the prompt's pass alone, by the target's threads.
PREFILL = {"2": "prefill", "1": "prefill-1"}


def cpu() -> str:
    info = Path("/proc/cpuinfo").read_text()
    name = re.search(r"model name\s*:\s*(.*)", info)
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())  # type: ignore[union-attr]
    keep = sorted(f for f in flags if f.startswith(("avx", "amx")) or f in ("fma", "f16c"))
    return f"{name.group(1) if name else platform.processor()} ({' '.join(keep)})"


def metrics(url: str) -> list[tuple[str, dict[str, str], float]]:
    return prom.scrape(url)


def msum(m: list[tuple[str, dict[str, str], float]], name: str) -> float:
    """The sum of every sample called name (all labels)."""
    return prom.value(m, name)


class Draftd:
    """draftd serve (draftd._testing.serve), healthy, pinned to cores if given."""

    def __init__(self, binary: Path, model: Path, threads: int, flags: list[str], cores: str | None) -> None:
        self.server = start_server(binary, model, "--threads", str(threads), *flags, cpus=cores)
        self.url = self.server.url
        self.server.wait_healthy(120)

    def stop(self) -> None:
        self.server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--target", type=Path, default=Path("~/.cache/draftd/hf/qwen2.5-coder-1.5b-instruct").expanduser())
    ap.add_argument("--draft-hf", type=Path, default=Path("~/.cache/draftd/hf/qwen2.5-coder-0.5b-instruct").expanduser())
    ap.add_argument("--drafter", type=Path,
                    default=Path(os.environ.get("DRAFTD_REAL_MODELS") or "~/.cache/draftd/real").expanduser()
                    / "qwen2.5-coder-0.5b-instruct.gguf")
    ap.add_argument("--draftd", type=Path, help="the draftd binary (default: $DRAFTD_BIN, else go build the repository's)")
    ap.add_argument("--python", default=str(Path("~/.cache/draftd/vllm-venv/bin/python").expanduser()))
    ap.add_argument("--prompts", default="short",
                    help="the prompt set: short (code, chat, prose of ~20–110 tokens), long (source files and chat "
                    "histories of ~600–2,400 tokens), both (each its own table); a number N: the first N short ones")
    ap.add_argument("--count", type=int, help="prompts of each set (default: short 3, long 4)")
    ap.add_argument("--quick", action="store_true",
                    help="a tiny case: 1 prompt per set, 32 tokens, rows prefill, alone-2, oracle-K, ngram, "
                         "draft_model-K, draftd-model-K-2+2 and its -adaptive")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--k", type=int, default=8, help="draft length of the draftd and draft_model rows")
    ap.add_argument("--rows", default="all", help="comma-separated row names (default all)")
    ap.add_argument("--chain-k", type=int, default=16, help="K of the draftd-chain row")
    ap.add_argument("--chain-bound", type=float, default=0.1, help="serve --min-confidence of the draftd-chain row")
    ap.add_argument("--chain-drafter", type=Path, help="the draftd-chain row's drafter GGUF (default: --drafter)")
    ap.add_argument("--chain-serve", default="",
                    help="more draftd serve flags of the draftd-chain rows, e.g. "
                         "'--draft-vocab 32768 --draft-vocab-file vocab.json'")
    ap.add_argument("--context", type=int, default=256, help="the proposer's context window of the …-ctxC rows")
    a = ap.parse_args()
    if a.prompts.isdigit():
        a.prompts, a.count = "short", int(a.prompts)
    if a.prompts not in ("short", "long", "both"):
        ap.error(f"--prompts {a.prompts!r}: want short, long, both or a number")
    if a.quick:
        a.count = a.count or 1
        if a.tokens == 64:
            a.tokens = 32
    a.out.mkdir(parents=True, exist_ok=True)

    from transformers import AutoTokenizer

    from draftd._testing.realtarget import long_texts
    from draftd._testing.realtarget import prompts as real_prompts

    tok = AutoTokenizer.from_pretrained(str(a.target))
    binary = a.draftd or build_draftd(a.out / "draftd")
    for pset in ("short", "long") if a.prompts == "both" else (a.prompts,):
        out_dir = a.out / pset
        out_dir.mkdir(exist_ok=True)
        if pset == "short":
            # short_code: the code prompt is ~110 tokens, not ~380 (the target's
            # prefill is the same in every row and only dilutes the comparison)
            ps = real_prompts(tok, a.count or 3, short_code=True)
        else:
            texts = long_texts()
            if (a.count or len(texts)) > len(texts):
                ap.error(f"--count {a.count}: there are {len(texts)} long prompts")
            ps = [(sid, tok(t, add_special_tokens=False)["input_ids"]) for sid, t in texts[: a.count or len(texts)]]
        (out_dir / "prompts.json").write_text(json.dumps([{"id": i, "prompt": p} for i, p in ps]))
        longest = max(len(p) for _, p in ps)
        print(run_set(a, pset, out_dir, binary, longest, [len(p) for _, p in ps]))


def run_set(a: argparse.Namespace, pset: str, out_dir: Path, binary: Path, longest: int, lengths: list[int]) -> str:
    """Every row of one prompt set (out_dir/prompts.json), each a fresh
    vLLM process whose JSON goes to out_dir; the table."""
    prompts = out_dir / "prompts.json"
    k = a.k
    # the context vLLM must hold: the longest prompt and its output, a draft past it
    max_len = max(2048, 1 << (longest + a.tokens + 2 * max(k, a.chain_k)).bit_length())
    # the draftd serve flags of the chain rows: the bound, then --chain-serve's
    chain_serve = ["--confidence-signal", "chain_prob", "--min-confidence", str(a.chain_bound),
                   *shlex.split(a.chain_serve)]
    # name → (vLLM args, vLLM threads, vLLM cores, draftd (threads, flags, cores, drafter file) or None, concurrency)
    rows: dict[str, tuple[list[str], int, str | None, tuple[int, list[str], str | None, Path] | None, int]] = {
        "prefill": (["--max-tokens", "1"], 2, None, None, 1),
        "prefill-1": (["--max-tokens", "1"], 1, None, None, 1),
        "alone-1": ([], 1, None, None, 1),
        "alone-2": ([], 2, None, None, 1),
        f"oracle-{k}": (["--method", "oracle", "--k", str(k)], 2, None, None, 1),
        "oracle-1": (["--method", "oracle", "--k", "1"], 2, None, None, 1),
        "oracle-4": (["--method", "oracle", "--k", "4"], 2, None, None, 1),
        f"oracle-{a.chain_k}": (["--method", "oracle", "--k", str(a.chain_k)], 2, None, None, 1),
        f"oracle-{k}-t1": (["--method", "oracle", "--k", str(k)], 1, None, None, 1),
        "ngram": (["--method", "ngram", "--k", "4"], 2, None, None, 1),
        "draft_model-4": (["--method", "draft_model", "--k", "4", "--draft-model", str(a.draft_hf)], 2, None, None, 1),
        f"draft_model-{k}": (["--method", "draft_model", "--k", str(k), "--draft-model", str(a.draft_hf)], 2, None, None, 1),
        f"draftd-model-{k}-2+2": (["--method", "draftd", "--k", str(k), "--strategy", "model"], 2, None, (2, [], None, a.drafter), 1),
        f"draftd-hybrid-{k}-2+2": (["--method", "draftd", "--k", str(k), "--strategy", "hybrid"], 2, None, (2, [], None, a.drafter), 1),
        f"draftd-model-{k}-2+2-adaptive": (["--method", "draftd", "--k", str(k), "--strategy", "model", "--adaptive"], 2,
                                            None, (2, [], None, a.drafter), 1),
        f"draftd-model-{k}-1+1pin": (["--method", "draftd", "--k", str(k), "--strategy", "model"], 1, "0", (1, [], "1", a.drafter), 1),
        f"draftd-model-{k}-1+1pin-predraft": (["--method", "draftd", "--k", str(k), "--strategy", "model"], 1, "0",
                                               (1, ["--predraft-branches", "2"], "1", a.drafter), 1),
        f"draftd-model-{k}-2+2-predraft": (["--method", "draftd", "--k", str(k), "--strategy", "model"], 2, None,
                                            (2, ["--predraft-branches", "2"], None, a.drafter), 1),
        f"draftd-chain-{a.chain_k}-2+2": (["--method", "draftd", "--k", str(a.chain_k), "--strategy", "hybrid"], 2, None,
                                         (2, chain_serve, None, a.chain_drafter or a.drafter), 1),
        f"draftd-chain-{a.chain_k}-2+2-adaptive": (["--method", "draftd", "--k", str(a.chain_k), "--strategy", "hybrid",
                                                   "--adaptive"], 2, None,
                                                  (2, chain_serve, None, a.chain_drafter or a.drafter), 1),
        f"draftd-model-{k}-2+2-adaptive-ctx{a.context}": (["--method", "draftd", "--k", str(k), "--strategy", "model",
                                                           "--adaptive", "--context", str(a.context)], 2, None,
                                                          (2, [], None, a.drafter), 1),
        f"draftd-chain-{a.chain_k}-2+2-ctx{a.context}": (["--method", "draftd", "--k", str(a.chain_k), "--strategy",
                                                         "hybrid", "--context", str(a.context)], 2, None,
                                                        (2, chain_serve, None, a.chain_drafter or a.drafter), 1),
        f"draftd-chain-{a.chain_k}-2+2-adaptive-ctx{a.context}": (
            ["--method", "draftd", "--k", str(a.chain_k), "--strategy", "hybrid", "--adaptive", "--context",
             str(a.context)], 2, None,
            (2, chain_serve, None,
             a.chain_drafter or a.drafter), 1),
        "alone-2-c4": ([], 2, None, None, 4),
        f"draftd-model-{k}-2+2-c4": (["--method", "draftd", "--k", str(k), "--strategy", "model"], 2, None, (2, [], None, a.drafter), 4),
    }
    quick = ["prefill", "alone-2", f"oracle-{k}", "ngram", f"draft_model-{k}", f"draftd-model-{k}-2+2",
             f"draftd-model-{k}-2+2-adaptive", f"draftd-chain-{a.chain_k}-2+2"]
    want = (quick if a.quick else list(rows)) if a.rows == "all" else a.rows.split(",")
    results: dict[str, dict[str, Any]] = {}
    for name in want:
        if name not in rows:
            raise SystemExit(f"--rows: unknown row {name!r}; rows: {', '.join(rows)}")
        out = out_dir / f"{name}.json"
        if out.exists():
            results[name] = json.loads(out.read_text())
            continue
        vargs, threads, cores, dd, conc = rows[name]
        if "--max-tokens" not in vargs:
            vargs = ["--max-tokens", str(a.tokens), *vargs]
        if "oracle" in name:
            vargs = [*vargs, "--oracle", str(out_dir / "alone-2.json")]
        server = None
        if dd is not None:
            server = Draftd(binary, dd[3], dd[0], dd[1], dd[2])
            vargs = [*vargs, "--draftd-url", server.url]
            before = metrics(server.url)
        env = engine_env(OMP_NUM_THREADS=str(threads), VLLM_CPU_OMP_THREADS_BIND="nobind",
                         VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_LOGGING_LEVEL="WARNING",
                         KMP_BLOCKTIME="0", OMP_WAIT_POLICY="PASSIVE")
        cmd = [a.python, str(HERE / "vllm_run.py"), "--model", str(a.target), "--prompts", str(prompts), "--out",
               str(out), "--dtype", a.dtype, "--concurrency", str(conc), "--ignore-eos", "--logprobs", "--max-model-len", str(max_len), *vargs]
        if cores:
            cmd = ["taskset", "-c", cores, *cmd]
        load = os.getloadavg()[0]
        print(f"vllm_speedup: {pset} {name} (load {load:.1f})", file=sys.stderr, flush=True)
        try:
            with (out_dir / f"{name}.log").open("w") as log:
                subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
            r = json.loads(out.read_text())
            r["load_before"] = load
            if server is not None:
                after = metrics(server.url)
                r["draftd_metrics"] = {
                    "step_s": msum(after, "draftd_step_seconds_sum") - msum(before, "draftd_step_seconds_sum"),
                    "http_s": msum(after, "draftd_http_request_duration_seconds_sum")
                    - msum(before, "draftd_http_request_duration_seconds_sum"),
                    # the label is outcome (a prefix match on result="hit" read 0)
                    "predraft_hits": prom.value(after, "draftd_predraft_requests_total", {"outcome": "hit"})
                    - prom.value(before, "draftd_predraft_requests_total", {"outcome": "hit"}),
                    "predraft_requests": msum(after, "draftd_predraft_requests_total")
                    - msum(before, "draftd_predraft_requests_total"),
                }
            out.write_text(json.dumps(r))
            results[name] = r
        finally:
            if server is not None:
                server.stop()
    return f"### {pset} prompts ({', '.join(str(n) for n in lengths)} tokens)\n\n" + table(results, a, k)


def table(res: dict[str, dict[str, Any]], a: argparse.Namespace, k: int) -> str:
    def tps(r: dict[str, Any]) -> float:
        return r["tokens"] / r["wall_s"]

    lines = [f"vLLM {a.dtype} target {a.target.name}, {len(next(iter(res.values()))['outputs']) if res else 0} prompts × "
             f"{a.tokens} tokens, greedy; "
             f"{cpu()}; {time.strftime('%Y-%m-%d')}", ""]
    plain = res.get("alone-2")
    # The components by the target's threads (1 or 2): T_step from alone-T,
    # T_verify(k+1) from the oracle rows run with T threads, each less the
    # prompt's pass with T threads (prefill, prefill-1).
    comps: dict[str, dict[str, float]] = {}
    for t in ("2", "1"):
        alone, pf = res.get(f"alone-{t}"), res.get(PREFILL[t])
        if not (alone and pf):
            continue
        ids = list(alone["outputs"])
        c = comps[t] = {}
        c["T_step"] = sum(alone["seconds"][i] - pf["seconds"][i] for i in ids) / sum(len(alone["outputs"][i]) - 1 for i in ids)
        for name, r in res.items():
            if name.startswith("oracle-") and r.get("threads") == t and r["metrics"]["drafts"]:
                kk = int(name.split("-")[1])
                c[f"T_verify({kk + 1})"] = sum(r["seconds"][i] - pf["seconds"][i] for i in ids) / r["metrics"]["drafts"]
        lines.append(f"components, {t} vLLM thread{'s' if t == '2' else ''}: "
                     + ", ".join(f"{n} {v * 1e3:.0f} ms" for n, v in c.items()))
    lines.append("")
    # The prediction is against the same baseline as the measured column
    # (alone-2: T_step with 2 threads), the cycle's verification with the
    # row's own target threads; none for c = 4 (one request's components do
    # not describe a batch's).
    base_step = comps.get("2", {}).get("T_step")
    gap = gap_for(a.dtype)
    lines += ["| row | threads (vLLM + draftd) | tokens/s | × alone (same cores) | τ | = greedy | predicted × | draft call ms (HTTP ms) |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in res.items():
        if name.startswith(("prefill", "oracle-")):
            continue
        base = res.get("alone-2-c4" if r["concurrency"] > 1 else "alone-2")
        speed = f"{tps(r) / tps(base):.2f}" if base else "–"
        m = r["metrics"]
        steps = m["drafts"]
        tau = f"{(m['accepted_tokens'] + steps) / steps:.2f}" if steps else "–"
        eq = "–"
        if plain and r is not plain:  # the concurrent rows too: batching must not change an output either
            ok = [vllm_near_tie(plain, r, i, gap) for i in plain["outputs"]]
            eq = f"{sum(o for o, _ in ok)}/{len(ok)}"
            ties = sum(o and why != "equal" for o, why in ok)
            if ties:
                eq += f" ({ties} near-tie{'s' if ties > 1 else ''})"
            for i, (o, why) in zip(plain["outputs"], ok):
                if why != "equal":
                    print(f"vllm_speedup: {name} {i}: {why}{'' if o else ' — NOT a near-tie'}", file=sys.stderr)
        pred, call = "–", "–"
        st = r.get("proposer") or {}
        if st.get("skipped_generations"):  # requests that drafted nothing: their prefill would not pay
            tau += f" ({st['skipped_generations']}/{len(r['outputs'])} undrafted)"
        comp = comps.get(str(r.get("threads")), {})
        if st.get("calls"):
            t_call = st["draft_seconds"] / st["calls"]
            dm = r.get("draftd_metrics", {})
            # draftd's request time holds the background sends of whole contexts too: not the calls'
            http = (st["draft_seconds"] - (dm.get("http_s", 0.0) - st.get("prime_seconds", 0.0))) / st["calls"]
            call = f"{t_call * 1e3:.0f} ({http * 1e3:.1f})"
            nbar = st["draft_tokens"] / max(st["drafts"], 1)
            ver = verify_at(comp, nbar) if comp else None
            if ver and base_step and steps and r["concurrency"] == 1:
                taum = (m["accepted_tokens"] + steps) / steps
                pred = f"{taum * base_step / (t_call + ver):.2f}"
                if "predraft" in name:
                    pred += f" (overlap ≤ {taum * base_step / max(t_call, ver):.2f})"
        thr = name.rsplit("-", 1)[-1] if name.startswith("draftd-") else (r.get("threads") or "?")
        for part in name.split("-"):
            if "+" in part:
                thr = part
        lines.append(f"| {name} | {thr} | {tps(r):.2f} | {speed} | {tau} | {eq} | {pred} | {call} |")
    lines += ["", breakdown(res, comps)]
    return "\n".join(lines)


def verify_at(comp: dict[str, float], nbar: float) -> float:
    """T_verify(n̄+1), interpolated linearly between the measured lengths
    (the nearest one outside them)."""
    pts = sorted((int(k[9:-1]), v) for k, v in comp.items() if k.startswith("T_verify("))
    if not pts:
        return float("nan")
    x = nbar + 1
    if x <= pts[0][0] or len(pts) == 1:
        return pts[0][1] if x <= pts[0][0] else pts[-1][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]


def breakdown(res: dict[str, dict[str, Any]], comps: dict[str, dict[str, float]]) -> str:
    """One cycle of each c = 1 draftd row, in ms: the draft (draftd's
    handler time: parse, queue, forward passes, answer; the background
    sends of whole contexts, timed by the proposer, left out), HTTP (the
    proposer's call less that: client, JSON, loopback), the target's
    verification (the oracle's T_verify at the row's mean draft length),
    and the rest (vLLM's engine: scheduling, sampling, the proposer's own
    Python), the cycle less those three."""
    out = ["| row | cycle ms | draft | HTTP + client | verify | engine + rest |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in res.items():
        st, dm = r.get("proposer") or {}, r.get("draftd_metrics") or {}
        t = "1" if str(r.get("threads")) == "1" else "2"
        pre, comp = res.get(PREFILL[t]), comps.get(t, {})
        if not st.get("calls") or r["concurrency"] != 1 or pre is None or not comp:
            continue
        ids = list(r["outputs"])
        cycles = r["metrics"]["drafts"] + sum(1 for _ in ids)  # + each request's last step, which had no draft
        cyc = sum(r["seconds"][i] - pre["seconds"][i] for i in ids) / cycles
        calls = st["calls"]
        draft = (dm.get("http_s", 0.0) - st.get("prime_seconds", 0.0)) / calls  # less the background sends
        http = st["draft_seconds"] / calls - draft
        nbar = st["draft_tokens"] / max(st["drafts"], 1)
        ver = verify_at(comp, nbar)
        rest = cyc - draft - http - ver
        out.append(f"| {name} | {cyc * 1e3:.0f} | {draft * 1e3:.0f} | {http * 1e3:.1f} | {ver * 1e3:.0f} | {rest * 1e3:.0f} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
