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
	data, err := hfRowOrder(s.cfg, s.fam, r, shape[0], ti.Data)
	if err != nil {
		return tensor{}, name, false, fmt.Errorf("%s: tensor %s %w", s.f.Path, name, err)
	}
	return tensor{typ: ti.Type, shape: shape, data: data}, name, true, nil
}

// hfRowOrder returns the GGUF bytes data of role r (rows rows) in HF row
// order: llama.cpp permutes Q/K rows of some families for its interleaved
// RoPE; undoing it lets one NeoX RoPE serve every family. Other tensors are
// returned as they are.
func hfRowOrder(c *Config, fam *Family, r role, rows int, data []byte) ([]byte, error) {
	if !fam.GGUFPermutedQK || (r != wAttnQ && r != wAttnK && r != wAttnQBias && r != wAttnKBias) {
		return data, nil
	}
	heads := c.Heads
	if r == wAttnK || r == wAttnKBias {
		heads = c.KVHeads
	}
	if rows != heads*c.HeadDim {
		return nil, fmt.Errorf("has %d rows, want %d", rows, heads*c.HeadDim)
	}
	return UnpermuteRows(data, heads, c.HeadDim, len(data)/rows), nil
}

// HFRowOrder returns the bytes of weight w as a GGUF file of config c
// stores them (rows rows, any storage type) in HF row order, undoing the
// Q/K permutation llama.cpp applies to some families exactly as Load does.
// Other tensors are returned unchanged (not copied).
func (c *Config) HFRowOrder(w Weight, rows int, data []byte) ([]byte, error) {
	fam, ok := FamilyOf(c.Arch)
	if !ok {
		return nil, fmt.Errorf("model: no family %q", c.Arch)
	}
	out, err := hfRowOrder(c, fam, w.role, rows, data)
	if err != nil {
		return nil, fmt.Errorf("tensor %s %w", w.GGUF, err)
	}
	return out, nil
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
