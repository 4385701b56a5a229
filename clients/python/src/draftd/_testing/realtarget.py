"""The real target of the end-to-end checks and of the benches:
Qwen2.5-Coder-1.5B-Instruct from its GGUF file, loaded by transformers and
dequantized to float32 on the CPU, the prompts it continues (and the one
copy of Qwen2.5's chat template written out, for engines that take text:
llama.cpp), and the near-tie rule (neartie) applied to transformers' and
vLLM's outputs. torch is imported only by load_target. Loading and comparing
only; the tests are in clients/python/tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftd._testing.neartie import from_rows, from_top, gap_for, near_tie
from draftd._testing.serve import REPO

#: Qwen2.5's default system prompt: its chat template adds it when the
#: conversation has none (transformers' apply_chat_template does the same).
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def chat_text(question: str) -> str:
    """One user turn in Qwen2.5's chat template, ready for the assistant's
    answer, as text (engines that tokenize text themselves: llama.cpp)."""
    return (f"<|im_start|>system\n{QWEN_SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
            "<|im_start|>assistant\n")


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
    import torch
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


def generate_near_tie(greedy: Any, assisted: Any, prompt_len: int, gap: float | None = None) -> tuple[bool, str]:
    """neartie.near_tie of two transformers generate() outputs
    (return_dict_in_generate=True, output_scores=True), each run's own scores
    at the first differing position; gap: the float32 target's (the default)."""
    return near_tie(greedy.sequences[0, prompt_len:].tolist(), assisted.sequences[0, prompt_len:].tolist(),
                    from_rows([s[0] for s in greedy.scores]), from_rows([s[0] for s in assisted.scores]),
                    gap_for("float32") if gap is None else gap)


def vllm_near_tie(plain: dict[str, Any], assisted: dict[str, Any], sid: str, gap: float) -> tuple[bool, str]:
    """neartie.near_tie of request sid in two runs of bench/vllm_run.py
    (--logprobs: each position's top-2 log-probabilities)."""
    return near_tie(plain["outputs"][sid], assisted["outputs"][sid], from_top(plain["logprobs"][sid]),
                    from_top(assisted["logprobs"][sid]), gap)
