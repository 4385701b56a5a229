// fp8.go finds and checks the block scales of an FP8 E4M3 weight
// (`<name>_scale_inv`, as DeepSeek/Qwen FP8 checkpoints store them). It
// does not decode the codes: dtype.FP8E4M3 does, and the callers decide
// where the widened values go.

package safetensors

import (
	"fmt"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
)

// FP8Scales are the block scales of a 2-D FP8 E4M3 weight: the value at
// (r, c) is dtype.FP8E4M3[code] · Scale[(r/BR)·SC + c/BC].
type FP8Scales struct {
	Name   string    // the scale tensor, `<name>_scale_inv` with name's ".weight" suffix kept
	Scale  []float32 // (rows/BR, SC) one per block, rounded up
	BR, BC int       // rows and columns of a block
	SC     int       // blocks per row of blocks
}

// At is the scale of weight element (r, c).
func (s *FP8Scales) At(r, c int) float32 { return s.Scale[(r/s.BR)*s.SC+c/s.BC] }

// FP8Scales reads the block scales of the FP8 weight t (tensor name), with
// errors naming the file and tensor: t not 2-D, no scale tensor, a scale
// shape that does not tile t, or a scale dtype other than F32/F16/BF16.
func (d *Dir) FP8Scales(name string, t *Tensor) (*FP8Scales, error) {
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("%s: FP8 tensor %s has %d dimensions, want 2", t.File, name, len(t.Shape))
	}
	sname := strings.TrimSuffix(name, ".weight") + ".weight_scale_inv"
	sc, ok := d.Tensor(sname)
	if !ok {
		return nil, fmt.Errorf("%s: FP8 tensor %s has no %s", t.File, name, sname)
	}
	rows, cols := int(t.Shape[0]), int(t.Shape[1])
	if len(sc.Shape) != 2 || sc.Shape[0] <= 0 || sc.Shape[1] <= 0 {
		return nil, fmt.Errorf("%s: scale %s has shape %v, want 2 positive dimensions", sc.File, sname, sc.Shape)
	}
	sr, scc := int(sc.Shape[0]), int(sc.Shape[1])
	br, bc := (rows+sr-1)/sr, (cols+scc-1)/scc // block size
	if (rows+br-1)/br != sr || (cols+bc-1)/bc != scc {
		return nil, fmt.Errorf("%s: scale %s shape %v does not tile %s %v", sc.File, sname, sc.Shape, name, t.Shape)
	}
	st, ok := dtype.FromSafetensors(sc.DType)
	if !ok {
		return nil, fmt.Errorf("%s: scale %s has dtype %s; want F32, F16 or BF16", sc.File, sname, sc.DType)
	}
	out := &FP8Scales{Name: sname, Scale: make([]float32, sr*scc), BR: br, BC: bc, SC: scc}
	if err := dtype.Dequantize(st, out.Scale, sc.Data); err != nil {
		return nil, fmt.Errorf("%s: scale %s: %w", sc.File, sname, err)
	}
	return out, nil
}
