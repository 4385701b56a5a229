"""The real target of the end-to-end checks and of the benches:
Qwen2.5-Coder-1.5B-Instruct from its GGUF file, loaded by transformers and
dequantized to float32 on the CPU, the prompts it continues (and the one
copy of Qwen2.5's chat template written out, for engines that take text:
llama.cpp), and the near-tie rule (neartie) applied to transformers' and
vLLM's outputs. torch is imported only by load_target. Loading and comparing
only; the tests are in clients/python/tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

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
    cast(Any, model).eval()  # untyped in transformers
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


# -- prompts of real length ----------------------------------------------------
# Source files and chat histories of hundreds to thousands of tokens, from
# this repository's own Go and Python sources and docs (the benches' "long"
# set; the prompts above are the "short" one). Text, for every engine:
# chat histories in Qwen2.5's template (chat_history_text, the one copy).


def chat_history_text(messages: list[dict[str, str]]) -> str:
    """A conversation (``role``: system, user or assistant; ``content``) in
    Qwen2.5's chat template, ready for the assistant's next answer, as text
    (the default system prompt first when the conversation has none, as the
    template does)."""
    if not messages or messages[0]["role"] != "system":
        messages = [{"role": "system", "content": QWEN_SYSTEM}, *messages]
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def _head(rel: str, chars: int, skip: int = 0) -> str:
    """The lines of the repository's file rel from line ``skip`` on, as many
    whole lines as fit in ``chars`` characters."""
    out: list[str] = []
    used = 0
    for line in (REPO / rel).read_text().splitlines()[skip:]:
        if used + len(line) + 1 > chars:
            break
        out.append(line)
        used += len(line) + 1
    if not out:
        raise ValueError(f"{rel}: nothing from line {skip} fits in {chars} characters")
    return "\n".join(out) + "\n"


def _section(rel: str, heading: str, chars: int) -> str:
    """The text under the Markdown heading line ``heading`` of the
    repository's file rel (up to the next heading of the same or a higher
    level), cut to whole lines within ``chars`` characters."""
    lines = (REPO / rel).read_text().splitlines()
    try:
        i = lines.index(heading)
    except ValueError:
        raise ValueError(f"{rel}: no heading line {heading!r}") from None
    level = len(heading) - len(heading.lstrip("#"))
    body: list[str] = []
    used = 0
    for line in lines[i + 1:]:
        if line.startswith("#") and len(line) - len(line.lstrip("#")) <= level:
            break
        if used + len(line) + 1 > chars:
            break
        body.append(line)
        used += len(line) + 1
    return "\n".join(body).strip() + "\n"


def long_texts() -> list[tuple[str, str]]:
    """(id, text) of the real-length prompts, in the order code, chat, code,
    chat: a Go file of this repository (internal/kvcache/kvcache.go, ~1,500
    tokens) and a Python one (clients/python/src/draftd/session.py, ~700) to
    continue, and two chat histories (~900 and ~2,500 tokens) whose user
    turns paste this repository's code and docs and whose assistant turns are
    its docs' own explanations, ending in a question."""
    go = _head("internal/kvcache/kvcache.go", 5200)
    py = _head("clients/python/src/draftd/session.py", 2600)
    chat0 = chat_history_text([
        {"role": "user", "content": "Review this Python module of our draft client:\n```python\n"
         + _head("clients/python/src/draftd/session.py", 1800, skip=20) + "```"},
        {"role": "assistant", "content": _section("docs/protocol.md", "### Sessions", 1400)},
        {"role": "user", "content": "Write a pytest test for the resend after a 409 unknown_session."},
    ])
    chat1 = chat_history_text([
        {"role": "user", "content": "Explain this Go code:\n```go\n" + _head("internal/kvcache/kvcache.go", 3600) + "```"},
        {"role": "assistant", "content": _section("docs/protocol.md", "### Confidence-bounded drafts", 2000)},
        {"role": "user", "content": "Here is the documentation of the endpoint:\n\n"
         + _section("docs/protocol.md", "### `POST /draft`", 3400)
         + "\nWhat does the server answer when the context is already full, and why not a shorter draft?"},
    ])
    return [("long-code-go", go), ("long-chat-0", chat0), ("long-code-py", py), ("long-chat-1", chat1)]
