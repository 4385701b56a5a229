// The HF source of the loader: tensors of a safetensors directory by the
// names the config's Family declares, F32/F16/BF16 as stored, FP8 E4M3 with
// block scales widened to F32. It reads no GGUF files; config.json is read
// by config_hf.go.
package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/safetensors"
)

type hfSource struct {
	dir *safetensors.Dir
	p   string
	fam *Family
}

func openHF(dir string) (*Config, source, error) {
	c, err := ConfigFromHF(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, nil, err
	}
	d, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, nil, err
	}
	fam, _ := FamilyOf(c.Arch)
	return c, &hfSource{dir: d, p: dir, fam: fam}, nil
}

func (s *hfSource) path() string    { return s.p }
func (s *hfSource) numTensors() int { return len(s.dir.Names()) }
func (s *hfSource) Close() error    { return s.dir.Close() }

func (s *hfSource) lookup(r role, layer int) (tensor, string, bool, error) {
	name := s.fam.Tensors.name(r, layer, false)
	t, ok, err := s.tensor(name)
	return t, name, ok, err
}

// tensor returns the tensor called name, widened when its dtype needs it.
func (s *hfSource) tensor(name string) (tensor, bool, error) {
	t, ok := s.dir.Tensor(name)
	if !ok {
		return tensor{}, false, nil
	}
	shape := make([]int, len(t.Shape))
	for i, d := range t.Shape {
		shape[i] = int(d)
	}
	out := tensor{shape: shape, data: t.Data}
	if typ, ok := dtype.FromSafetensors(t.DType); ok {
		out.typ = typ
		return out, true, nil
	}
	switch t.DType {
	case "F8_E4M3":
		data, err := s.dequantFP8(name, t)
		if err != nil {
			return tensor{}, false, err
		}
		out.typ, out.data = dtype.F32, data
	default:
		return tensor{}, false, fmt.Errorf("%s: tensor %s has dtype %s; draftd reads F32, F16, BF16 and F8_E4M3", t.File, name, t.DType)
	}
	return out, true, nil
}

// dequantFP8 widens an FP8 E4M3 weight with its block scales
// (`<name>_scale_inv`, one f32/bf16 per block of rows×cols) to f32.
func (s *hfSource) dequantFP8(name string, t *safetensors.Tensor) ([]byte, error) {
	sc, err := s.dir.FP8Scales(name, t)
	if err != nil {
		return nil, err
	}
	rows, cols := int(t.Shape[0]), int(t.Shape[1])
	out := make([]byte, rows*cols*4) // (rows, cols) f32
	for r := range rows {
		for c := range cols {
			v := dtype.FP8E4M3[t.Data[r*cols+c]] * sc.At(r, c)
			binary.LittleEndian.PutUint32(out[(r*cols+c)*4:], math.Float32bits(v))
		}
	}
	return out, nil
}
