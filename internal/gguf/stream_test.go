package gguf

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// TestAddTensorFunc: tensors produced while writing give the same file as
// the same bytes added up front, Size predicts its length exactly, and an
// error from a fill function aborts the write.
func TestAddTensorFunc(t *testing.T) {
	a := []byte{1, 2, 3, 4, 5, 6, 7, 8}                   // (2) f32
	b := bytes.Repeat([]byte{9}, 2*34)                    // (64) q8_0
	c := []byte{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 1, 2} // (4) f16
	mk := func(stream bool) *Writer {
		w := NewWriter()
		if err := w.Add("general.architecture", "qwen3"); err != nil {
			t.Fatal(err)
		}
		add := func(name string, typ dtype.Type, shape []uint64, data []byte) {
			var err error
			if stream {
				err = w.AddTensorFunc(name, typ, shape, func(dst []byte) error {
					if len(dst) != len(data) {
						t.Errorf("%s: fill got %d bytes; want %d", name, len(dst), len(data))
					}
					copy(dst, data)
					return nil
				})
			} else {
				err = w.AddTensor(name, typ, shape, data)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		add("a", dtype.F32, []uint64{2}, a)
		add("b", dtype.Q8_0, []uint64{64}, b)
		add("c", dtype.F16, []uint64{4}, c)
		return w
	}
	var want, have bytes.Buffer
	if _, err := mk(false).WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	ws := mk(true)
	if _, err := ws.WriteTo(&have); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have.Bytes(), want.Bytes()) {
		t.Error("streamed file differs from the one built from bytes")
	}
	if ws.Size() != int64(want.Len()) {
		t.Errorf("Size() = %d; the file has %d bytes", ws.Size(), want.Len())
	}
	path := filepath.Join(t.TempDir(), "s.gguf")
	if err := ws.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ti, ok := f.Tensor("b"); !ok || !bytes.Equal(ti.Data, b) {
		t.Error("tensor b did not read back")
	}
	boom := errors.New("boom")
	w := NewWriter()
	w.AddTensorFunc("x", dtype.F32, []uint64{1}, func([]byte) error { return boom })
	if _, err := w.WriteTo(&bytes.Buffer{}); !errors.Is(err, boom) {
		t.Errorf("fill error: have %v; want boom", err)
	}
}
