package model

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/safetensors"
)

// TestFP8BlockDequant writes a (4, 4) F8_E4M3 weight with (2, 2) block
// scales (blocks of 2×2) and checks the f32 the loader makes of it against
// hand-decoded E4M3 values (OCP FP8: bias 7, 3 mantissa bits).
func TestFP8BlockDequant(t *testing.T) {
	codes := []byte{ // (4, 4)
		0x38, 0x40, 0x3c, 0x01, // 1, 2, 1.5, 2^-9 (subnormal)
		0xc0, 0x00, 0x7e, 0x30, // -2, 0, 448, 0.5
		0x38, 0x38, 0x38, 0x38,
		0x44, 0xb8, 0x39, 0x08, // 3, -1, 1.125, 2^-6
	}
	decoded := []float32{
		1, 2, 1.5, 1.0 / 512,
		-2, 0, 448, 0.5,
		1, 1, 1, 1,
		3, -1, 1.125, 1.0 / 64,
	}
	scales := []float32{0.5, 2, 4, 0.25} // (2, 2)
	var sb []byte
	for _, v := range scales {
		sb = binary.LittleEndian.AppendUint32(sb, math.Float32bits(v))
	}
	dir := t.TempDir()
	err := safetensors.Write(filepath.Join(dir, "model.safetensors"), []safetensors.Tensor{
		{Name: "w.weight", DType: "F8_E4M3", Shape: []int64{4, 4}, Data: codes},
		{Name: "w.weight_scale_inv", DType: "F32", Shape: []int64{2, 2}, Data: sb},
		{Name: "v.weight", DType: "F8_E4M3", Shape: []int64{4, 4}, Data: codes},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	src := &hfSource{dir: d, p: dir}
	got, ok, err := src.tensor("w.weight")
	if err != nil || !ok {
		t.Fatalf("lookup: %v %v", ok, err)
	}
	if got.typ != dtype.F32 || len(got.shape) != 2 || got.shape[0] != 4 || got.shape[1] != 4 {
		t.Fatalf("have %v %v; want F32 [4 4]", got.typ, got.shape)
	}
	have := make([]float32, 16)
	if err := dtype.Dequantize(dtype.F32, have, got.data); err != nil {
		t.Fatal(err)
	}
	for i, want := range decoded {
		want *= scales[(i/4/2)*2+(i%4)/2]
		if have[i] != want {
			t.Errorf("w[%d][%d]: have %g; want %g", i/4, i%4, have[i], want)
		}
	}
	if _, _, err := src.tensor("v.weight"); err == nil {
		t.Error("FP8 weight without weight_scale_inv: want an error")
	}
}
