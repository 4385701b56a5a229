"""`draftd export` on the real Qwen2.5-Coder-0.5B GGUF (Q5_0/Q8_0/Q4_K/Q6_K mix)
against transformers' own reading of the same file (its GGUF dequantization,
config mapping and tokenizer builder), which nobody here wrote:

  * every tensor of model.safetensors equals transformers' float32 state dict
    of the GGUF rounded to bfloat16 (torch's .to(bfloat16)), bit for bit;
  * config.json reads (AutoConfig) as transformers' config of the GGUF;
  * tokenizer.json + tokenizer_config.json (AutoTokenizer) encode code,
    unicode, special tokens and chat-templated conversations to the same ids as
    transformers' tokenizer of the GGUF, and render the chat template the same.

transformers parses the GGUF once per session (it is slow: most of the test's
time). Without the model file the test skips, except under the strictness switch
(DRAFTD_STRICT; scripts/test fetches the file first), where it fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from draftd._testing import need

import fidelity

FILE = "qwen2.5-coder-0.5b-instruct.gguf"


def real_dir() -> Path:
    return Path(os.path.expanduser(os.environ.get("DRAFTD_REAL_MODELS") or "~/.cache/draftd/real"))


@pytest.fixture(scope="module")
def gguf() -> Path:
    path = real_dir() / FILE
    need(path.is_file(), f"{path} missing: run scripts/realmodels --only qwen2.5-coder-0.5b")
    return path


@pytest.fixture(scope="module")
def exported(gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / gguf.stem
    subprocess.run([str(fidelity.draftd_binary()), "export", "--model", str(gguf), "--out", str(out), "--dtype", "bf16"], check=True)
    return out


@pytest.fixture(scope="module")
def reference_model(gguf: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)


def test_weights_equal_transformers_dequantization_in_bf16(exported: Path, reference_model) -> None:
    import torch
    from safetensors import safe_open

    want = reference_model.state_dict()
    bad: list[str] = []
    with safe_open(str(exported / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        assert names == set(want), f"only in the export: {sorted(names - set(want))[:5]}; only in transformers: {sorted(set(want) - names)[:5]}"
        for name in sorted(names):
            have = f.get_tensor(name)
            ref = want[name].to(torch.bfloat16)
            assert have.dtype == torch.bfloat16, f"{name}: {have.dtype}"
            assert have.shape == ref.shape, f"{name}: shape {tuple(have.shape)}, transformers {tuple(ref.shape)}"
            differ = int((have.view(torch.int16) != ref.view(torch.int16)).sum())
            if differ:
                worst = float((have.float() - ref.float()).abs().max())
                bad.append(f"{name}: {differ} of {have.numel()} elements differ (max |diff| {worst:g})")
    assert not bad, f"{len(bad)} of {len(names)} tensors differ from transformers' bf16:\n" + "\n".join(bad[:20])


def test_config_equals_transformers(exported: Path, reference_model) -> None:
    from transformers import AutoConfig

    have = AutoConfig.from_pretrained(str(exported))
    want = reference_model.config  # AutoConfig.from_pretrained(dir, gguf_file=F), as the model loaded it
    assert have.architectures == ["Qwen2ForCausalLM"]
    assert have.model_type == want.model_type == "qwen2"
    fields = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "max_position_embeddings", "vocab_size", "tie_word_embeddings", "bos_token_id", "eos_token_id",
              "pad_token_id", "hidden_act", "use_sliding_window"]
    diffs = {f: (getattr(have, f), getattr(want, f)) for f in fields if getattr(have, f) != getattr(want, f)}
    assert not diffs, f"export vs transformers: {diffs}"
    import numpy as np

    # The GGUF stores these as float32; transformers widens that to a float64.
    assert np.float32(have.rms_norm_eps) == np.float32(want.rms_norm_eps)
    assert np.float32(have.rope_parameters["rope_theta"]) == np.float32(want.rope_parameters["rope_theta"])
    assert have.rope_parameters.get("rope_type", "default") == want.rope_parameters.get("rope_type", "default") == "default"
    assert str(have.dtype).removeprefix("torch.") == "bfloat16"


TEXTS = [
    "def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n    p, *rest = xs\n    return quicksort([x for x in rest if x < p]) + [p]\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\t// dot\n}\r\n",
    "  leading spaces, trailing   \n\n\n   ",
    "naïve café, 中文字符, Ελληνικά, русский, हिन्दी, 日本語のテキスト, 한국어",
    "emoji 🏳️‍🌈👨‍👩‍👧 and symbols ∑∫√ ≤≥ ½ Ⅻ ０１２",
    "I'm sure you'll SEE it's THEIR'S, won't you? 12345 3.14159",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|endoftext|> <|im_end|>",
    "<|fim_prefix|>def f():\n    <|fim_suffix|>\n<|fim_middle|>",
    "<tool_call>{\"name\": \"x\"}</tool_call> <|repo_name|>r<|file_sep|>a.py",
    "",
]

CONVERSATIONS = [
    [{"role": "user", "content": "Write a function that reverses a linked list in C."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3×3 — in 中文?"}],
]


@pytest.fixture(scope="module")
def tokenizers(exported: Path, gguf: Path):
    from transformers import AutoTokenizer

    ours = AutoTokenizer.from_pretrained(str(exported))
    ref = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return ours, ref


def test_tokenizer_encodes_as_transformers(tokenizers) -> None:
    """The texts are NFC: transformers' GGUF tokenizer has no normalizer, while
    the export keeps the NFC normalizer of Qwen's own tokenizer.json (as
    draftd's tokenizer does), so a decomposed "e\u0301" is one token there and
    two here."""
    ours, ref = tokenizers
    assert ours("cafe\u0301")["input_ids"] == ours("caf\u00e9")["input_ids"], "the export lost the NFC normalizer"
    bad = []
    for text in TEXTS:
        for special in (True, False):
            have = ours(text, add_special_tokens=special)["input_ids"]
            want = ref(text, add_special_tokens=special)["input_ids"]
            if have != want:
                bad.append(f"{text[:40]!r} (add_special_tokens={special}): export {have[:12]}…, transformers {want[:12]}…")
    assert not bad, "\n".join(bad)
    for name in ("eos_token", "pad_token", "bos_token"):
        assert getattr(ours, name) == getattr(ref, name), name
    # Ids round-trip to text the same way.
    ids = ref(TEXTS[3] + TEXTS[6])["input_ids"]
    assert ours.decode(ids) == ref.decode(ids)


def test_chat_template_renders_as_transformers(tokenizers) -> None:
    ours, ref = tokenizers
    assert ours.chat_template and ours.chat_template == ref.chat_template
    for msgs in CONVERSATIONS:
        for gen in (True, False):
            have = ours.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
            want = ref.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
            assert have == want
            assert ours(have, add_special_tokens=False)["input_ids"] == ref(want, add_special_tokens=False)["input_ids"]
