// gguf_test.go tests the GGUF reader and writer: round trips of every value
// type, accessor errors, malformed-file errors and zero-copy opening. It is
// not a llama.cpp compatibility test (there is no llama.cpp here); layout is
// checked against the byte layout gguf-py writes.

package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/draftd/draftd/internal/dtype"
)

// allValues has one entry per supported Go value type, in a fixed order.
var allValues = []KV{
	{"general.architecture", "qwen3"},
	{"u8", uint8(200)},
	{"i8", int8(-100)},
	{"u16", uint16(60000)},
	{"i16", int16(-30000)},
	{"u32", uint32(4000000000)},
	{"i32", int32(-2000000000)},
	{"u64", uint64(math.MaxUint64)},
	{"i64", int64(math.MinInt64)},
	{"f32", float32(1.5)},
	{"f64", math.Pi},
	{"bool.t", true},
	{"bool.f", false},
	{"empty.string", ""},
	{"unicode", "héllo, 世界"},
	{"a.u8", []uint8{1, 2, 255}},
	{"a.i8", []int8{-1, 0, 127}},
	{"a.u16", []uint16{1, 65535}},
	{"a.i16", []int16{-32768, 7}},
	{"a.u32", []uint32{0, 1 << 31}},
	{"a.i32", []int32{-5, 5}},
	{"a.u64", []uint64{0, math.MaxUint64}},
	{"a.i64", []int64{math.MinInt64, 3}},
	{"a.f32", []float32{0.25, -1e30}},
	{"a.f64", []float64{1e300, -0.5}},
	{"a.bool", []bool{true, false, true}},
	{"a.string", []string{"<|im_start|>", "", "Ġthe"}},
	{"a.empty", []int32{}},
	{"a.nested", []any{[]int32{1, 2}, []int32{}, []int32{3}}},
	{"a.nested.strings", []any{[]string{"a"}, []string{"b", "c"}}},
	{"a.nested2", []any{[]any{[]uint8{1}}, []any{[]uint8{}}}},
	{"a.nested.mixed", []any{[]int32{1}, []string{"x"}}}, // inner arrays are typed independently
}

type testTensor struct {
	name  string
	typ   dtype.Type
	shape []uint64
	data  []byte
}

func seq(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

var testTensors = []testTensor{
	{"token_embd.weight", dtype.F32, []uint64{8, 3}, seq(8*3*4, 1)},
	{"blk.0.attn_q.weight", dtype.Q8_0, []uint64{64, 2}, seq(2*2*34, 2)},
	{"blk.0.attn_k.weight", dtype.Q4_0, []uint64{32, 3}, seq(3*18, 3)},
	{"blk.0.attn_norm.weight", dtype.BF16, []uint64{5}, seq(10, 4)},
	{"blk.0.ffn_up.weight", dtype.F16, []uint64{3, 1, 1, 2}, seq(12, 5)},
	{"q4k", 12, []uint64{256, 1}, seq(144, 6)}, // Q4_K: not computable by draftd, still parsed
	{"empty", dtype.F32, []uint64{0}, nil},
}

func buildWriter(t testing.TB, kvs []KV, tensors []testTensor) *Writer {
	t.Helper()
	w := NewWriter()
	for _, kv := range kvs {
		if err := w.Add(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range tensors {
		if err := w.AddTensor(tt.name, tt.typ, tt.shape, tt.data); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func encode(t testing.TB, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d; wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

func checkFile(t *testing.T, f *File, kvs []KV, tensors []testTensor, align uint64) {
	t.Helper()
	if f.Version != 3 {
		t.Errorf("version: have %d; want 3", f.Version)
	}
	if f.Alignment != align {
		t.Errorf("alignment: have %d; want %d", f.Alignment, align)
	}
	if f.DataOffset%align != 0 {
		t.Errorf("data offset %d not aligned to %d", f.DataOffset, align)
	}
	if !reflect.DeepEqual(f.KV, kvs) {
		t.Errorf("metadata mismatch:\nhave %#v\nwant %#v", f.KV, kvs)
	}
	if len(f.Tensors) != len(tensors) {
		t.Fatalf("tensor count: have %d; want %d", len(f.Tensors), len(tensors))
	}
	for i, tt := range tensors {
		ti := f.Tensors[i]
		if ti.Name != tt.name || ti.Type != tt.typ || !reflect.DeepEqual(ti.Shape, tt.shape) {
			t.Errorf("tensor %d: have %s %v %v; want %s %v %v", i, ti.Name, ti.Type, ti.Shape, tt.name, tt.typ, tt.shape)
		}
		if !bytes.Equal(ti.Data, tt.data) || len(ti.Data) != len(tt.data) {
			t.Errorf("tensor %s: data differs", tt.name)
		}
		if ti.Offset%align != 0 {
			t.Errorf("tensor %s: offset %d not aligned", tt.name, ti.Offset)
		}
		if p, ok := f.Tensor(tt.name); !ok || p != &f.Tensors[i] {
			t.Errorf("Tensor(%q) lookup failed", tt.name)
		}
	}
	if _, ok := f.Tensor("nope"); ok {
		t.Error("Tensor(nope) found")
	}
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []int{32, 64, 1, 256} {
		w := buildWriter(t, allValues, testTensors)
		if err := w.SetAlignment(align); err != nil {
			t.Fatal(err)
		}
		want := allValues
		if align != DefaultAlignment {
			want = append(append([]KV{}, allValues...), KV{AlignmentKey, uint32(align)})
		}
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := w.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, f, want, testTensors, uint64(align))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// Parse of the same bytes agrees.
		raw, _ := os.ReadFile(path)
		g, err := Parse("mem", raw)
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, g, want, testTensors, uint64(align))
		if got := encode(t, w); !bytes.Equal(got, raw) {
			t.Error("WriteTo and WriteFile differ")
		}
	}
}

// TestLayout checks the exact bytes of a tiny file against the layout
// gguf-py's GGUFWriter produces.
func TestLayout(t *testing.T) {
	w := NewWriter()
	w.Add("k", uint32(7))
	w.AddTensor("t", dtype.F32, []uint64{1}, []byte{1, 2, 3, 4})
	w.AddTensor("u", dtype.F32, []uint64{2}, []byte{5, 6, 7, 8, 9, 10, 11, 12})
	got := encode(t, w)
	var want bytes.Buffer
	le := binary.LittleEndian
	want.WriteString("GGUF")
	binary.Write(&want, le, uint32(3))
	binary.Write(&want, le, uint64(2))
	binary.Write(&want, le, uint64(1))
	binary.Write(&want, le, uint64(1))
	want.WriteString("k")
	binary.Write(&want, le, uint32(TypeUint32))
	binary.Write(&want, le, uint32(7))
	for i, name := range []string{"t", "u"} {
		binary.Write(&want, le, uint64(1))
		want.WriteString(name)
		binary.Write(&want, le, uint32(1))
		binary.Write(&want, le, uint64(i+1))
		binary.Write(&want, le, uint32(0))
		binary.Write(&want, le, uint64(32*i))
	}
	for want.Len()%32 != 0 {
		want.WriteByte(0)
	}
	want.Write([]byte{1, 2, 3, 4})
	want.Write(make([]byte, 28))
	want.Write([]byte{5, 6, 7, 8, 9, 10, 11, 12})
	want.Write(make([]byte, 24))
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("layout:\nhave %x\nwant %x", got, want.Bytes())
	}
}

func TestAccessors(t *testing.T) {
	f, err := Parse("acc.gguf", encode(t, buildWriter(t, allValues, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := f.String("general.architecture"); err != nil || s != "qwen3" {
		t.Errorf("String: have %q, %v", s, err)
	}
	if u, err := f.Uint("u32"); err != nil || u != 4000000000 {
		t.Errorf("Uint(u32): have %d, %v", u, err)
	}
	if u, err := f.Uint("u64"); err != nil || u != math.MaxUint64 {
		t.Errorf("Uint(u64): have %d, %v", u, err)
	}
	if u, err := f.Uint("u8"); err != nil || u != 200 {
		t.Errorf("Uint(u8): have %d, %v", u, err)
	}
	if i, err := f.Int("i8"); err != nil || i != -100 {
		t.Errorf("Int(i8): have %d, %v", i, err)
	}
	if x, err := f.Float("f32"); err != nil || x != 1.5 {
		t.Errorf("Float(f32): have %v, %v", x, err)
	}
	if x, err := f.Float("i16"); err != nil || x != -30000 {
		t.Errorf("Float(i16): have %v, %v", x, err)
	}
	if b, err := f.Bool("bool.t"); err != nil || !b {
		t.Errorf("Bool: have %v, %v", b, err)
	}
	if s, err := f.Strings("a.string"); err != nil || len(s) != 3 || s[2] != "Ġthe" {
		t.Errorf("Strings: have %q, %v", s, err)
	}
	if is, err := f.Ints("a.i32"); err != nil || !reflect.DeepEqual(is, []int64{-5, 5}) {
		t.Errorf("Ints(i32): have %v, %v", is, err)
	}
	if is, err := f.Ints("a.u8"); err != nil || !reflect.DeepEqual(is, []int64{1, 2, 255}) {
		t.Errorf("Ints(u8): have %v, %v", is, err)
	}
	if xs, err := f.Floats("a.f32"); err != nil || !reflect.DeepEqual(xs, []float64{0.25, float64(float32(-1e30))}) {
		t.Errorf("Floats(f32): have %v, %v", xs, err)
	}
	if xs, err := f.Floats("a.i16"); err != nil || !reflect.DeepEqual(xs, []float64{-32768, 7}) {
		t.Errorf("Floats(i16): have %v, %v", xs, err)
	}
	if !f.Has("u8") || f.Has("nope") {
		t.Error("Has")
	}

	errCases := []struct {
		name string
		call func() error
		want []string
	}{
		{"missing", func() error { _, err := f.String("nope"); return err }, []string{"acc.gguf", `"nope"`, "not found"}},
		{"string wrong type", func() error { _, err := f.String("u8"); return err }, []string{"acc.gguf", `"u8"`, "uint8", "want string"}},
		{"uint negative", func() error { _, err := f.Uint("i8"); return err }, []string{`"i8"`, "-100", "non-negative"}},
		{"uint of float", func() error { _, err := f.Uint("f32"); return err }, []string{`"f32"`, "float32"}},
		{"int too big", func() error { _, err := f.Int("u64"); return err }, []string{`"u64"`, "too large"}},
		{"float of string", func() error { _, err := f.Float("unicode"); return err }, []string{`"unicode"`, "string", "number"}},
		{"bool wrong", func() error { _, err := f.Bool("u8"); return err }, []string{`"u8"`, "want bool"}},
		{"strings wrong", func() error { _, err := f.Strings("a.i32"); return err }, []string{`"a.i32"`, "array of int32"}},
		{"ints of floats", func() error { _, err := f.Ints("a.f32"); return err }, []string{`"a.f32"`, "array of float32"}},
		{"ints overflow", func() error { _, err := f.Ints("a.u64"); return err }, []string{`"a.u64"`, "too large"}},
		{"floats of strings", func() error { _, err := f.Floats("a.string"); return err }, []string{`"a.string"`, "array of string"}},
		{"ints of nested", func() error { _, err := f.Ints("a.nested"); return err }, []string{"array of arrays"}},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("have nil error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("have %q; want it to mention %q", err, w)
				}
			}
		})
	}
	if _, err := f.Int("missing"); !errors.Is(err, ErrKeyNotFound) {
		t.Errorf("missing key: have %v; want ErrKeyNotFound", err)
	}
}

func TestWriterErrors(t *testing.T) {
	cases := []struct {
		name string
		do   func(w *Writer) error
		want string
	}{
		{"int", func(w *Writer) error { return w.Add("k", 5) }, "unsupported value type int"},
		{"map", func(w *Writer) error { return w.Add("k", map[string]int{}) }, "unsupported value type"},
		{"dup key", func(w *Writer) error { w.Add("k", true); return w.Add("k", false) }, "duplicate metadata key"},
		{"mixed", func(w *Writer) error { return w.Add("k", []any{uint8(1), "x"}) }, "mixes"},
		{"any of int", func(w *Writer) error { return w.Add("k", []any{1}) }, "unsupported value type int"},
		{"empty key", func(w *Writer) error { return w.Add("", true) }, "empty metadata key"},
		{"bad alignment", func(w *Writer) error { return w.SetAlignment(48) }, "power of two"},
		{"alignment type", func(w *Writer) error { return w.Add(AlignmentKey, uint64(64)) }, "uint32 power of two"},
		{"size", func(w *Writer) error { return w.AddTensor("t", dtype.F32, []uint64{4}, make([]byte, 15)) }, "has 15 bytes of data; want 16"},
		{"block", func(w *Writer) error { return w.AddTensor("t", dtype.Q8_0, []uint64{31}, make([]byte, 34)) }, "not a multiple"},
		{"dup tensor", func(w *Writer) error {
			w.AddTensor("t", dtype.F32, []uint64{1}, make([]byte, 4))
			return w.AddTensor("t", dtype.F32, []uint64{1}, make([]byte, 4))
		}, "duplicate tensor"},
		{"dims", func(w *Writer) error { return w.AddTensor("t", dtype.F32, []uint64{1, 1, 1, 1, 1}, make([]byte, 4)) }, "dimensions"},
		{"long name", func(w *Writer) error {
			return w.AddTensor(strings.Repeat("x", 64), dtype.F32, []uint64{1}, make([]byte, 4))
		}, "at most 63"},
		{"unknown type", func(w *Writer) error { return w.AddTensor("t", 99, []uint64{1}, make([]byte, 4)) }, "unknown ggml tensor type 99"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(NewWriter())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("have %v; want error containing %q", err, tc.want)
			}
		})
	}
}

// hdr assembles raw GGUF bytes for malformed-input tests.
type hdr struct{ bytes.Buffer }

func (h *hdr) u32(v uint32) *hdr { binary.Write(h, binary.LittleEndian, v); return h }
func (h *hdr) u64(v uint64) *hdr { binary.Write(h, binary.LittleEndian, v); return h }
func (h *hdr) str(s string) *hdr { h.u64(uint64(len(s))); h.WriteString(s); return h }
func (h *hdr) start(nt, nkv uint64) *hdr {
	h.WriteString("GGUF")
	return h.u32(3).u64(nt).u64(nkv)
}
func (h *hdr) tensor(name string, typ uint32, off uint64, shape ...uint64) *hdr {
	h.str(name).u32(uint32(len(shape)))
	for _, d := range shape {
		h.u64(d)
	}
	return h.u32(typ).u64(off)
}
func (h *hdr) pad(n int) *hdr {
	for h.Len()%32 != 0 {
		h.WriteByte(0)
	}
	h.Write(make([]byte, n))
	return h
}

func TestParseErrors(t *testing.T) {
	valid := encode(t, buildWriter(t, allValues, testTensors))
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"bad magic", []byte("GGML\x03\x00\x00\x00"), "bad magic"},
		{"version 1", append([]byte("GGUF"), 1, 0, 0, 0, 0, 0, 0, 0), "unsupported GGUF version 1"},
		{"unsupported version", append([]byte("GGUF"), 9, 0, 0, 0), "unsupported GGUF version 9"},
		{"big endian", append([]byte("GGUF"), 0, 0, 0, 3), "big-endian"},
		{"truncated header", []byte("GGUF\x03\x00\x00\x00\x01\x00"), "truncated: tensor count"},
		{"absurd kv count", new(hdr).start(0, 1<<60).Bytes(), "metadata entries cannot fit"},
		{"absurd tensor count", new(hdr).start(1<<40, 0).Bytes(), "tensor infos cannot fit"},
		{"string past end", new(hdr).start(0, 1).u64(1 << 40).pad(32).Bytes(), "string length 1099511627776 runs past the end"},
		{"unknown value type", new(hdr).start(0, 1).str("k").u32(13).u32(0).Bytes(), `value of "k": unknown value type 13`},
		{"unknown array type", new(hdr).start(0, 1).str("k").u32(9).u32(77).u64(1).Bytes(), "unknown array element type 77"},
		{"absurd array", new(hdr).start(0, 1).str("k").u32(9).u32(uint32(TypeUint32)).u64(1 << 50).Bytes(), `elements of "k" cannot fit`},
		{"absurd string array", new(hdr).start(0, 1).str("k").u32(9).u32(uint32(TypeString)).u64(1 << 20).u64(0).Bytes(), "cannot fit"},
		{"truncated value", new(hdr).start(0, 1).str("k").u32(uint32(TypeUint64)).u32(0).Bytes(), `truncated: value of "k" needs 8 bytes`},
		{"duplicate key", new(hdr).start(0, 2).str("k").u32(4).u32(0).str("k").u32(4).u32(0).Bytes(), `duplicate metadata key "k"`},
		{"empty key", new(hdr).start(0, 1).str("").u32(4).u32(0).Bytes(), "metadata key 0 is empty"},
		{"bad alignment", new(hdr).start(0, 1).str(AlignmentKey).u32(uint32(TypeUint32)).u32(48).Bytes(), "general.alignment is 48"},
		{"alignment zero", new(hdr).start(0, 1).str(AlignmentKey).u32(uint32(TypeUint32)).u32(0).Bytes(), "want a power of two"},
		{"too many dims", new(hdr).start(1, 0).tensor("t", 0, 0, 1, 1, 1, 1, 1).Bytes(), `tensor "t" has 5 dimensions`},
		{"unknown tensor type", new(hdr).start(1, 0).tensor("t", 99, 0, 4).pad(16).Bytes(), "unknown ggml type 99"},
		{"shape overflow", new(hdr).start(1, 0).tensor("t", 0, 0, 1<<32, 1<<32).pad(0).Bytes(), "overflows"},
		{"dim over int64", new(hdr).start(1, 0).tensor("t", 0, 0, 1<<63).pad(0).Bytes(), "exceeds int64"},
		{"size overflow", new(hdr).start(1, 0).tensor("t", 0, 0, 1<<62).pad(0).Bytes(), "overflows"},
		{"block mismatch", new(hdr).start(1, 0).tensor("t", 8, 0, 33).pad(64).Bytes(), "not a multiple of the Q8_0 block size 32"},
		{"misaligned", new(hdr).start(1, 0).tensor("t", 0, 4, 1).pad(64).Bytes(), `tensor "t" offset 4 is not a multiple of the alignment 32`},
		{"data past end", new(hdr).start(1, 0).tensor("t", 0, 0, 16).pad(63).Bytes(), `tensor "t" data`},
		{"offset past end", new(hdr).start(1, 0).tensor("t", 0, 1<<40, 1).pad(64).Bytes(), "outside"},
		{"offset wraps", new(hdr).start(1, 0).tensor("t", 0, math.MaxUint64-31, 8).pad(64).Bytes(), "outside"},
		{"duplicate tensor", new(hdr).start(2, 0).tensor("t", 0, 0, 1).tensor("t", 0, 32, 1).pad(64).Bytes(), `duplicate tensor name "t"`},
		{"empty tensor name", new(hdr).start(1, 0).tensor("", 0, 0, 1).pad(64).Bytes(), "tensor 0 has an empty name"},
		{"overlap", new(hdr).start(2, 0).tensor("a", 0, 0, 16).tensor("b", 0, 32, 1).pad(64).Bytes(), `overlaps tensor "a"`},
		{"nested too deep", nested(20), "nested deeper"},
		{"truncated tensor info", new(hdr).start(1, 0).str("t").u32(2).u64(4).u64(4).Bytes(), `truncated: tensor "t" type`},
		{"truncated valid", valid[:len(valid)-1], "outside"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("bad.gguf", tc.data)
			if err == nil {
				t.Fatalf("have file with %d tensors; want error containing %q", len(f.Tensors), tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.gguf") {
				t.Errorf("have %q; want it to name the file and contain %q", err, tc.want)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
		})
	}
}

// nested encodes a metadata value of depth arrays of arrays.
func nested(depth int) []byte {
	h := new(hdr).start(0, 1).str("k").u32(uint32(TypeArray))
	for range depth {
		h.u32(uint32(TypeArray)).u64(1)
	}
	h.u32(0).u64(0)
	return h.Bytes()
}

func TestParseVersion2AndNoTensors(t *testing.T) {
	h := new(hdr)
	h.WriteString("GGUF")
	h.u32(2).u64(0).u64(1).str("a").u32(uint32(TypeBool)).WriteByte(1)
	f, err := Parse("v2", h.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || len(f.KV) != 1 || f.KV[0].Value != true {
		t.Errorf("have %+v", f)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.gguf")); err == nil || !strings.Contains(err.Error(), "missing.gguf") {
		t.Errorf("missing file: have %v", err)
	}
	empty := filepath.Join(dir, "empty.gguf")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Open(empty); err == nil || !strings.Contains(err.Error(), "empty.gguf") || !strings.Contains(err.Error(), "too short") {
		t.Errorf("empty file: have %v", err)
	}
}

// writeSparse writes a GGUF file holding one F32 tensor of n bytes whose data
// is a hole, so the file is large but costs no disk or memory.
func writeSparse(t testing.TB, path string, n uint64) {
	h := new(hdr).start(1, 0).tensor("big", 0, 0, n/4).pad(0)
	fd, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.Write(h.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := fd.Truncate(int64(uint64(h.Len()) + n)); err != nil {
		t.Fatal(err)
	}
}

// TestOpenNoCopy opens a 1 GiB sparse file: Open must not copy or read the
// tensor data (it allocates under 1 MiB for it) and the tensor's bytes must
// be the mapping's own, at the data offset. (No wall-clock bound: a read is
// caught by the allocation and the address; the time is BenchmarkOpen1GiB's.)
func TestOpenNoCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.gguf")
	const n = 1 << 30
	writeSparse(t, path, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	defer f.Close()
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("Open of 1 GiB allocated %d bytes; want a mapping, not a copy", alloc)
	}
	ti, _ := f.Tensor("big")
	if len(ti.Data) != n {
		t.Fatalf("data length %d; want %d", len(ti.Data), n)
	}
	if f.mapping == nil {
		t.Skip("no mmap on this platform")
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(f.mapping)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(ti.Data)))
	if p != base+uintptr(f.DataOffset) {
		t.Errorf("tensor data at %#x; want mapping %#x + %d", p, base, f.DataOffset)
	}
	if ti.Data[n-1] != 0 {
		t.Error("hole reads non-zero")
	}
}

func BenchmarkOpen1GiB(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.gguf")
	writeSparse(b, path, 1<<30)
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// An empty []any has no element type to record; it is written as an empty
// uint8 array, as gguf-py does, and reads back as []uint8{}.
func TestEmptyAnyArray(t *testing.T) {
	f, err := Parse("e", encode(t, buildWriter(t, []KV{{"k", []any{}}}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Value("k"); !reflect.DeepEqual(v, []uint8{}) {
		t.Errorf("have %#v; want []uint8{}", v)
	}
}
