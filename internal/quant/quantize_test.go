package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/testenv"
)

// numpyPython is the interpreter with numpy (Debian python3-numpy), as the
// other reference scripts use it.
func numpyPython(t *testing.T) string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import numpy").Run() == nil {
			return p
		}
	}
	testenv.Skip(t, "no python3 with numpy (scripts/test installs Debian python3-numpy)")
	return ""
}

// referenceInput is a deterministic mix of blocks that exercise every
// rounding rule: normal values at scales from 1e-7 to 1e4, exact halves
// after scaling, a largest magnitude that appears with both signs (Q4_0
// keeps the first), all-zero blocks, one non-zero value, and scales that are
// f16 subnormals.
func referenceInput() []float32 {
	r := rand.New(rand.NewPCG(11, 12))
	var x []float32
	block := func(f func(j int) float32) {
		for j := range dtype.QK {
			x = append(x, f(j))
		}
	}
	for _, scale := range []float64{1e-7, 1e-5, 1e-3, 0.02, 1, 37, 1e4} {
		for range 64 {
			block(func(int) float32 { return float32(r.NormFloat64() * scale) })
		}
	}
	for range 64 { // halves: amax 127 → d = 1, x*id = k + 0.5 exactly
		block(func(j int) float32 {
			if j == 0 {
				return 127
			}
			return float32(r.IntN(252)-126) + 0.5
		})
	}
	for range 64 { // Q4_0 halves: max -8 → d = 1, x + 8.5 lands on integers and halves
		block(func(j int) float32 {
			if j == 0 {
				return -8
			}
			return float32(r.IntN(31)-15) / 2
		})
	}
	for range 64 { // Q5_0 halves: max -16 → d = 1, x + 16.5 lands on integers and halves
		block(func(j int) float32 {
			if j == 0 {
				return -16
			}
			return float32(r.IntN(63)-31) / 2
		})
	}
	block(func(int) float32 { return 0 })
	block(func(j int) float32 { return float32(j%2*2-1) * 3 }) // ±3: ties of |max|
	block(func(j int) float32 {
		if j == 7 {
			return -2.5
		}
		return 0
	})
	block(func(j int) float32 { return float32(j-16) * 1e-9 })
	return x
}

// TestQuantizeMatchesNumpy: dtype.Quantize's Q8_0, Q4_0 and Q5_0 bytes equal the
// independent numpy reference (testdata/reference/quantize_ref.py, from
// ggml's block definitions) on referenceInput.
func TestQuantizeMatchesNumpy(t *testing.T) {
	py := numpyPython(t)
	x := referenceInput()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.f32")
	var raw []byte
	for _, v := range x {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []dtype.Type{dtype.Q8_0, dtype.Q4_0, dtype.Q5_0} {
		name := map[dtype.Type]string{dtype.Q8_0: "q8_0", dtype.Q4_0: "q4_0", dtype.Q5_0: "q5_0"}[typ]
		out := filepath.Join(dir, name)
		cmd := exec.Command(py, "../../testdata/reference/quantize_ref.py", in, name, out)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, msg)
		}
		want, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		have, err := dtype.Quantize(typ, nil, x)
		if err != nil {
			t.Fatal(err)
		}
		if len(have) != len(want) {
			t.Fatalf("%s: have %d bytes; want %d", name, len(have), len(want))
		}
		bb := typ.BlockBytes()
		diff := 0
		for b := 0; b < len(want); b += bb {
			if !bytes.Equal(have[b:b+bb], want[b:b+bb]) {
				if diff < 3 {
					t.Errorf("%s block %d (input %v):\nhave %x\nwant %x", name, b/bb, x[b/bb*dtype.QK:b/bb*dtype.QK+dtype.QK], have[b:b+bb], want[b:b+bb])
				}
				diff++
			}
		}
		t.Logf("%s: %d blocks compared, %d differ", name, len(want)/bb, diff)
	}
}
