package quant

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/safetensors"
)

const (
	modelsDir = "../../testdata/models"
	goldenDir = "../../testdata/reference/golden"
)

type goldenCase struct {
	Prompt  []int       `json:"prompt"`
	Logits  [][]float64 `json:"logits"`
	Greedy  []int       `json:"greedy"`
	Margins []float64   `json:"margins"`
}

type golden struct {
	Cases      []goldenCase `json:"cases"`
	CasesQ8Act []goldenCase `json:"cases_q8act"`
}

func readGolden(t *testing.T, name string) golden {
	data, err := os.ReadFile(filepath.Join(goldenDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// prepare converts src with recipe into a GGUF under t.TempDir.
func prepare(t *testing.T, src, recipe string) string {
	t.Helper()
	s, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := Lookup(recipe)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Layout(r, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(src)+"-"+recipe+".gguf")
	if err := o.Write(out); err != nil {
		t.Fatal(err)
	}
	return out
}

func load(t *testing.T, path string) *model.Model {
	t.Helper()
	m, err := model.Load(path, model.Options{Threads: 2, KVF32: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// logits is the prefill of prompt: (len(prompt), vocab).
func logits(t *testing.T, m *model.Model, prompt []int) []float32 {
	l, err := m.PrefillLogits(prompt)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// sameGreedy checks that two models give identical greedy continuations and
// (nearly) identical logits on the golden prompts.
func sameGreedy(t *testing.T, have, want *model.Model, cases []goldenCase, tol float64) {
	t.Helper()
	for ci, c := range cases {
		a, err := have.Generate(c.Prompt, len(c.Greedy))
		if err != nil {
			t.Fatal(err)
		}
		b, err := want.Generate(c.Prompt, len(c.Greedy))
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			if a[i] != b[i] {
				t.Errorf("case %d: first differing greedy id at step %d: have %d; want %d\nhave %v\nwant %v", ci, i, a[i], b[i], a, b)
				break
			}
		}
		la, lb := logits(t, have, c.Prompt), logits(t, want, c.Prompt)
		var worst float64
		for i := range lb {
			worst = max(worst, math.Abs(float64(la[i]-lb[i])))
		}
		if !(worst <= tol) {
			t.Errorf("case %d: max |logit diff| %.3g > %g", ci, worst, tol)
		}
	}
}

// TestPrepareShipped converts each shipped tiny HF directory. A float model
// in its own type must give the same greedy tokens (and logits) as the HF
// directory loaded directly; a Q8_0/Q4_0 model (its HF copy holds numbers on
// the quantization grid) is checked against the numpy reference's
// quantized-activation cases, as internal/model's TestFidelity checks the
// shipped GGUF.
func TestPrepareShipped(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(modelsDir, "tiny-*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, dir := range dirs {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		if st, _ := filepath.Glob(filepath.Join(dir, "*.safetensors")); len(st) == 0 {
			continue // a GGUF-only model (the K-quant ones): nothing to convert
		}
		n++
		name := filepath.Base(dir)
		recipe := name[strings.LastIndexByte(name, '-')+1:]
		t.Run(name, func(t *testing.T) {
			g := readGolden(t, name)
			out := prepare(t, dir, recipe)
			m := load(t, out)
			if m.TypeCounts[strings.ToUpper(recipe)] == 0 {
				t.Errorf("prepared %s holds types %v; want %s matrices", recipe, m.TypeCounts, recipe)
			}
			if len(g.CasesQ8Act) == 0 {
				sameGreedy(t, m, load(t, dir), g.Cases, 1e-4)
				return
			}
			// Against the exact reference only gross errors show (these
			// random models amplify a flipped activation rounding to ~0.5;
			// a wrong layout is off by ~6), as TestFidelity bounds them.
			for ci, c := range g.Cases {
				l := logits(t, m, c.Prompt)
				var worst, sum float64
				for p, want := range c.Logits {
					for v, w := range want {
						d := math.Abs(float64(l[p*m.Vocab+v]) - w)
						worst, sum = max(worst, d), sum+d
					}
				}
				if mean := sum / float64(len(c.Logits)*m.Vocab); !(worst <= 1.0 && mean <= 0.2) {
					t.Errorf("case %d: max |logit diff| %.3g (≤ 1), mean %.3g (≤ 0.2) against the exact reference", ci, worst, mean)
				}
			}
			best := math.Inf(1)
			for _, c := range g.CasesQ8Act {
				l := logits(t, m, c.Prompt)
				var worst float64
				for p, want := range c.Logits {
					for v, w := range want {
						worst = max(worst, math.Abs(float64(l[p*m.Vocab+v])-w))
					}
				}
				best = min(best, worst)
			}
			t.Logf("closest prompt to the Q8_0-activation reference: max |logit diff| %.3g", best)
			if !(best <= 1e-3) {
				t.Errorf("no prompt matches the Q8_0-activation reference within 1e-3 (best %.3g)", best)
			}
		})
	}
	if n < 9 {
		t.Fatalf("found %d shipped HF directories; want 9", n)
	}
}

// writeFP8 writes a tiny Qwen3 as an FP8 checkpoint: projections in F8_E4M3
// with (rows/32, cols/32) F32 weight_scale_inv blocks, embedding and norms in
// BF16 (as real FP8 releases keep them), config.json from the shipped model.
func writeFP8(t *testing.T) string {
	src := filepath.Join(modelsDir, "tiny-qwen3-bf16")
	d, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := rand.New(rand.NewPCG(8, 8))
	var ts []safetensors.Tensor
	for _, name := range d.Names() {
		st, _ := d.Tensor(name)
		if len(st.Shape) != 2 || strings.Contains(name, "embed_tokens") {
			ts = append(ts, safetensors.Tensor{Name: name, DType: st.DType, Shape: st.Shape, Data: bytes.Clone(st.Data)})
			continue
		}
		rows, cols := int(st.Shape[0]), int(st.Shape[1])
		codes := make([]byte, rows*cols)
		for i := range codes {
			// exponent 4..8 (1/8 .. 3.75), any mantissa, either sign
			codes[i] = byte(r.IntN(2))<<7 | byte(4+r.IntN(5))<<3 | byte(r.IntN(8))
		}
		var sc []byte
		for range rows / 32 * (cols / 32) {
			sc = binary.LittleEndian.AppendUint32(sc, math.Float32bits(float32((0.5+r.Float64())/math.Sqrt(float64(cols)))))
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: "F8_E4M3", Shape: st.Shape, Data: codes},
			safetensors.Tensor{Name: name + "_scale_inv", DType: "F32", Shape: []int64{int64(rows / 32), int64(cols / 32)}, Data: sc})
	}
	dir := filepath.Join(t.TempDir(), "tiny-qwen3-fp8")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPrepareFP8: an FP8 checkpoint converted to F32 gives the same greedy
// tokens as draftd loading the FP8 directory itself; converted straight to
// Q8_0 (no F32 copy of the model) it holds exactly the bytes of quantizing
// that F32 file, and auto selection starts at q8_0.
func TestPrepareFP8(t *testing.T) {
	dir := writeFP8(t)
	g := readGolden(t, "tiny-qwen3-bf16")
	f32 := prepare(t, dir, "f32")
	sameGreedy(t, load(t, f32), load(t, dir), g.Cases, 1e-3)

	q8 := prepare(t, dir, "q8_0")
	via := prepare(t, f32, "q8_0")
	a, err := gguf.Open(q8)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := gguf.Open(via)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, ta := range a.Tensors {
		tb, ok := b.Tensor(ta.Name)
		if !ok || ta.Type != tb.Type || !bytes.Equal(ta.Data, tb.Data) {
			t.Errorf("tensor %s: FP8 → Q8_0 differs from FP8 → F32 → Q8_0", ta.Name)
		}
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.DType != "F8_E4M3" || s.Candidates()[0].Name != "q8_0" {
		t.Errorf("FP8 source: dtype %s, first candidate %s; want F8_E4M3, q8_0", s.DType, s.Candidates()[0].Name)
	}
}

// TestRequantizeGGUF: a GGUF re-quantized to Q8_0 holds the same tensors as
// the HF directory with the same numbers converted to Q8_0 (llama included:
// its GGUF rows are already permuted), and keeps the source's metadata.
func TestRequantizeGGUF(t *testing.T) {
	for _, name := range []string{"tiny-qwen3-f32", "tiny-llama-f32", "tiny-qwen2-bf16", "tiny-llama3-bf16"} {
		t.Run(name, func(t *testing.T) {
			fromGGUF := prepare(t, filepath.Join(modelsDir, name+".gguf"), "q8_0")
			fromHF := prepare(t, filepath.Join(modelsDir, name), "q8_0")
			a, err := gguf.Open(fromGGUF)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := gguf.Open(fromHF)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if len(a.Tensors) != len(b.Tensors) {
				t.Fatalf("have %d tensors; want %d", len(a.Tensors), len(b.Tensors))
			}
			for _, ta := range a.Tensors {
				tb, ok := b.Tensor(ta.Name)
				if !ok || ta.Type != tb.Type || !bytes.Equal(ta.Data, tb.Data) {
					t.Errorf("tensor %s differs between GGUF and HF sources", ta.Name)
				}
			}
			if ft, err := a.Uint("general.file_type"); err != nil || ft != 7 {
				t.Errorf("general.file_type = %d (%v); want 7", ft, err)
			}
		})
	}
}

// TestMetadata: the GGUF of an HF directory carries the hyper-parameters
// under llama.cpp's keys, the file type and quantization version, and no
// lm_head when the embedding is tied.
func TestMetadata(t *testing.T) {
	out := prepare(t, filepath.Join(modelsDir, "tiny-qwen3-bf16"), "q4_0")
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]uint64{
		"qwen3.block_count": 2, "qwen3.context_length": 256, "qwen3.embedding_length": 64,
		"qwen3.feed_forward_length": 128, "qwen3.attention.head_count": 4, "qwen3.attention.head_count_kv": 2,
		"qwen3.attention.key_length": 32, "qwen3.attention.value_length": 32,
		"general.file_type": 2, "general.quantization_version": 2,
	}
	for k, w := range want {
		if v, err := f.Uint(k); err != nil || v != w {
			t.Errorf("%s = %d (%v); want %d", k, v, err, w)
		}
	}
	if v, err := f.Float("qwen3.rope.freq_base"); err != nil || v != 1e6 {
		t.Errorf("rope.freq_base = %g (%v); want 1e6", v, err)
	}
	if v, err := f.Float("qwen3.attention.layer_norm_rms_epsilon"); err != nil || float32(v) != 1e-6 {
		t.Errorf("layer_norm_rms_epsilon = %g (%v); want 1e-6", v, err)
	}
	if _, ok := f.Tensor("output.weight"); ok {
		t.Error("tied model has output.weight")
	}
	for _, ti := range f.Tensors {
		want := dtype.Q4_0
		if len(ti.Shape) == 1 {
			want = dtype.F32
		}
		if ti.Type != want {
			t.Errorf("%s: type %v; want %v", ti.Name, ti.Type, want)
		}
	}
}

// TestAuto: auto picks the best candidate whose exact size fits, the file
// written has exactly that size, and a budget below the smallest fails with
// ErrNoFit naming the sizes.
func TestAuto(t *testing.T) {
	s, err := Open(filepath.Join(modelsDir, "tiny-qwen3-bf16"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var names []string
	sizes := map[string]int64{}
	for _, r := range s.Candidates() {
		names = append(names, r.Name)
		o, err := s.Layout(r, Options{})
		if err != nil {
			t.Fatal(err)
		}
		sizes[r.Name] = o.Bytes
	}
	t.Logf("candidates %v, sizes %v", names, sizes)
	if names[0] != "bf16" || names[len(names)-1] != "q4_0" {
		t.Errorf("candidates %v; want bf16 first, q4_0 last", names)
	}
	for _, tc := range []struct {
		budget int64
		want   string
	}{
		{sizes["bf16"], "bf16"},
		{sizes["bf16"] - 1, "q8_0"}, // f16 has the same size as bf16
		{sizes["q8_0"], "q8_0"},
		{sizes["q8_0"] - 1, firstFit(names, sizes, sizes["q8_0"]-1)},
	} {
		o, err := s.Auto(tc.budget, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if o.Recipe.Name != tc.want {
			t.Errorf("budget %d: have %s; want %s", tc.budget, o.Recipe.Name, tc.want)
		}
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := o.Write(path); err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(path); st.Size() > tc.budget {
			t.Errorf("budget %d: file is %d bytes", tc.budget, st.Size())
		}
	}
	_, err = s.Auto(sizes["q4_0"]-1, Options{})
	if !errors.Is(err, ErrNoFit) || !strings.Contains(err.Error(), fmt.Sprintf("q4_0 %d", sizes["q4_0"])) {
		t.Errorf("budget below q4_0: have %v; want ErrNoFit listing q4_0 %d", err, sizes["q4_0"])
	}
}

// TestWriteCancelled: a cancelled context stops the write between tensors
// and leaves neither the file nor a temporary one.
func TestWriteCancelled(t *testing.T) {
	s, err := Open(filepath.Join(modelsDir, "tiny-qwen3-f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, _ := Lookup("q8_0")
	o, err := s.Layout(r, Options{Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := o.Write(filepath.Join(dir, "m.gguf")); !errors.Is(err, context.Canceled) {
		t.Errorf("have %v; want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestTiedLMHeadDropped: a tied model whose checkpoint also stores lm_head
// (as some do) gets no output tensor; a tensor with no place in the
// architecture is an error naming it.
func TestTiedLMHeadDropped(t *testing.T) {
	src := filepath.Join(modelsDir, "tiny-qwen3-f32")
	d, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var ts []safetensors.Tensor
	for _, name := range d.Names() {
		st, _ := d.Tensor(name)
		ts = append(ts, safetensors.Tensor{Name: name, DType: st.DType, Shape: st.Shape, Data: st.Data})
	}
	emb, _ := d.Tensor("model.embed_tokens.weight")
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(extra safetensors.Tensor) string {
		dir := t.TempDir()
		if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), append(append([]safetensors.Tensor(nil), ts...), extra), nil); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	out := prepare(t, write(safetensors.Tensor{Name: "lm_head.weight", DType: "F32", Shape: emb.Shape, Data: emb.Data}), "f32")
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.Tensor("output.weight"); ok {
		t.Error("tied model: output.weight written")
	}
	_, err = Open(write(safetensors.Tensor{Name: "model.layers.0.mlp.experts.weight", DType: "F32", Shape: []int64{2}, Data: make([]byte, 8)}))
	if err == nil || !strings.Contains(err.Error(), "model.layers.0.mlp.experts.weight") {
		t.Errorf("unknown tensor: have %v; want an error naming it", err)
	}
}

// firstFit is the first of names (best first) whose size is at most budget.
func firstFit(names []string, sizes map[string]int64, budget int64) string {
	for _, n := range names {
		if sizes[n] <= budget {
			return n
		}
	}
	return ""
}
