"""Real-τ dataset generator (issue 24, part 3): the target's greedy continuations.

Builds real prompts (code completion cut from Go and Python standard-library
sources at a line boundary, chat-templated coding instructions, prose picked by
`draftd dataset --source prose`) and runs the *target* model greedily in llama.cpp
(node-llama-cpp's prebuilt build, scripts/realtau's default) or Hugging Face transformers
(float32, dequantized from the GGUF file) to produce each continuation. Writes docs/evaluation.md dataset lines {"id","prompt","continuation"} and a
manifest (engine, versions, threads, sources with sha256, dropped samples,
padding check). It is not draftd: draftd never runs here, except `draftd
dataset` to pick prose prompts (token ids only).

EOS: every continuation is exactly --new-tokens tokens of the target's greedy
output. A candidate whose greedy output reaches an end token (<|im_end|> or
<|endoftext|>) before that is dropped (listed in the manifest) and the next
candidate of the same source takes its place, so no continuation holds an EOS
and none is padded.

Run by `scripts/realtau gen`; see docs/evaluation.md (real τ).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LLAMACPP = HERE.parent.parent / "testdata" / "node-llama-cpp"  # node-llama-cpp (npm ci there), shared with scripts/fidelity


@dataclass
class Candidate:
    id: str
    source: str  # go, python, chat, prose
    prompt: list[int]
    origin: dict[str, Any] = field(default_factory=dict)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def code_files(root: Path, suffix: str, skip_dirs: set[str]) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(suffix):
                out.append(Path(dirpath) / name)
    return sorted(out)


def code_candidates(
    tok: Any, source: str, root: Path, suffix: str, skip_dirs: set[str], count: int,
    seed: int, min_prompt: int, max_prompt: int,
) -> list[Candidate]:
    """Up to count prompts: the head of a file, cut at a line boundary whose
    head is min_prompt..max_prompt tokens and which leaves at least 1,000
    characters of the file after it. Files in a seeded order, one prompt each;
    generated files and duplicates are skipped."""
    files = code_files(root, suffix, skip_dirs)
    random.Random(f"{source}:{seed}").shuffle(files)
    seen: set[str] = set()
    out: list[Candidate] = []
    for path in files:
        if len(out) == count:
            break
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in seen or "Code generated" in text[:2000] or len(text) < 4000:
            continue
        seen.add(digest)
        enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
        ends = [e for (_, e) in enc["offset_mapping"]]
        # Candidate cuts: just after a newline, head within the token range.
        cuts: list[int] = []
        ti = 0
        for ci, ch in enumerate(text):
            if ch != "\n":
                continue
            cut = ci + 1
            while ti < len(ends) and ends[ti] <= cut:
                ti += 1
            if ti > max_prompt:
                break
            if ti >= min_prompt and len(text) - cut >= 1000:
                cuts.append(cut)
        if not cuts:
            continue
        cut = random.Random(f"{source}:{seed}:{path}").choice(cuts)
        prompt = tok(text[:cut], add_special_tokens=False)["input_ids"]
        if not (min_prompt <= len(prompt) <= max_prompt + 8):
            continue
        out.append(Candidate(
            id=f"{source}-{len(out):03d}", source=source, prompt=prompt,
            origin={"file": str(path), "sha256": digest, "cut_char": cut, "cut_line": text[:cut].count("\n")},
        ))
    return out


def chat_candidates(tok: Any, template: str, count: int) -> list[Candidate]:
    path = HERE / "chat.json"
    instructions: list[str] = json.loads(path.read_text())
    out: list[Candidate] = []
    for i, text in enumerate(instructions[:count]):
        ids = tok.apply_chat_template(
            [{"role": "user", "content": text}], chat_template=template,
            add_generation_prompt=True, tokenize=True,
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out.append(Candidate(id=f"chat-{i:03d}", source="chat", prompt=list(ids),
                             origin={"file": "scripts/realtau.d/chat.json", "index": i, "instruction": text}))
    return out


def prose_candidates(draftd: str, target: Path, count: int, seed: int, min_prompt: int, max_prompt: int) -> list[Candidate]:
    with tempfile.TemporaryDirectory() as tmp:
        out_path = Path(tmp) / "prose.jsonl"
        subprocess.run(
            [draftd, "dataset", "--source", "prose", "--tokenizer", str(target), "--samples", str(count),
             "--min-prompt", str(min_prompt), "--max-prompt", str(max_prompt), "--continuation", "1",
             "--seed", str(seed), "--out", str(out_path)],
            check=True, stdout=subprocess.DEVNULL,
        )
        lines = [json.loads(l) for l in out_path.read_text().splitlines() if l.strip()]
    return [Candidate(id=f"prose-{i:03d}", source="prose", prompt=l["prompt"],
                      origin={"draftd_dataset_id": l["id"]}) for i, l in enumerate(lines)]


def chat_template_from_gguf(path: Path) -> str:
    import gguf  # type: ignore[import-untyped]

    reader = gguf.GGUFReader(str(path))
    f = reader.fields["tokenizer.chat_template"]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def generate(model: Any, torch: Any, prompts: list[list[int]], new_tokens: int, pad_id: int, eos_ids: list[int]) -> list[list[int]]:
    """Greedy continuations of a batch, left-padded with an attention mask."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # (batch, width)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)  # (batch, width)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
            min_new_tokens=0, eos_token_id=eos_ids, pad_token_id=pad_id,
            num_beams=1, temperature=None, top_p=None, top_k=None,
        )
    return [row[width:].tolist() for row in out]


def generate_llamacpp(target: Path, prompts: list[list[int]], new_tokens: int, eos_ids: list[int],
                      threads: int, sequences: int) -> tuple[list[list[int]], dict[str, Any]]:
    """Greedy continuations from llama.cpp (testdata/node-llama-cpp/batch.mjs), up
    to `sequences` prompts decoding together."""
    req = {"model": str(target), "n": new_tokens, "threads": threads, "sequences": sequences,
           "eos": eos_ids, "prompts": prompts}
    proc = subprocess.run(["node", str(LLAMACPP / "batch.mjs")], input=json.dumps(req), capture_output=True,
                          text=True, cwd=LLAMACPP, env={**os.environ, "NODE_PATH": str(LLAMACPP / "node_modules")})
    if proc.returncode != 0:
        raise RuntimeError(f"batch.mjs failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout)
    return out["continuations"], out["info"]


def truncate_at_eos(cont: list[int], eos_ids: list[int]) -> list[int]:
    for i, t in enumerate(cont):
        if t in eos_ids:
            return cont[: i + 1]
    return cont


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, required=True, help="target model GGUF (Qwen2.5-Coder-1.5B-Instruct)")
    ap.add_argument("--draftd", required=True, help="draftd binary (picks the prose prompts)")
    ap.add_argument("--out", type=Path, required=True, help="output directory (dataset.jsonl, manifest.json)")
    ap.add_argument("--per-source", type=int, default=16, help="samples per source (go, python, chat, prose)")
    ap.add_argument("--new-tokens", type=int, default=128, help="continuation tokens per sample")
    ap.add_argument("--engine", choices=["transformers", "llama.cpp"], default="transformers",
                    help="target engine: transformers (float32 from the GGUF) or llama.cpp (node-llama-cpp's prebuilt CPU build, the GGUF as is)")
    ap.add_argument("--batch", type=int, default=1, help="prompts decoded together (transformers: per generate() call, left-padded; llama.cpp: sequences). Default 1: node-llama-cpp 3.21.1's prebuilt build gave corrupted continuations with 16 sequences in one context on an AVX-512 Xeon (2026-12-02)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-prompt", type=int, default=96, help="shortest code or prose prompt, tokens")
    ap.add_argument("--max-prompt", type=int, default=256, help="longest code or prose prompt, tokens")
    ap.add_argument("--spare", type=int, default=1,
                    help="extra candidates per source in the first round (taken in order when one reaches an end token)")
    ap.add_argument("--check-padding", type=int, default=0,
                    help="also regenerate the first K samples one at a time (no padding) and compare")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(args.target.parent), gguf_file=args.target.name)
    template = chat_template_from_gguf(args.target)
    goroot = Path(subprocess.run(["go", "env", "GOROOT"], check=True, capture_output=True, text=True).stdout.strip())
    pyroot = Path(f"/usr/lib/python{sys.version_info.major}.{sys.version_info.minor}")
    if not pyroot.is_dir():
        pyroot = Path("/usr/lib/python3.11")
    spare = max(4, args.per_source // 2)
    pools: dict[str, list[Candidate]] = {
        "go": code_candidates(tok, "go", goroot / "src", ".go", {"testdata", "vendor"}, args.per_source + spare,
                              args.seed, args.min_prompt, args.max_prompt),
        "python": code_candidates(tok, "python", pyroot, ".py", {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__"},
                                  args.per_source + spare, args.seed, args.min_prompt, args.max_prompt),
        "chat": chat_candidates(tok, template, args.per_source + spare),
        "prose": prose_candidates(args.draftd, args.target, args.per_source + spare, args.seed, args.min_prompt, args.max_prompt),
    }
    print(f"gen: prompts ready in {time.time() - t0:.0f}s: " + ", ".join(f"{k} {len(v)}" for k, v in pools.items()), file=sys.stderr)

    eos_ids = sorted({int(tok.convert_tokens_to_ids(t)) for t in ("<|im_end|>", "<|endoftext|>")})
    pad_id = int(tok.convert_tokens_to_ids("<|endoftext|>"))
    t1 = time.time()
    engine_info: dict[str, Any] = {}
    if args.engine == "transformers":
        model = AutoModelForCausalLM.from_pretrained(str(args.target.parent), gguf_file=args.target.name, dtype=torch.float32)
        model.eval()

        def run(prompts: list[list[int]], batch: int) -> list[list[int]]:
            out: list[list[int]] = []
            for b in range(0, len(prompts), batch):
                out.extend(generate(model, torch, prompts[b: b + batch], args.new_tokens, pad_id, eos_ids))
            return out
    else:
        def run(prompts: list[list[int]], batch: int) -> list[list[int]]:
            conts, info = generate_llamacpp(args.target, prompts, args.new_tokens, eos_ids, args.threads, batch)
            engine_info.update(info)
            return conts
    load_s = time.time() - t1
    print(f"gen: {args.engine} ready in {load_s:.0f}s", file=sys.stderr)

    kept: dict[str, list[tuple[Candidate, list[int]]]] = {k: [] for k in pools}
    dropped: list[dict[str, Any]] = []
    next_idx = {k: 0 for k in pools}
    t2 = time.time()
    gen_tokens = 0
    first_round = True
    while True:
        todo: list[Candidate] = []
        for src, pool in pools.items():
            need = args.per_source - len(kept[src]) + (args.spare if first_round else 0)
            while need > 0 and next_idx[src] < len(pool):
                todo.append(pool[next_idx[src]])
                next_idx[src] += 1
                need -= 1
            if need > 0 and len(kept[src]) < args.per_source:
                print(f"gen: source {src}: only {len(kept[src])} usable samples of {args.per_source}", file=sys.stderr)
                return 1
        first_round = False
        if not todo:
            break
        todo.sort(key=lambda c: len(c.prompt))
        for b in range(0, len(todo), args.batch if args.engine == "transformers" else len(todo)):
            chunk = todo[b: b + (args.batch if args.engine == "transformers" else len(todo))]
            tb = time.time()
            conts = run([c.prompt for c in chunk], args.batch)
            gen_tokens += sum(len(x) for x in conts)
            for c, cont in zip(chunk, conts):
                cut = truncate_at_eos(cont, eos_ids)
                if len(cut) < args.new_tokens:
                    if cut and cut[-1] in eos_ids:
                        reason = f"end token {cut[-1]} after {len(cut) - 1} tokens"
                    else:  # node-llama-cpp ends a sequence at an end-of-generation token without returning it
                        reason = f"the engine stopped after {len(cut)} tokens (at an end-of-generation token it does not return)"
                    dropped.append({"id": c.id, "reason": reason})
                else:
                    kept[c.source].append((c, cont))
            print(f"gen: batch of {len(chunk)} (prompts {len(chunk[0].prompt)}..{len(chunk[-1].prompt)} tokens) "
                  f"in {time.time() - tb:.0f}s", file=sys.stderr)
    gen_s = time.time() - t2

    samples: list[tuple[Candidate, list[int]]] = []
    for src in pools:
        samples.extend(sorted(kept[src], key=lambda kc: kc[0].id)[: args.per_source])

    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "dataset.jsonl.tmp"
    with tmp.open("w") as f:
        for c, cont in samples:
            f.write(json.dumps({"id": c.id, "prompt": c.prompt, "continuation": cont}, separators=(",", ":")) + "\n")
    manifest = {
        **({"engine": "transformers", "transformers": transformers.__version__, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "dtype": "float32 (dequantized from the GGUF)",
            "decoding": "greedy (do_sample=False, num_beams=1)", "batch": args.batch, "padding": "left, with attention mask"}
           if args.engine == "transformers" else
           {"engine": "llama.cpp", "node_llama_cpp": "3.21.1", "llama_cpp": engine_info, "threads": args.threads,
            "weights": "the GGUF as is (Q4_K_M mix)", "decoding": "greedy (temperature 0, no repetition penalty)",
            "sequences": args.batch}),
        "python": sys.version.split()[0], "tokenizer": "transformers AutoTokenizer from the GGUF (" + transformers.__version__ + ")",
        "target": {"file": str(args.target), "sha256": sha256_file(args.target)},
        "new_tokens": args.new_tokens, "per_source": args.per_source, "seed": args.seed,
        "prompt_tokens": [args.min_prompt, args.max_prompt], "eos_ids": eos_ids,
        "go": subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip(),
        "python_stdlib": str(pyroot), "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
        "load_s": round(load_s, 1), "generate_s": round(gen_s, 1), "generated_tokens": gen_tokens,
        "dropped": dropped, "padding_check": {"checked": 0},
        "samples": [{"id": c.id, "source": c.source, "prompt_tokens": len(c.prompt), **c.origin} for c, _ in samples],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    tmp.rename(args.out / "dataset.jsonl")
    print(f"gen: {len(samples)} samples → {args.out / 'dataset.jsonl'}", file=sys.stderr)
    padding: dict[str, Any] = {"checked": 0}
    if args.check_padding > 0:
        checks = []
        for c, cont in samples[: args.check_padding]:
            alone = run([c.prompt], 1)[0]
            first = next((i for i, (a, b) in enumerate(zip(alone, cont)) if a != b), None)
            checks.append({"id": c.id, "identical": alone == cont, "first_difference": first})
            print(f"gen: padding check {c.id}: identical={alone == cont} first_difference={first}", file=sys.stderr)
        padding = {"checked": len(checks), "identical": sum(1 for x in checks if x["identical"]), "samples": checks}

    manifest["padding_check"] = padding
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"gen: {len(samples)} samples → {args.out / 'dataset.jsonl'} ({len(dropped)} dropped at an end token)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
