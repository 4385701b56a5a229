// fuzz_test.go fuzzes Parse: any input must give a File or an error, never a
// panic, and a parsed file's tensor views must lie inside the input. It is
// not a round-trip test (see gguf_test.go).

package gguf

import (
	"bytes"
	"testing"
	"unsafe"
)

func FuzzParse(f *testing.F) {
	valid := encode(f, buildWriter(f, allValues, testTensors))
	f.Add(valid)
	for _, n := range []int{0, 3, 4, 8, 16, 24, 40, 100, len(valid) / 2, len(valid) - 1} {
		f.Add(valid[:n])
	}
	small := NewWriter()
	small.Add("general.alignment", uint32(64))
	small.AddTensor("t", 0, []uint64{2}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(encode(f, small))
	f.Add(nested(3))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			if file != nil {
				t.Fatal("file and error")
			}
			return
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		hi := lo + uintptr(len(data))
		for _, ti := range file.Tensors {
			if len(ti.Data) == 0 {
				continue
			}
			p := uintptr(unsafe.Pointer(unsafe.SliceData(ti.Data)))
			if p < lo || p+uintptr(len(ti.Data)) > hi {
				t.Fatalf("tensor %q outside input", ti.Name)
			}
		}
		// Whatever metadata parsed must be writable again, and writing is
		// idempotent: write → parse → write gives the same bytes.
		w := NewWriter()
		for _, kv := range file.KV {
			if kv.Key == AlignmentKey {
				if _, ok := kv.Value.(uint32); !ok {
					return
				}
			}
			if err := w.Add(kv.Key, kv.Value); err != nil {
				t.Fatalf("re-add %q: %v", kv.Key, err)
			}
		}
		once := encode(t, w)
		again, err := Parse("again", once)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		w2 := NewWriter()
		for _, kv := range again.KV {
			if err := w2.Add(kv.Key, kv.Value); err != nil {
				t.Fatalf("re-add %q: %v", kv.Key, err)
			}
		}
		if !bytes.Equal(encode(t, w2), once) {
			t.Fatal("write → parse → write changed the bytes")
		}
	})
}
