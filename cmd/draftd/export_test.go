// export_test.go: `draftd export` on every shipped tiny model (F32, F16,
// BF16, Q8_0, Q4_0 and K-quant mixes; Qwen3, Qwen2, Llama with its permuted
// Q/K rows), read back by draftd's own HF loader: the f32 export computes
// the numpy reference's logits (testdata/reference/golden, float64 on the
// exact dequantized weights) to f32 rounding, and an F32 GGUF's export the
// GGUF's own logits bit for bit. Also the bf16/f16 rounding against an
// independent nearest-even rounding, and the command's errors.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/fileio"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/safetensors"
	"github.com/draftd/draftd/internal/tokenizer"
)

const (
	shippedModels = "../../testdata/models"
	shippedGolden = "../../testdata/reference/golden"
)

// exportTokenizer is a small byte-level BPE tokenizer with merges, special
// and plain added tokens and a chat template (265 ids, for the tiny models'
// 512), or only the 256 byte tokens when vocab leaves no room for more.
func exportTokenizer(t *testing.T, vocabSize int) *tokenizer.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	b2u := func(b byte) string { // GPT-2's byte-level alphabet
		switch {
		case b >= '!' && b <= '~', b >= 0xa1 && b <= 0xac, b >= 0xae:
			return string(rune(b))
		}
		n := 0
		for c := 0; c < int(b); c++ {
			if !(c >= '!' && c <= '~' || c >= 0xa1 && c <= 0xac || c >= 0xae) {
				n++
			}
		}
		return string(rune(256 + n))
	}
	for b := range 256 {
		vocab[b2u(byte(b))] = b
	}
	merges := [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "Ġ"}}
	specials := []struct {
		s       string
		special bool
	}{{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true}, {"<think>", false}}
	config, eos, pad := `{"bos_token_id": 261}`, "<|im_end|>", "<|endoftext|>"
	if vocabSize < 256+len(merges)+len(specials) {
		merges, specials, config, eos, pad = [][2]string{}, nil, "{}", "", ""
	}
	for _, m := range merges {
		vocab[m[0]+m[1]] = len(vocab)
	}
	added := []map[string]any{}
	for i, a := range specials {
		added = append(added, map[string]any{"id": len(vocab) + i, "content": a.s, "special": a.special,
			"normalized": false, "lstrip": false, "rstrip": false, "single_word": false})
	}
	doc := map[string]any{
		"version": "1.0", "added_tokens": added, "normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	tj, _ := json.Marshal(doc)
	tc, _ := json.Marshal(map[string]any{"eos_token": eos, "pad_token": pad, "add_bos_token": false,
		"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"})
	tok, err := tokenizer.FromHF(tj, tc, nil, []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// withTokenizer copies the GGUF file src to dst with tok's metadata added
// (the shipped models carry none).
func withTokenizer(t *testing.T, src, dst string, tok *tokenizer.Tokenizer) {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, kv := range f.KV {
		if kv.Key == "general.alignment" {
			continue
		}
		if err := w.Add(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	emb, _ := f.Tensor("token_embd.weight")
	if err := tok.WriteGGUFPadded(w, int(emb.Shape[1])); err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensor(ti.Name, ti.Type, ti.Shape, ti.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(dst); err != nil {
		t.Fatal(err)
	}
}

type exportGolden struct {
	Model string `json:"model"`
	Cases []struct {
		Prompt  []int       `json:"prompt"`
		Logits  [][]float64 `json:"logits"` // (len(prompt), vocab)
		Greedy  []int       `json:"greedy"`
		Margins []float64   `json:"margins"`
	} `json:"cases"`
}

// TestExportMatchesReference exports every shipped model with --dtype f32
// and loads the directory with draftd's HF loader (f32 kernels, f32 KV):
// its logits are the numpy reference's within f32 rounding (2e-3, as
// TestFidelity allows the exact-weight paths), its greedy continuations the
// reference's up to near-ties. An F32 GGUF's export gives the GGUF's own
// logits bit for bit. The exported config and tokenizer read back as the
// GGUF's.
func TestExportMatchesReference(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(shippedGolden, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files in %s (%v)", shippedGolden, err)
	}
	const tol = 2e-3
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var g exportGolden
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatal(err)
		}
		t.Run(g.Model, func(t *testing.T) {
			dir := t.TempDir()
			gg := filepath.Join(dir, "m.gguf")
			tok := exportTokenizer(t, len(g.Cases[0].Logits[0]))
			withTokenizer(t, filepath.Join(shippedModels, g.Model+".gguf"), gg, tok)
			out := filepath.Join(dir, "hf")
			err := Run(context.Background(), []string{"export", "--model", gg, "--out", out, "--dtype", "f32", "--threads", "2"})
			if strings.HasPrefix(g.Model, "tiny-llama3") {
				// llama.cpp's rope_freqs does not record the rope_scaling parameters.
				if err == nil || !strings.Contains(err.Error(), "rope_freqs") {
					t.Fatalf("have %v; want the rope_freqs error", err)
				}
				if _, serr := os.Stat(out); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("a failed export left %s", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(out, model.Options{Threads: 2, KV: model.KVF32})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for ci, c := range g.Cases {
				logits, err := m.PrefillLogits(c.Prompt)
				if err != nil {
					t.Fatal(err)
				}
				worst, at := 0.0, ""
				for p, want := range c.Logits {
					for v, w := range want {
						if d := math.Abs(float64(logits[p*m.Vocab+v]) - w); !(d <= worst) {
							worst, at = d, fmt.Sprintf("position %d id %d: have %g; want %g", p, v, logits[p*m.Vocab+v], w)
						}
					}
				}
				if !(worst <= tol) {
					t.Errorf("case %d: max |logit diff| %.3g > %g at %s", ci, worst, tol, at)
				}
				have, err := m.Generate(c.Prompt, len(c.Greedy))
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range c.Greedy {
					if have[i] != want {
						if c.Margins[i] > 2*tol {
							t.Errorf("case %d: first differing greedy id at step %d: have %d; want %d (margin %.3g)", ci, i, have[i], want, c.Margins[i])
						}
						break
					}
				}
			}
			checkExportedFiles(t, gg, out, tok)
			if !strings.HasSuffix(g.Model, "-f32") {
				return
			}
			gm, err := model.Load(gg, model.Options{Threads: 2, KV: model.KVF32})
			if err != nil {
				t.Fatal(err)
			}
			defer gm.Close()
			for ci, c := range g.Cases {
				a, _ := gm.PrefillLogits(c.Prompt)
				b, _ := m.PrefillLogits(c.Prompt)
				if len(a) != len(b) || len(a) == 0 {
					t.Fatalf("case %d: %d logits from the GGUF, %d from the export", ci, len(a), len(b))
				}
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Errorf("case %d: logit %d of the export %g; the GGUF's %g (want bit-identical)", ci, i, b[i], a[i])
						break
					}
				}
				ga, _ := gm.Generate(c.Prompt, 16)
				gb, _ := m.Generate(c.Prompt, 16)
				if !slices.Equal(ga, gb) {
					t.Errorf("case %d: greedy from the export %v; from the GGUF %v", ci, gb, ga)
				}
			}
		})
	}
}

// checkExportedFiles reads back config.json (as draftd's HF loader does and
// as JSON), generation_config.json and the tokenizer files of out and
// compares them with the GGUF file gg.
func checkExportedFiles(t *testing.T, gg, out string, tok *tokenizer.Tokenizer) {
	t.Helper()
	want, err := model.LoadConfig(gg)
	if err != nil {
		t.Fatal(err)
	}
	have, err := model.LoadConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	fields := func(c *model.Config) string { // every hyper-parameter but the keys they were read from
		return fmt.Sprint(c.Arch, c.Hidden, c.Intermediate, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Vocab, c.MaxContext,
			c.RMSEps, c.RopeTheta, c.Llama3, len(c.RoPEFreqFactors), c.TiedEmbed, c.QKNorm, c.QKVBias, c.BOS, c.EOS)
	}
	if fields(have) != fields(want) {
		t.Errorf("config.json reads as %s; the GGUF as %s", fields(have), fields(want))
	}
	var cfg map[string]any
	readJSON(t, filepath.Join(out, "config.json"), &cfg)
	arch := map[string]string{model.ArchQwen2: "Qwen2ForCausalLM", model.ArchQwen3: "Qwen3ForCausalLM", model.ArchLlama: "LlamaForCausalLM"}[want.Arch]
	if a, _ := cfg["architectures"].([]any); len(a) != 1 || a[0] != arch || cfg["model_type"] != want.Arch || cfg["torch_dtype"] != "float32" {
		t.Errorf("config.json: architectures %v model_type %v torch_dtype %v; want [%s] %s float32", cfg["architectures"], cfg["model_type"], cfg["torch_dtype"], arch, want.Arch)
	}
	var gen map[string]any
	readJSON(t, filepath.Join(out, "generation_config.json"), &gen)
	id := func(v int) any {
		if v < 0 {
			return nil
		}
		return float64(v)
	}
	if gen["eos_token_id"] != id(tok.EOS()) || gen["bos_token_id"] != id(tok.BOS()) {
		t.Errorf("generation_config.json %v; want bos %d eos %d", gen, tok.BOS(), tok.EOS())
	}
	ht, err := tokenizer.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []tokenizer.Message{{Role: "user", Content: "the thin  thing<think>"}}
	hc, err1 := ht.EncodeChat(msgs, true, false)
	wc, err2 := tok.EncodeChat(msgs, true, false)
	if err1 != nil || err2 != nil || !slices.Equal(hc, wc) || len(hc) == 0 {
		t.Errorf("chat from the export %v (%v); want %v (%v)", hc, err1, wc, err2)
	}
	if ht.EOS() != tok.EOS() || ht.PAD() != tok.PAD() || ht.BOS() != tok.BOS() {
		t.Errorf("export's bos/eos/pad %d/%d/%d; want %d/%d/%d", ht.BOS(), ht.EOS(), ht.PAD(), tok.BOS(), tok.EOS(), tok.PAD())
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// nearestEven rounds the float32 x to a float format with man mantissa bits
// and exponent bias bias (bf16: 7, 127; f16: 10, 15) the slow way: of the
// two representable values around x, the nearer, on a tie the one with an
// even mantissa; beyond the largest finite value, ±Inf. It returns the
// rounded value as a float64 and whether x was a tie.
func nearestEven(x float32, man, bias int) (float64, bool) {
	v := float64(x)
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return v, false
	}
	e := max(math.Ilogb(math.Abs(v)), 1-bias) // subnormals share the smallest exponent
	q := math.Ldexp(1, e-man)                 // the spacing at x
	k := math.Floor(v / q)
	lo, hi := k*q, (k+1)*q
	r := lo
	switch dl, dh := v-lo, hi-v; {
	case dh < dl, dh == dl && math.Mod(k, 2) != 0:
		r = hi
	}
	// The largest finite value is (2 - 2^-man)·2^bias; what rounds above it is Inf.
	if math.Abs(r) > (2-math.Ldexp(1, -man))*math.Ldexp(1, bias) {
		r = math.Copysign(math.Inf(1), v)
	}
	return r, v-lo == hi-v
}

// TestExportRounding exports an F32 model as bf16 and f16 and checks every
// value against nearestEven of the f32 export's value.
func TestExportRounding(t *testing.T) {
	tok := exportTokenizer(t, 512)
	dir := t.TempDir()
	gg := filepath.Join(dir, "m.gguf")
	withTokenizer(t, filepath.Join(shippedModels, "tiny-qwen3-f32.gguf"), gg, tok)
	read := func(dt string) *safetensors.File {
		out := filepath.Join(dir, dt)
		if err := Run(context.Background(), []string{"export", "--model", gg, "--out", out, "--dtype", dt}); err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.Open(filepath.Join(out, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	f32 := read("f32")
	for _, c := range []struct {
		dt, st    string
		man, bias int
		widen     func(uint16) float64
	}{
		{"bf16", "BF16", 7, 127, func(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }},
		{"f16", "F16", 10, 15, func(h uint16) float64 {
			e, m := int(h>>10&0x1f), float64(h&0x3ff)
			var v float64
			switch e {
			case 0:
				v = math.Ldexp(m, -24)
			case 0x1f:
				v = math.Inf(1)
			default:
				v = math.Ldexp(1024+m, e-25)
			}
			if h&0x8000 != 0 {
				v = -v
			}
			return v
		}},
	} {
		f := read(c.dt)
		n, bad, ties := 0, 0, 0
		for _, w := range f32.Tensors() {
			h, ok := f.Tensor(w.Name)
			if !ok || h.DType != c.st || !slices.Equal(h.Shape, w.Shape) {
				t.Fatalf("%s: tensor %s missing or %s %v", c.dt, w.Name, h.DType, h.Shape)
			}
			for i := range len(w.Data) / 4 {
				x := math.Float32frombits(binary.LittleEndian.Uint32(w.Data[4*i:]))
				have := c.widen(binary.LittleEndian.Uint16(h.Data[2*i:]))
				want, tie := nearestEven(x, c.man, c.bias)
				n++
				if tie {
					ties++
				}
				if have != want {
					if bad++; bad <= 3 {
						t.Errorf("%s: %s[%d] = %g from %g; want %g", c.dt, w.Name, i, have, x, want)
					}
				}
			}
		}
		t.Logf("%s: %d values, %d ties, %d wrong", c.dt, n, ties, bad)
		if n == 0 {
			t.Fatalf("%s: no values compared", c.dt)
		}
	}
}

// TestExportErrors: bad command lines are usage errors; a bad --out, a
// non-empty directory without --force, a GGUF without a tokenizer and an
// unsupported architecture are errors naming what was wrong, and none of
// them leaves anything behind; --force replaces a directory; a cancelled
// export leaves nothing.
func TestExportErrors(t *testing.T) {
	tok := exportTokenizer(t, 512)
	dir := t.TempDir()
	gg := filepath.Join(dir, "m.gguf")
	withTokenizer(t, filepath.Join(shippedModels, "tiny-qwen2-q4_0.gguf"), gg, tok)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	full := filepath.Join(dir, "full")
	os.MkdirAll(full, 0o755)
	os.WriteFile(filepath.Join(full, "keep"), []byte("x"), 0o644)
	gemma := filepath.Join(dir, "gemma.gguf")
	w := gguf.NewWriter()
	w.Add("general.architecture", "gemma")
	if err := w.WriteFile(gemma); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name  string
		args  []string
		usage bool
		want  string
	}{
		{"no model", []string{"--out", out}, true, "--model is required"},
		{"no out", []string{"--model", gg}, true, "--out is required"},
		{"bad dtype", []string{"--model", gg, "--out", out, "--dtype", "q8_0"}, true, "--dtype"},
		{"negative threads", []string{"--model", gg, "--out", out, "--threads", "-1"}, true, "--threads"},
		{"stray argument", []string{"--model", gg, "--out", out, "extra"}, true, "unexpected argument"},
		{"out is a file", []string{"--model", gg, "--out", file}, false, "not a directory"},
		{"out is dot", []string{"--model", gg, "--out", "."}, false, "want a directory name"},
		{"out is root", []string{"--model", gg, "--out", "/"}, false, "want a directory name"},
		{"out not empty", []string{"--model", gg, "--out", full}, false, "not empty (--force replaces it)"},
		{"missing model", []string{"--model", filepath.Join(dir, "nope.gguf"), "--out", out}, false, "nope.gguf"},
		{"no tokenizer", []string{"--model", filepath.Join(shippedModels, "tiny-qwen2-q4_0.gguf"), "--out", out}, false, "tokenizer"},
		{"unsupported architecture", []string{"--model", gemma, "--out", out}, false, `"gemma"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Run(context.Background(), append([]string{"export"}, c.args...))
			if err == nil || errors.Is(err, ErrUsage) != c.usage || !strings.Contains(err.Error(), c.want) {
				t.Errorf("have %v; want an error containing %q (usage error: %v)", err, c.want, c.usage)
			}
		})
	}
	// Nothing was written: the directory holds what the test put there.
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"file", "full", "gemma.gguf", "m.gguf"}; !slices.Equal(names, want) {
		t.Errorf("after the failed exports %s holds %q; want %q", dir, names, want)
	}
	if _, err := os.Stat(filepath.Join(full, "keep")); err != nil {
		t.Errorf("a refused export touched %s: %v", full, err)
	}

	// A cancelled export leaves nothing, not even its temporary directory.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, []string{"export", "--model", gg, "--out", out}); !errors.Is(err, errInterrupted) {
		t.Errorf("cancelled: have %v; want %v", err, errInterrupted)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 4 {
		t.Errorf("a cancelled export left %d entries in %s; want 4", len(ents), dir)
	}

	// --force replaces a non-empty directory; an empty one needs no --force.
	if err := Run(context.Background(), []string{"export", "--model", gg, "--out", full, "--force"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(full, "keep")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--force kept the old directory's file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	if err := Run(context.Background(), []string{"export", "--model", gg, "--out", empty}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadDir(empty)
	var files []string
	for _, e := range got {
		files = append(files, e.Name())
	}
	if want := []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}; !slices.Equal(files, want) {
		t.Errorf("exported files %q; want %q", files, want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 5 {
		t.Errorf("%s holds %d entries after two exports; want 5 (no temporary left)", dir, len(ents))
	}
}

// dirNames lists dir's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestExportLateSignal (issue 37): a SIGINT that reaches a real export
// process after its last weight byte is written — paused there by
// DRAFTD_TEST_PAUSE, no sleep — leaves --out as it was (absent, or with
// --force the old directory) and no temporary, and the exit status is 1.
func TestExportLateSignal(t *testing.T) {
	tok := exportTokenizer(t, 512)
	src := t.TempDir()
	gg := filepath.Join(src, "m.gguf")
	withTokenizer(t, filepath.Join(shippedModels, "tiny-qwen3-q8_0.gguf"), gg, tok)
	for _, c := range []struct {
		name  string
		old   bool // --out exists with a file in it, and --force
		pause string
	}{
		{"absent out", false, "export-commit"},
		{"forced over an old out", true, "export-commit"},
		{"absent out, signal after the rename", false, "export-renamed"},
		{"forced over an old out, signal after the swap", true, "export-renamed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			args := []string{"export", "--model", gg, "--out", out}
			if c.old {
				os.Mkdir(out, 0o755)
				os.WriteFile(filepath.Join(out, "keep"), []byte("old"), 0o644)
				args = append(args, "--force")
			}
			p := startProcEnv(t, []string{"DRAFTD_TEST_PAUSE=" + c.pause}, args...)
			p.waitLine("paused at "+c.pause, 60*time.Second)
			p.cmd.Process.Signal(os.Interrupt)
			if code := p.wait(60 * time.Second); code != 1 {
				t.Errorf("exit status %d after a late SIGINT; want 1; stderr:\n%s", code, p.stderr())
			}
			want := []string(nil)
			if c.old {
				want = []string{"out"}
				if b, err := os.ReadFile(filepath.Join(out, "keep")); err != nil || string(b) != "old" || len(dirNames(t, out)) != 1 {
					t.Errorf("--out after the signal holds %q (keep: %q, %v); want the old directory", dirNames(t, out), b, err)
				}
			}
			if have := dirNames(t, dir); !slices.Equal(have, want) {
				t.Errorf("%s holds %q after the signal; want %q", dir, have, want)
			}
		})
	}
}

// TestExportWeakSpots (issue 37): the next export removes the temporary
// directory a killed one left (not one a live export holds); a failed
// export removes the parent directories it created; a symbolic link to an
// empty directory is exported into; --out naming the directory that holds
// the model is refused, --force or not, and the model stays.
func TestExportWeakSpots(t *testing.T) {
	tok := exportTokenizer(t, 512)
	dir := t.TempDir()
	gg := filepath.Join(dir, "m.gguf")
	withTokenizer(t, filepath.Join(shippedModels, "tiny-qwen3-q8_0.gguf"), gg, tok)
	exported := []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}

	t.Run("stale temporary removed", func(t *testing.T) {
		parent := t.TempDir()
		stale := filepath.Join(parent, ".out.export-123456")
		os.Mkdir(stale, 0o755)
		os.WriteFile(filepath.Join(stale, "model.safetensors"), make([]byte, 4096), 0o644)
		live, unlock, err := fileio.TempDir(parent, ".out.export-") // a live export's
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		other := filepath.Join(parent, ".out.export-12x")
		os.Mkdir(other, 0o755)
		if err := Run(context.Background(), []string{"export", "--model", gg, "--out", filepath.Join(parent, "out")}); err != nil {
			t.Fatal(err)
		}
		want := []string{filepath.Base(live), ".out.export-12x", "out"}
		slices.Sort(want)
		if have := dirNames(t, parent); !slices.Equal(have, want) {
			t.Errorf("%s holds %q; want %q (the stale temporary gone, the live one and other names kept)", parent, have, want)
		}
	})

	t.Run("no parents left by a failed export", func(t *testing.T) {
		parent := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := Run(ctx, []string{"export", "--model", gg, "--out", filepath.Join(parent, "a", "b", "out")})
		if !errors.Is(err, errInterrupted) {
			t.Fatalf("have %v; want %v", err, errInterrupted)
		}
		if have := dirNames(t, parent); len(have) != 0 {
			t.Errorf("a failed export left %q in %s", have, parent)
		}
	})

	t.Run("symbolic link to an empty directory", func(t *testing.T) {
		parent := t.TempDir()
		target := filepath.Join(parent, "target")
		os.Mkdir(target, 0o755)
		link := filepath.Join(parent, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := Run(context.Background(), []string{"export", "--model", gg, "--out", link}); err != nil {
			t.Fatalf("have %v; want the export written through the link", err)
		}
		if have := dirNames(t, target); !slices.Equal(have, exported) {
			t.Errorf("%s holds %q; want %q", target, have, exported)
		}
		if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a link (%v)", link, err)
		}
		dangling := filepath.Join(parent, "dangling")
		os.Symlink(filepath.Join(parent, "nowhere"), dangling)
		if err := Run(context.Background(), []string{"export", "--model", gg, "--out", dangling}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("a dangling link: have %v; want an error naming the link", err)
		}
	})

	t.Run("out holds the model", func(t *testing.T) {
		mdir := t.TempDir()
		m := filepath.Join(mdir, "sub", "m.gguf")
		os.Mkdir(filepath.Dir(m), 0o755)
		raw, _ := os.ReadFile(gg)
		os.WriteFile(m, raw, 0o644)
		for _, args := range [][]string{{"--out", mdir, "--force"}, {"--out", mdir}, {"--out", filepath.Dir(m), "--force"}} {
			err := Run(context.Background(), append([]string{"export", "--model", m}, args...))
			if err == nil || !strings.Contains(err.Error(), "holds the --model file") {
				t.Errorf("%q: have %v; want a refusal naming the model file", args, err)
			}
		}
		if b, err := os.ReadFile(m); err != nil || len(b) != len(raw) {
			t.Errorf("the model file after the refused exports: %d bytes, %v", len(b), err)
		}
	})
}

// TestExportReplaceAside: where no atomic exchange exists, an export whose
// context ended during the renames puts the old directory back.
func TestExportReplaceAside(t *testing.T) {
	dir := t.TempDir()
	tmp, out := filepath.Join(dir, ".out.export-1"), filepath.Join(dir, "out")
	os.Mkdir(tmp, 0o755)
	os.WriteFile(filepath.Join(tmp, "new"), nil, 0o644)
	os.Mkdir(out, 0o755)
	os.WriteFile(filepath.Join(out, "old"), nil, 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := replaceAside(ctx, tmp, out); !errors.Is(err, errInterrupted) {
		t.Fatalf("have %v; want %v", err, errInterrupted)
	}
	if have := dirNames(t, out); !slices.Equal(have, []string{"old"}) {
		t.Errorf("out holds %q; want the old directory", have)
	}
	if have := dirNames(t, tmp); !slices.Equal(have, []string{"new"}) {
		t.Errorf("the temporary holds %q; want the new directory", have)
	}
	if err := replaceAside(context.Background(), tmp, out); err != nil {
		t.Fatal(err)
	}
	if have := dirNames(t, dir); !slices.Equal(have, []string{"out"}) || !slices.Equal(dirNames(t, out), []string{"new"}) {
		t.Errorf("after the replacement %s holds %q, out %q; want only out with the new file", dir, have, dirNames(t, out))
	}
}

// TestExportKilledLeftover (issue 37): an export killed outright at its
// last stage (SIGKILL, as a second Ctrl-C's immediate exit) leaves its
// hidden temporary and --out as it was; the next export of the same --out
// removes the temporary and writes --out.
func TestExportKilledLeftover(t *testing.T) {
	tok := exportTokenizer(t, 512)
	dir := t.TempDir()
	gg := filepath.Join(t.TempDir(), "m.gguf")
	withTokenizer(t, filepath.Join(shippedModels, "tiny-qwen3-q8_0.gguf"), gg, tok)
	out := filepath.Join(dir, "out")
	p := startProcEnv(t, []string{"DRAFTD_TEST_PAUSE=export-commit"}, "export", "--model", gg, "--out", out)
	p.waitLine("paused at export-commit", 60*time.Second)
	p.cmd.Process.Kill()
	p.wait(60 * time.Second)
	left := dirNames(t, dir)
	if len(left) != 1 || !strings.HasPrefix(left[0], ".out.export-") {
		t.Fatalf("a killed export left %q; want its temporary only", left)
	}
	if err := Run(context.Background(), []string{"export", "--model", gg, "--out", out}); err != nil {
		t.Fatal(err)
	}
	if have := dirNames(t, dir); !slices.Equal(have, []string{"out"}) {
		t.Errorf("after the next export %s holds %q; want only out", dir, have)
	}
}
