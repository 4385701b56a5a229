"""Run with vLLM's python (scripts/vllmenv): draftd.vllm.DraftdProposer driven
through vLLM's own request state and persistent batch — ``CachedRequestState``,
``SamplingParams`` and ``InputBatch`` of vllm 0.32 — changed step by step as
``GPUModelRunner._update_states`` and ``_bookkeeping_sync`` change them:
finished requests popped from ``requests`` and removed from the batch,
preempted or unscheduled ones removed from the batch only, new and resumed
ones added, the batch condensed, sampled tokens written into
``token_ids_cpu`` / ``num_tokens_no_spec`` and the state's
``output_token_ids``; then ``propose(sampled, num_tokens_no_spec,
token_ids_cpu)`` called from a method of the runner, as vLLM calls it.

    vllm_runner_check.py DRAFTD_URL OUT.json

OUT.json: {"mismatches": [...] (drafts unlike /draft on the whole context),
"stats": the proposer's counters, "held_while_preempted", "held_at_end"
(draftd_sessions), "unreadable": vLLM attributes the proposer could not
read}. tests/test_vllm_lifecycle.py runs it."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import httpx
import torch
from vllm import SamplingParams
from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

import draftd
from draftd.vllm import DraftdProposer

K = 6
VOCAB = 512
MAX_LEN = 256


class Config:
    def __init__(self, url: str) -> None:
        self.speculative_config = type("S", (), {"num_speculative_tokens": K})()
        self.model_config = type("M", (), {"max_model_len": MAX_LEN})()
        self.additional_config = {"draftd": {"url": url}}


class Runner:
    """vLLM's model runner as far as the proposer sees it, its state kept in
    vLLM's own classes."""

    def __init__(self, url: str) -> None:
        self.drafter = DraftdProposer(Config(url))
        self.requests: dict[str, CachedRequestState] = {}
        self.input_batch = InputBatch(max_num_reqs=8, max_model_len=MAX_LEN, max_num_batched_tokens=MAX_LEN,
                                      device=torch.device("cpu"), vocab_size=VOCAB, block_sizes=[16],
                                      max_num_blocks_per_req=[MAX_LEN // 16])

    def new(self, rid: str, prompt: list[int], max_tokens: int) -> CachedRequestState:
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop_token_ids=[7])
        st = CachedRequestState(req_id=rid, prompt_token_ids=prompt, mm_features=[], sampling_params=sp,
                                generator=None, block_ids=([],), num_computed_tokens=0, output_token_ids=[])
        self.requests[rid] = st
        return st

    def step(self, scheduled: list[str], finished: list[str], sampled: dict[str, list[int]]) -> dict[str, list[int]]:
        """One engine step: _update_states, the sampled tokens booked, then
        the proposer. Returns {request id: draft}."""
        for r in finished:
            self.requests.pop(r, None)
            self.input_batch.remove_request(r)
        for r in set(self.input_batch.req_id_to_index) - set(scheduled):
            self.input_batch.remove_request(r)  # preempted or unscheduled: the state stays
        for r in scheduled:
            if r not in self.input_batch.req_id_to_index:
                self.input_batch.add_request(self.requests[r])  # new or resumed
        self.input_batch.condense()
        self.input_batch.refresh_metadata()
        ids = list(self.input_batch.req_ids)
        rows = []
        for i, r in enumerate(ids):
            new = sampled[r]
            start = int(self.input_batch.num_tokens_no_spec[i])
            self.input_batch.token_ids_cpu[i, start: start + len(new)] = new
            self.input_batch.num_tokens_no_spec[i] = start + len(new)
            self.requests[r].output_token_ids.extend(new)
            rows.append(new)
        got = self.drafter.propose(rows, self.input_batch.num_tokens_no_spec, self.input_batch.token_ids_cpu)
        return dict(zip(ids, got))


def held(url: str) -> int:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("draftd_sessions "):
            return int(float(line.split()[1]))
    raise SystemExit("no draftd_sessions in /metrics")


def main() -> None:
    url, out = sys.argv[1], sys.argv[2]
    rng = random.Random(5)
    r = Runner(url)
    p = r.drafter
    report: dict[str, Any] = {"mismatches": []}
    drafts: dict[str, list[int]] = {}

    def verify(rid: str) -> list[int]:
        """The target's step on rid's last draft: some accepted, one added."""
        d = drafts.get(rid, [])
        k = rng.choice([0, len(d), rng.randrange(len(d) + 1)])
        return d[:k] + [rng.randrange(8, VOCAB)]

    def run(scheduled: list[str], finished: list[str] = (), sampled: dict[str, list[int]] | None = None) -> None:  # type: ignore[assignment]
        s = {rid: verify(rid) for rid in scheduled}
        s.update(sampled or {})
        got = r.step(scheduled, list(finished), s)
        with draftd.Client(url) as c:
            for rid, d in got.items():
                st = r.requests[rid]
                ctx = list(st.prompt_token_ids or []) + st.output_token_ids
                left = st.sampling_params.max_tokens - len(st.output_token_ids)  # type: ignore[union-attr]
                want = list(c.draft(ctx, min(K, left - 1)).tokens) if left > 1 else []
                if d != want:
                    report["mismatches"].append({"request": rid, "draft": d, "want": want})
                drafts[rid] = d

    for rid, n in (("a", 20), ("b", 35), ("c", 9)):
        r.new(rid, [rng.randrange(8, VOCAB) for _ in range(n)], 120)
    first = {rid: [rng.randrange(8, VOCAB)] for rid in "abc"}  # the prefill step's tokens
    run(["a", "b", "c"], sampled=first)
    run(["a", "b", "c"])
    run(["a", "c"])  # b preempted
    run(["c", "a"])
    p._deleter.submit(lambda: None).result(60)
    report["held_while_preempted"] = held(url)
    drafts["b"] = []  # its draft was dropped with it; resumed, vLLM samples one token after recomputing
    run(["a", "b", "c"], sampled={"b": [rng.randrange(8, VOCAB)]})
    run(["a", "b", "c"], finished=[])
    run(["a", "b"], finished=["c"])  # c aborted
    r.new("c", [rng.randrange(8, VOCAB) for _ in range(12)], 120)  # c again, under the same id
    drafts["c"] = []
    run(["a", "b", "c"], sampled={"c": [rng.randrange(8, VOCAB)]})
    run(["a", "b", "c"])
    run(["a", "c"], finished=["b"])
    p._deleter.submit(lambda: None).result(60)
    report["held_at_end"] = held(url)
    report["stats"] = {k: v for k, v in vars(p.stats).items() if k != "last_error"}
    report["unreadable"] = sorted(p._unreadable)
    p.close()
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
