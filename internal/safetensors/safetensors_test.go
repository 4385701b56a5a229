// safetensors_test.go tests the safetensors reader and writer: round trips of
// files and sharded directories, directory discovery, and malformed-input
// errors. It is not a test against files written by Python (none are
// shipped); the byte layout is checked directly instead.

package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func seq(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13) + seed
	}
	return b
}

var testTensors = []Tensor{
	{Name: "model.embed_tokens.weight", DType: "BF16", Shape: []int64{4, 8}, Data: seq(64, 1)},
	{Name: "model.layers.0.self_attn.q_proj.weight", DType: "F32", Shape: []int64{3, 2}, Data: seq(24, 2)},
	{Name: "model.layers.0.self_attn.q_proj.weight_scale_inv", DType: "F32", Shape: []int64{1, 1}, Data: seq(4, 3)},
	{Name: "fp8", DType: "F8_E4M3", Shape: []int64{3, 5}, Data: seq(15, 4)},
	{Name: "scalar", DType: "F16", Shape: []int64{}, Data: seq(2, 5)},
	{Name: "empty", DType: "F32", Shape: []int64{0, 4}, Data: []byte{}},
	{Name: "i64", DType: "I64", Shape: []int64{2}, Data: seq(16, 6)},
}

func checkTensors(t *testing.T, got []Tensor, want []Tensor, file string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("have %d tensors; want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || g.DType != w.DType || !reflect.DeepEqual(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) || len(g.Data) != len(w.Data) {
			t.Errorf("tensor %d: have %s %s %v (%d bytes); want %s %s %v (%d bytes)", i, g.Name, g.DType, g.Shape, len(g.Data), w.Name, w.DType, w.Shape, len(w.Data))
		}
		if file != "" && g.File != file {
			t.Errorf("tensor %s: File %q; want %q", g.Name, g.File, file)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	meta := map[string]string{"format": "pt", "note": `quo"te`}
	if err := Write(path, testTensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkTensors(t, f.Tensors(), testTensors, path)
	if !reflect.DeepEqual(f.Metadata, meta) {
		t.Errorf("metadata: have %v; want %v", f.Metadata, meta)
	}
	if (8+f.HeaderLen)%8 != 0 {
		t.Errorf("header length %d: data not 8-byte aligned", f.HeaderLen)
	}
	for _, w := range testTensors {
		g, ok := f.Tensor(w.Name)
		if !ok || g.Name != w.Name {
			t.Errorf("Tensor(%q) not found", w.Name)
		}
	}
	if _, ok := f.Tensor("nope"); ok {
		t.Error("Tensor(nope) found")
	}
	// Zero copy: the data points into the mapping.
	base := uintptr(unsafe.Pointer(unsafe.SliceData(f.mapping)))
	g, _ := f.Tensor("fp8")
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(g.Data))); f.mapping != nil && (p < base || p >= base+uintptr(len(f.mapping))) {
		t.Error("tensor data is not a view into the mapping")
	}
}

// TestWriteStream: the streaming writer writes the same bytes as Write, with
// a buffer of each tensor's exact size; a fill error leaves no file.
func TestWriteStream(t *testing.T) {
	dir := t.TempDir()
	meta := map[string]string{"format": "pt"}
	if err := Write(filepath.Join(dir, "a.safetensors"), testTensors, meta); err != nil {
		t.Fatal(err)
	}
	specs := make([]Tensor, len(testTensors))
	for i, tt := range testTensors {
		specs[i] = Tensor{Name: tt.Name, DType: tt.DType, Shape: tt.Shape}
	}
	err := WriteStream(filepath.Join(dir, "b.safetensors"), specs, meta, func(i int, dst []byte) error {
		if len(dst) != len(testTensors[i].Data) {
			t.Errorf("tensor %d: buffer of %d bytes; want %d", i, len(dst), len(testTensors[i].Data))
		}
		copy(dst, testTensors[i].Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.safetensors"))
	b, _ := os.ReadFile(filepath.Join(dir, "b.safetensors"))
	if !bytes.Equal(a, b) {
		t.Errorf("WriteStream wrote %d bytes differing from Write's %d", len(b), len(a))
	}
	boom := errors.New("boom")
	err = WriteStream(filepath.Join(dir, "c.safetensors"), specs, nil, func(i int, dst []byte) error {
		if i == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), testTensors[2].Name) {
		t.Errorf("have %v; want the fill error naming %s", err, testTensors[2].Name)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("after a failed write the directory holds %d entries; want 2", len(ents))
	}
}

func TestLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := Write(path, []Tensor{{Name: "a", DType: "F32", Shape: []int64{1}, Data: []byte{1, 2, 3, 4}}}, nil); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	hdr := `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	want = append(append(want, hdr...), 1, 2, 3, 4)
	if !bytes.Equal(raw, want) {
		t.Errorf("have %q\nwant %q", raw, want)
	}
}

func TestShardedDir(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSharded(dir, testTensors, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, IndexName)); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(d.Files) < 3 {
		t.Errorf("have %d shards; want several", len(d.Files))
	}
	var names []string
	for _, w := range testTensors {
		names = append(names, w.Name)
		g, ok := d.Tensor(w.Name)
		if !ok {
			t.Fatalf("Tensor(%q) missing", w.Name)
		}
		checkTensors(t, []Tensor{*g}, []Tensor{w}, "")
		if want := filepath.Join(dir, d.WeightMap[w.Name]); g.File != want {
			t.Errorf("%s in %s; index says %s", w.Name, g.File, want)
		}
	}
	slices.Sort(names)
	if !reflect.DeepEqual(d.Names(), names) {
		t.Errorf("Names: have %v; want %v", d.Names(), names)
	}

	// Rewriting as one shard removes the stale index.
	if err := WriteSharded(dir, testTensors, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, IndexName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale index left behind: %v", err)
	}
	d2, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if len(d2.Files) != 1 || filepath.Base(d2.Files[0].Path) != SingleName {
		t.Errorf("have files %v; want only %s", d2.Files, SingleName)
	}
}

func TestDirGlob(t *testing.T) {
	dir := t.TempDir()
	Write(filepath.Join(dir, "a.safetensors"), testTensors[:2], nil)
	Write(filepath.Join(dir, "b.safetensors"), testTensors[2:], nil)
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(d.Names()) != len(testTensors) {
		t.Errorf("have %d tensors; want %d", len(d.Names()), len(testTensors))
	}
}

func TestDirErrors(t *testing.T) {
	write := func(t *testing.T, dir, name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"empty dir", func(t *testing.T, dir string) {}, []string{"no model.safetensors.index.json"}},
		{"missing shard", func(t *testing.T, dir string) {
			Write(filepath.Join(dir, "s1.safetensors"), testTensors[:1], nil)
			write(t, dir, IndexName, `{"weight_map":{"model.embed_tokens.weight":"s1.safetensors","lm_head.weight":"s2.safetensors"}}`)
		}, []string{"s2.safetensors", "missing", `"lm_head.weight"`}},
		{"index too large", func(t *testing.T, dir string) {
			write(t, dir, IndexName, `{}`)
			if err := os.Truncate(filepath.Join(dir, IndexName), MaxIndexLen+1); err != nil { // sparse: no disk used
				t.Fatal(err)
			}
		}, []string{IndexName, "at most"}},
		{"missing tensor", func(t *testing.T, dir string) {
			Write(filepath.Join(dir, "s1.safetensors"), testTensors[:1], nil)
			write(t, dir, IndexName, `{"weight_map":{"model.embed_tokens.weight":"s1.safetensors","lm_head.weight":"s1.safetensors"}}`)
		}, []string{IndexName, `"lm_head.weight"`, "s1.safetensors", "does not hold it"}},
		{"wrong shard", func(t *testing.T, dir string) {
			Write(filepath.Join(dir, "s1.safetensors"), testTensors[:1], nil)
			Write(filepath.Join(dir, "s2.safetensors"), testTensors[1:2], nil)
			write(t, dir, IndexName, `{"weight_map":{"model.embed_tokens.weight":"s2.safetensors","model.layers.0.self_attn.q_proj.weight":"s1.safetensors"}}`)
		}, []string{"does not hold it"}},
		{"duplicate across shards", func(t *testing.T, dir string) {
			Write(filepath.Join(dir, "a.safetensors"), testTensors[:1], nil)
			Write(filepath.Join(dir, "b.safetensors"), testTensors[:1], nil)
		}, []string{"a.safetensors", "b.safetensors", "model.embed_tokens.weight"}},
		{"bad index json", func(t *testing.T, dir string) { write(t, dir, IndexName, `{"weight_map":`) }, []string{IndexName}},
		{"empty weight map", func(t *testing.T, dir string) { write(t, dir, IndexName, `{}`) }, []string{"no weight_map"}},
		{"escaping shard", func(t *testing.T, dir string) {
			write(t, dir, IndexName, `{"weight_map":{"x":"../x.safetensors"}}`)
		}, []string{"outside the directory"}},
		{"corrupt shard", func(t *testing.T, dir string) { write(t, dir, SingleName, "\x05\x00") }, []string{SingleName, "too short"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			d, err := OpenDir(dir)
			if err == nil {
				d.Close()
				t.Fatalf("have nil error; want one mentioning %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("have %q; want it to mention %q", err, w)
				}
			}
		})
	}
}

// file assembles raw safetensors bytes from a header string and data.
func file(hdr string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(b, hdr...), data...)
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds"},
		{"header past end", file("{}", nil)[:9], "runs past the end"},
		{"not object", file("[]", nil), "not a JSON object"},
		{"bad json", file(`{"a":`, nil), "header"},
		{"trailing", file(`{} {}`, nil), "trailing"},
		{"dup key", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{1, 2}), `duplicate header key "a"`},
		{"missing dtype", file(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, []byte{1}), `tensor "a": missing dtype`},
		{"missing shape", file(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, []byte{1}), "missing shape"},
		{"missing offsets", file(`{"a":{"dtype":"U8","shape":[1]}}`, []byte{1}), "missing data_offsets"},
		{"three offsets", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, []byte{1}), "want [begin, end]"},
		{"unknown dtype", file(`{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), `unknown dtype "Q4"`},
		{"negative dim", file(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, []byte{1}), "negative dimension"},
		{"overflow", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, []byte{1}), "overflows"},
		{"end before begin", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}}`, []byte{1}), "end before begin"},
		{"past data", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, []byte{1}), "run past the 1 bytes of data"},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 8)), "hold 4 bytes; F32 [2] needs 8"},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, make([]byte, 4)), `tensor "b": data [2, 4) overlaps tensor "a"`},
		{"overlap past empty", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"U8","shape":[0],"data_offsets":[1,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, make([]byte, 4)), "overlaps"},
		{"bad metadata", file(`{"__metadata__":{"a":1}}`, nil), "__metadata__"},
		{"empty name", file(`{"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), "empty tensor name"},
		{"entry not object", file(`{"a":5}`, nil), `tensor "a": header entry`},
		{"bad sub-byte", file(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, make([]byte, 2)), "not a whole number of bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("bad.safetensors", tc.data)
			if err == nil {
				t.Fatalf("have %d tensors; want error containing %q", len(f.Tensors()), tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.safetensors") {
				t.Errorf("have %q; want it to name the file and contain %q", err, tc.want)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("%v does not wrap ErrFormat", err)
			}
		})
	}
}

func TestParseLenient(t *testing.T) {
	// Unknown entry fields, holes between tensors and header order unlike
	// data order are accepted; Tensors() is in data order.
	f, err := Parse("ok", file(`{"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4],"extra":1},"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}  `, []byte{9, 0, 0, 7}))
	if err != nil {
		t.Fatal(err)
	}
	if ts := f.Tensors(); len(ts) != 2 || ts[0].Name != "a" || ts[1].Name != "b" || ts[1].Data[0] != 7 {
		t.Errorf("have %+v", ts)
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"size", []Tensor{{Name: "a", DType: "F32", Shape: []int64{2}, Data: make([]byte, 7)}}, "has 7 bytes of data; want 8"},
		{"dtype", []Tensor{{Name: "a", DType: "F31", Shape: []int64{2}, Data: make([]byte, 8)}}, "unknown dtype"},
		{"dup", []Tensor{{Name: "a", DType: "U8", Shape: []int64{1}, Data: []byte{1}}, {Name: "a", DType: "U8", Shape: []int64{1}, Data: []byte{1}}}, "duplicate"},
		{"reserved", []Tensor{{Name: MetadataKey, DType: "U8", Shape: []int64{1}, Data: []byte{1}}}, "invalid tensor name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(filepath.Join(dir, "x.safetensors"), tc.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("have %v; want error containing %q", err, tc.want)
			}
			err = WriteSharded(dir, tc.tensors, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("sharded: have %v; want error containing %q", err, tc.want)
			}
		})
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed writes left files: %v", ents)
	}
}

func FuzzParse(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "x.safetensors")
	if err := Write(path, testTensors, map[string]string{"format": "pt"}); err != nil {
		f.Fatal(err)
	}
	valid, _ := os.ReadFile(path)
	f.Add(valid)
	for _, n := range []int{0, 7, 8, 9, 20, len(valid) / 2, len(valid) - 1} {
		f.Add(valid[:n])
	}
	f.Add(file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, make([]byte, 4)))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		hi := lo + uintptr(len(data))
		for _, ts := range file.Tensors() {
			if len(ts.Data) == 0 {
				continue
			}
			p := uintptr(unsafe.Pointer(unsafe.SliceData(ts.Data)))
			if p < lo || p+uintptr(len(ts.Data)) > hi {
				t.Fatalf("tensor %q outside input", ts.Name)
			}
			if n, err := ByteSize(ts.DType, ts.Shape); err != nil || n != int64(len(ts.Data)) {
				t.Fatalf("tensor %q: size %d, %v; data %d", ts.Name, n, err, len(ts.Data))
			}
		}
		// What parsed can be written back and parses to the same tensors.
		if _, err := header(file.Tensors(), file.Metadata, true); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
	})
}
