// The GGUF source of the loader: tensors by llama.cpp's names (as the
// file's Family declares them), ggml shapes turned to HF order, and the Q/K
// row permutation llama.cpp applies to some families undone. It reads no
// HF files and decodes no weights beyond that permutation.
package model

import (
	"fmt"

	"github.com/draftd/draftd/internal/gguf"
)

type ggufSource struct {
	f   *gguf.File
	cfg *Config
	fam *Family
}

func openGGUF(path string) (*Config, source, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	c, err := ConfigFromGGUF(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	fam, _ := FamilyOf(c.Arch)
	return c, &ggufSource{f: f, cfg: c, fam: fam}, nil
}

func (s *ggufSource) path() string    { return s.f.Path }
func (s *ggufSource) numTensors() int { return len(s.f.Tensors) }
func (s *ggufSource) Close() error    { return s.f.Close() }

func (s *ggufSource) lookup(r role, layer int) (tensor, string, bool, error) {
	name := s.fam.Tensors.name(r, layer, true)
	ti, ok := s.f.Tensor(name)
	if !ok {
		return tensor{}, name, false, nil
	}
	if !ti.Type.Supported() {
		return tensor{}, name, false, fmt.Errorf("%s: tensor %s has type %s; draftd computes with F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q2_K…Q6_K (not IQ types)", s.f.Path, name, gguf.TypeName(ti.Type))
	}
	shape := make([]int, len(ti.Shape)) // ggml order (ne0 innermost) reversed to HF order
	for i, d := range ti.Shape {
		shape[len(shape)-1-i] = int(d)
	}
	t := tensor{typ: ti.Type, shape: shape, data: ti.Data}
	// llama.cpp permutes Q/K rows of some families for its interleaved
	// RoPE; undo it so one NeoX RoPE serves every family.
	if s.fam.GGUFPermutedQK && (r == wAttnQ || r == wAttnK || r == wAttnQBias || r == wAttnKBias) {
		heads := s.cfg.Heads
		if r == wAttnK || r == wAttnKBias {
			heads = s.cfg.KVHeads
		}
		rows := shape[0]
		if rows != heads*s.cfg.HeadDim {
			return tensor{}, name, false, fmt.Errorf("%s: tensor %s has %d rows, want %d", s.f.Path, name, rows, heads*s.cfg.HeadDim)
		}
		t.data = UnpermuteRows(ti.Data, heads, s.cfg.HeadDim, len(ti.Data)/rows)
	}
	return t, name, true, nil
}

// PermuteRows reorders the rows of a (heads·headDim, ·) matrix the way
// llama.cpp's converter does for llama Q/K: within each head, HF row
// s·headDim/2 + i becomes row 2i + s. rowBytes is the size of one row.
func PermuteRows(data []byte, heads, headDim, rowBytes int) []byte {
	return permuteRows(data, heads, headDim, rowBytes, false)
}

// UnpermuteRows inverts PermuteRows.
func UnpermuteRows(data []byte, heads, headDim, rowBytes int) []byte {
	return permuteRows(data, heads, headDim, rowBytes, true)
}

func permuteRows(data []byte, heads, headDim, rowBytes int, inverse bool) []byte {
	out := make([]byte, len(data))
	half := headDim / 2
	for h := range heads {
		for s := range 2 {
			for i := range half {
				hf := (h*headDim + s*half + i) * rowBytes
				gg := (h*headDim + 2*i + s) * rowBytes
				if inverse {
					hf, gg = gg, hf
				}
				copy(out[gg:gg+rowBytes], data[hf:hf+rowBytes])
			}
		}
	}
	return out
}
