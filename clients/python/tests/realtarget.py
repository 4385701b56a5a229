"""The real target of the end-to-end checks and of bench/speedup.py:
Qwen2.5-Coder-1.5B-Instruct from its GGUF file, loaded by transformers and
dequantized to float32 on the CPU, and the prompts it continues. Also the
near-tie rule by which an assisted output may differ from plain greedy.
Loading and comparing only; the tests are in test_hf_e2e.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[3]

# Real prompts of the three kinds the τ sets use: code to complete (the
# start of a real source file of this repository), a chat-templated
# instruction, and prose.
_CODE_FILE = REPO / "testdata/reference/quantize_ref.py"
INSTRUCTIONS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "Explain in two sentences what a mutex is and when to use one.",
    "Write a SQL query that returns the ten customers with the highest total order amount.",
    "Give three tips for writing clear commit messages.",
]
PROSE = [
    "The printing press, invented by Johannes Gutenberg around 1440, changed Europe because",
    "In the spring the river rose above its banks, and the villagers",
]


def prompts(tokenizer: Any, count: int, short_code: bool = False) -> list[tuple[str, list[int]]]:
    """count prompts (id, token ids), alternating the three kinds.
    short_code: the first code prompt is 14 lines from the middle of the
    file (its first definitions, ~110 tokens, ending inside a loop) instead
    of its first 24 lines (~380 tokens, mostly docstring): the same kind of
    check for a third of the target's prefill (tests/test_hf_e2e.py)."""
    code_lines = _CODE_FILE.read_text().splitlines()
    code = [("code-0", "\n".join(code_lines[:24]) + "\n"), ("code-1", "\n".join(code_lines[:60]) + "\n")]
    if short_code:
        code[0] = ("code-s", "\n".join(code_lines[27:41]) + "\n")
    chat = [
        (f"chat-{i}", tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True))
        for i, q in enumerate(INSTRUCTIONS)
    ]
    prose = [(f"prose-{i}", p) for i, p in enumerate(PROSE)]
    order = [code[0], chat[0], prose[0], code[1], chat[1], prose[1], *chat[2:]]
    if count > len(order):
        raise ValueError(f"there are {len(order)} prompts; asked {count}")
    return [(sid, tokenizer(text, add_special_tokens=False)["input_ids"]) for sid, text in order[:count]]


def load_target(path: Path, threads: int | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) of the GGUF file at path, float32, eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    model.eval()
    # Plain greedy: no sampling settings or penalties from the file's
    # generation config (there are none in a GGUF, but say so).
    model.generation_config.do_sample = False
    for k in ("temperature", "top_p", "top_k", "repetition_penalty"):
        setattr(model.generation_config, k, None)
    return model, tok


#: The near-tie rule. transformers' own test_assisted_decoding_matches_greedy_search
#: (tests/generation/test_utils.py, _check_similar_generate_outputs) accepts two
#: outputs that differ when, at the first differing position, the scores of
#: both runs are allclose(atol=1e-5, rtol=1e-5): the two runs saw the same
#: logits and broke a tie differently. Its models are tiny and random; a real
#: 1.5B model's logits are ~10-30 in size and a batched verification pass
#: rounds differently from one-token decoding by more than 1e-5, so besides
#: that rule a divergence also counts as a near-tie when, in each run's own
#: scores at that position, the two tokens chosen are within NEAR_TIE_GAP.
NEAR_TIE_GAP = 1e-2


def near_tie(greedy: Any, assisted: Any, prompt_len: int) -> tuple[bool, str]:
    """(ok, why): whether the assisted output equals greedy, or first
    differs at a near-tie. Both are generate() outputs with
    return_dict_in_generate=True and output_scores=True."""
    a = greedy.sequences[0, prompt_len:].tolist()
    b = assisted.sequences[0, prompt_len:].tolist()
    if a == b:
        return True, "equal"
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), None)
    if i is None:
        return False, f"lengths differ: greedy {len(a)}, assisted {len(b)} tokens"
    sg, sa = greedy.scores[i][0], assisted.scores[i][0]
    if torch.allclose(sg, sa, atol=1e-5, rtol=1e-5):
        return True, f"position {i}: scores allclose (transformers' rule)"
    gap_g = float(sg[a[i]] - sg[b[i]])
    gap_a = float(sa[b[i]] - sa[a[i]])
    ok = gap_g <= NEAR_TIE_GAP and gap_a <= NEAR_TIE_GAP
    return ok, f"position {i}: greedy {a[i]} vs assisted {b[i]}; gaps {gap_g:.2e} (greedy scores), {gap_a:.2e} (assisted scores)"


#: The near-tie gap for a bf16 target (vLLM's logits in bf16): two steps of
#: bf16's grid for logits between 16 and 32, one between 32 and 64.
BF16_TIE_GAP = 0.25


def vllm_near_tie(plain: dict[str, Any], assisted: dict[str, Any], sid: str,
                  tie_gap: float = NEAR_TIE_GAP) -> tuple[bool, str]:
    """For two runs of bench/vllm_run.py (--logprobs): whether request sid's
    outputs are equal, or first differ where both runs' top-2
    log-probabilities put the two tokens within tie_gap (NEAR_TIE_GAP; a
    bf16 target's logits lie on a grid of 2^-3 between 16 and 32, 2^-2
    between 32 and 64: its ties are a step or two apart, BF16_TIE_GAP)."""
    a, b = plain["outputs"][sid], assisted["outputs"][sid]
    if a == b:
        return True, "equal"
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), None)
    if i is None:
        return False, f"lengths differ: plain {len(a)}, assisted {len(b)}"

    def gap(run: dict[str, Any], first: int, second: int) -> float:
        top = dict((int(t), lp) for t, lp in run["logprobs"][sid][i])
        return top[first] - top[second] if first in top and second in top else float("inf")

    ga, gb = gap(plain, a[i], b[i]), gap(assisted, b[i], a[i])
    return ga <= tie_gap and gb <= tie_gap, f"position {i}: plain {a[i]} vs assisted {b[i]}; gaps {ga:.2e}, {gb:.2e}"
