"""A timing probe for bench/vllm_speedup.py, not a drafter: a vLLM custom
proposer that drafts the known greedy continuation (read from the plain run
named by $DRAFTD_ORACLE), K tokens each step, so that every step verifies
K + 1 positions and accepts them all. Its steps' time is the target's
(K+1)-position verification step, T_verify(K+1), of the predicted speed-up
(docs/serving.md). It keys requests by their prompt, so the prompts of one
run must differ."""

from __future__ import annotations

import json
import os
from typing import Any


class OracleProposer:
    def __init__(self, vllm_config: Any) -> None:
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        run = json.loads(open(os.environ["DRAFTD_ORACLE"]).read())
        prompts = json.loads(open(os.environ["DRAFTD_ORACLE_PROMPTS"]).read())
        # full sequence (prompt + continuation) by prompt
        self.seqs = {tuple(p["prompt"]): p["prompt"] + run["outputs"][p["id"]] for p in prompts}

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        pass

    def propose(self, sampled_token_ids: Any, num_tokens_no_spec: Any, token_ids_cpu: Any, slot_mappings: Any = None,
                **_: Any) -> list[list[int]]:
        out: list[list[int]] = []
        for i in range(len(sampled_token_ids)):
            n = int(num_tokens_no_spec[i])
            row = token_ids_cpu[i, :n].tolist()
            seq = next((s for p, s in self.seqs.items() if row[: len(p)] == list(p)), None)
            out.append([] if seq is None or not sampled_token_ids[i] else seq[n: n + self.k])
        return out
