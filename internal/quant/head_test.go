package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
)

// prepareHead converts src with recipe and the LM head in head (nil: the
// recipe's) into a GGUF under t.TempDir.
func prepareHead(t *testing.T, src string, recipe Recipe, head *dtype.Type) (string, error) {
	t.Helper()
	s, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o, err := s.Layout(recipe, Options{Threads: 2, HeadType: head})
	if err != nil {
		return "", err
	}
	out := filepath.Join(t.TempDir(), "out.gguf")
	return out, o.Write(out)
}

func openFile(t *testing.T, path string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// numpyQuantize is testdata/reference/quantize_ref.py's encoding of x in
// typ (q8_0, q4_0 or q5_0): the independent reference of ggml's blocks.
func numpyQuantize(t *testing.T, typ dtype.Type, x []float32) []byte {
	t.Helper()
	py := numpyPython(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.f32"), filepath.Join(dir, "out")
	raw := make([]byte, 0, 4*len(x))
	for _, v := range x {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	name := strings.ToLower(typ.String())
	if msg, err := exec.Command(py, "../../testdata/reference/quantize_ref.py", in, name, out).CombinedOutput(); err != nil {
		t.Fatalf("quantize_ref.py %s: %v\n%s", name, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dequantized is every element of a GGUF tensor as f32.
func dequantized(t *testing.T, ti *gguf.TensorInfo) []float32 {
	t.Helper()
	n := 1
	for _, d := range ti.Shape {
		n *= int(d)
	}
	x := make([]float32, n)
	if err := dtype.Dequantize(ti.Type, x, ti.Data); err != nil {
		t.Fatal(err)
	}
	return x
}

// sameExceptHead checks that out holds src's metadata (plus
// general.quantization_version if src has none) and every tensor of src in
// its type and bytes, except head, which must be in headType.
func sameExceptHead(t *testing.T, src, out *gguf.File, head string, headType dtype.Type) {
	t.Helper()
	if len(out.Tensors) != len(src.Tensors) {
		t.Fatalf("%d tensors; the source has %d", len(out.Tensors), len(src.Tensors))
	}
	for i, ts := range src.Tensors {
		to := out.Tensors[i]
		switch {
		case to.Name != ts.Name || !reflect.DeepEqual(to.Shape, ts.Shape):
			t.Errorf("tensor %d: %s %v; the source has %s %v", i, to.Name, to.Shape, ts.Name, ts.Shape)
		case to.Name == head && to.Type != headType:
			t.Errorf("LM head %s is %v; want %v", head, to.Type, headType)
		case to.Name != head && (to.Type != ts.Type || !bytes.Equal(to.Data, ts.Data)):
			t.Errorf("tensor %s changed (%v → %v)", ts.Name, ts.Type, to.Type)
		}
	}
	// general.quantization_version is added when the source lacks it
	if extra := len(out.KV) - len(src.KV); extra != 0 && (extra != 1 || src.Has("general.quantization_version")) {
		t.Errorf("%d metadata keys; the source has %d", len(out.KV), len(src.KV))
	}
	for _, kv := range src.KV {
		if v, ok := out.Value(kv.Key); !ok || !reflect.DeepEqual(v, kv.Value) {
			t.Errorf("metadata %s = %v; the source has %v", kv.Key, v, kv.Value)
		}
	}
}

// TestKeepHeadType: the recipe keep with a head type re-encodes the LM head
// alone — every other tensor and all metadata (general.file_type too) as in
// the source GGUF — and the head's bytes are the numpy reference's blocks
// of the source head's values (Q8_0, Q4_0, Q5_0), or dtype.Quantize's for the
// types the reference does not cover; the file loads and generates. Without a
// head type, keep copies every tensor.
func TestKeepHeadType(t *testing.T) {
	for _, tc := range []struct {
		src  string // testdata/models/<src>.gguf
		head string // its LM head
		typ  dtype.Type
	}{
		{"tiny-qwen2-q4_0", "output.weight", dtype.Q5_0},
		{"tiny-qwen2-q4_0", "output.weight", dtype.Q8_0},
		{"tiny-qwen3k-kmix", "token_embd.weight", dtype.Q4_0}, // tied: the embedding is the head
		{"tiny-qwen3k-kmix", "token_embd.weight", dtype.Q4_K},
		{"tiny-qwen3k-kmix", "token_embd.weight", dtype.Q6_K},
	} {
		t.Run(tc.src+"/"+tc.typ.String(), func(t *testing.T) {
			srcPath := filepath.Join(modelsDir, tc.src+".gguf")
			typ := tc.typ
			outPath, err := prepareHead(t, srcPath, Keep, &typ)
			if err != nil {
				t.Fatal(err)
			}
			src, out := openFile(t, srcPath), openFile(t, outPath)
			sameExceptHead(t, src, out, tc.head, tc.typ)
			sh, _ := src.Tensor(tc.head)
			oh, _ := out.Tensor(tc.head)
			x := dequantized(t, sh)
			var want []byte
			switch tc.typ {
			case dtype.Q8_0, dtype.Q4_0, dtype.Q5_0:
				want = numpyQuantize(t, tc.typ, x)
			default:
				if want, err = dtype.Quantize(tc.typ, nil, x); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(oh.Data, want) {
				t.Errorf("LM head bytes (%d) differ from the reference encoding (%d bytes) of the source head", len(oh.Data), len(want))
			}
			m := load(t, outPath)
			if ids, err := m.Generate([]int{1, 2, 3}, 4); err != nil || len(ids) != 4 {
				t.Errorf("generate with a %v head: %v, %v", tc.typ, ids, err)
			}
		})
	}
	t.Run("no head type", func(t *testing.T) {
		srcPath := filepath.Join(modelsDir, "tiny-qwen3k-kmix.gguf")
		outPath, err := prepareHead(t, srcPath, Keep, nil)
		if err != nil {
			t.Fatal(err)
		}
		src, out := openFile(t, srcPath), openFile(t, outPath)
		sh, _ := src.Tensor("token_embd.weight")
		sameExceptHead(t, src, out, "token_embd.weight", sh.Type)
		if oh, _ := out.Tensor("token_embd.weight"); !bytes.Equal(oh.Data, sh.Data) {
			t.Error("keep without a head type changed the LM head")
		}
	})
}

// TestRecipeHeadType: a recipe with a head type gives the head that type and
// every other matrix the recipe's; Auto's sizes count the head type.
func TestRecipeHeadType(t *testing.T) {
	src := filepath.Join(modelsDir, "tiny-qwen2-bf16")
	q80, _ := Lookup("q8_0")
	typ := dtype.Q4_0
	path, err := prepareHead(t, src, q80, &typ)
	if err != nil {
		t.Fatal(err)
	}
	f := openFile(t, path)
	for _, ti := range f.Tensors {
		want := dtype.Q8_0
		switch {
		case len(ti.Shape) < 2:
			want = dtype.F32
		case ti.Name == "output.weight":
			want = dtype.Q4_0
		}
		if ti.Type != want {
			t.Errorf("%s is %v; want %v", ti.Name, ti.Type, want)
		}
	}
	if ft, err := f.Uint("general.file_type"); err != nil || ft != 7 {
		t.Errorf("general.file_type = %d (%v); want 7 (the recipe's)", ft, err)
	}
	s, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	plain, err := s.Layout(q80, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Auto(plain.Bytes-1, Options{HeadType: &typ})
	if err != nil || o.Recipe.Name != "q8_0" {
		t.Errorf("Auto under q8_0's size with a Q4_0 head: %v, %v; want q8_0 (its head is smaller)", o, err)
	}
}

// TestHeadTypeErrors: a head type whose blocks do not divide the head's rows
// names the types that do; keep needs a GGUF source; a type that is no head
// type is refused.
func TestHeadTypeErrors(t *testing.T) {
	typ := dtype.Q4_K
	_, err := prepareHead(t, filepath.Join(modelsDir, "tiny-qwen2-q4_0.gguf"), Keep, &typ)
	if err == nil || !strings.Contains(err.Error(), "rows of 64") || !strings.Contains(err.Error(), "q8_0, q5_1, q5_0, q4_1, q4_0") {
		t.Errorf("Q4_K head on rows of 64: %v; want an error naming the rows and the types that fit", err)
	}
	_, err = prepareHead(t, filepath.Join(modelsDir, "tiny-qwen2-bf16"), Keep, nil)
	if err == nil || !strings.Contains(err.Error(), "GGUF") {
		t.Errorf("keep on an HF directory: %v; want an error saying it needs a GGUF source", err)
	}
	f32 := dtype.F32
	if _, err := prepareHead(t, filepath.Join(modelsDir, "tiny-qwen2-q4_0.gguf"), Keep, &f32); err == nil {
		t.Error("F32 head type accepted")
	}
	for _, name := range []string{"q4_0", "Q5_0", "q6_k", "q8_0"} {
		if _, err := ParseHeadType(name); err != nil {
			t.Errorf("ParseHeadType(%q): %v", name, err)
		}
	}
	for _, name := range []string{"f16", "q2_k", "q9", ""} {
		if _, err := ParseHeadType(name); err == nil || !strings.Contains(err.Error(), "q4_0") {
			t.Errorf("ParseHeadType(%q): %v; want an error listing the head types", name, err)
		}
	}
}

// TestAutoKeepsGGUF: --quant auto on a GGUF that fits the budget keeps it as
// it is (the recipe keep: every tensor's type and bytes), rather than
// re-encoding it into a recipe — for a file of Q5_0/Q4_1/K-quant weights
// that was f32 or q8_0, a larger file with no better weights and a slower
// decode pass. Below the file's own size auto falls back to the recipes.
func TestAutoKeepsGGUF(t *testing.T) {
	path := filepath.Join(modelsDir, "tiny-qwen3k-kmix.gguf")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keep, err := s.Layout(Keep, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Auto(1<<40, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Recipe.Name != "keep" || o.Bytes != keep.Bytes {
		t.Fatalf("auto chose %s (%d bytes); want keep (%d bytes)", o.Recipe.Name, o.Bytes, keep.Bytes)
	}
	out := filepath.Join(t.TempDir(), "auto.gguf")
	if err := o.Write(out); err != nil {
		t.Fatal(err)
	}
	sameExceptHead(t, openFile(t, path), openFile(t, out), "", 0)
	o, err = s.Auto(keep.Bytes-1, Options{})
	if err != nil || o.Recipe.Name == "keep" || o.Bytes > keep.Bytes-1 {
		t.Errorf("auto under the file's size: %v, %v; want a recipe that fits", o, err)
	}
}
