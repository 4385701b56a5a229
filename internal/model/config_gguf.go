// Config from GGUF metadata, with the keys llama.cpp writes ("<arch>.<key>",
// as the file's Family declares them); the vocabulary is the embedding's
// row count, q/k norm and q/k/v bias are the family's, and llama3 RoPE
// scaling is read from llama.cpp's rope_freqs tensor.
package model

import (
	"fmt"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
)

// ConfigFromGGUF reads and validates the hyper-parameters of a GGUF file.
func ConfigFromGGUF(f *gguf.File) (*Config, error) {
	c, err := configFromGGUF(f)
	if err != nil && !strings.HasPrefix(err.Error(), "gguf "+f.Path) { // gguf's errors name the file
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return c, err
}

func configFromGGUF(f *gguf.File) (*Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	var fam *Family
	for _, g := range families {
		if g.GGUFArch == arch {
			fam = g
		}
	}
	if fam == nil {
		return nil, fmt.Errorf("%w: general.architecture %q (want one of %s)", ErrUnsupported, arch,
			supported(func(f *Family) []string { return []string{f.GGUFArch} }))
	}
	k := fam.GGUF
	for _, p := range []*string{&k.Hidden, &k.Intermediate, &k.Layers, &k.Heads, &k.KVHeads, &k.HeadDim, &k.ValueDim, &k.MaxContext, &k.RMSEps, &k.RopeTheta} {
		if *p != "" {
			*p = arch + "." + *p
		}
	}
	k.Vocab = fam.Tensors[wEmbed].GGUF + " rows"
	c := &Config{Arch: fam.Arch, BOS: -1, EOS: -1, QKNorm: fam.QKNorm, QKVBias: fam.QKVBias, keys: k}
	// u reads a count; a value beyond int's range is an error, not a wrap.
	u := func(key string, dst *int) {
		if err != nil {
			return
		}
		var v uint64
		if v, err = f.Uint(key); err == nil && v > maxContext*maxWidth {
			err = fmt.Errorf("%s = %d is larger than draftd supports", key, v)
		}
		*dst = int(v)
	}
	u(k.Hidden, &c.Hidden)
	u(k.Intermediate, &c.Intermediate)
	u(k.Layers, &c.Layers)
	u(k.Heads, &c.Heads)
	u(k.MaxContext, &c.MaxContext)
	c.KVHeads = c.Heads
	if f.Has(k.KVHeads) {
		u(k.KVHeads, &c.KVHeads)
	}
	c.HeadDim = c.Hidden / max(c.Heads, 1)
	if f.Has(k.HeadDim) {
		u(k.HeadDim, &c.HeadDim)
		if f.Has(k.ValueDim) {
			var vd int
			if u(k.ValueDim, &vd); err == nil && vd != c.HeadDim {
				return nil, fmt.Errorf("%w: %s %d != %s %d", ErrUnsupported, k.HeadDim, c.HeadDim, k.ValueDim, vd)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	eps, err := f.Float(k.RMSEps)
	if err != nil {
		return nil, err
	}
	c.RMSEps = float32(eps)
	c.RopeTheta = 10000
	if f.Has(k.RopeTheta) {
		if c.RopeTheta, err = f.Float(k.RopeTheta); err != nil {
			return nil, err
		}
	}
	if err := ggufUnsupported(f, fam, arch); err != nil {
		return nil, err
	}
	emb, ok := f.Tensor(fam.Tensors[wEmbed].GGUF)
	if !ok {
		return nil, fmt.Errorf("missing tensor %s", fam.Tensors[wEmbed].GGUF)
	}
	if len(emb.Shape) != 2 {
		return nil, fmt.Errorf("%s has %d dimensions, want 2", emb.Name, len(emb.Shape))
	}
	if emb.Shape[1] > maxWidth {
		return nil, fmt.Errorf("%s has %d rows; draftd supports vocabularies up to %d", emb.Name, emb.Shape[1], maxWidth)
	}
	c.Vocab = int(emb.Shape[1])
	_, hasOutput := f.Tensor(fam.Tensors[wOutput].GGUF)
	c.TiedEmbed = !hasOutput
	if v, err := f.Uint("tokenizer.ggml.bos_token_id"); err == nil && v < maxWidth {
		c.BOS = int(v)
	}
	if v, err := f.Uint("tokenizer.ggml.eos_token_id"); err == nil && v < maxWidth {
		c.EOS = int(v)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if fam.GGUFRoPEFreqs {
		if c.RoPEFreqFactors, err = ropeFreqs(f, fam, c.HeadDim); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ggufUnsupported rejects the metadata and tensors of features the forward
// pass lacks.
func ggufUnsupported(f *gguf.File, fam *Family, arch string) error {
	for _, k := range []string{".rope.scaling.type", ".rope.scaling.factor"} {
		if !f.Has(arch + k) {
			continue
		}
		if typ, err := f.String(arch + ".rope.scaling.type"); err == nil && typ == "none" {
			continue
		}
		if fac, err := f.Float(arch + ".rope.scaling.factor"); err == nil && fac == 1 {
			continue
		}
		return fmt.Errorf("%w: rope scaling (%s)", ErrUnsupported, arch+k)
	}
	if f.Has(arch + ".attention.sliding_window") {
		return fmt.Errorf("%w: sliding-window attention", ErrUnsupported)
	}
	if f.Has(arch + ".expert_count") {
		if n, _ := f.Uint(arch + ".expert_count"); n > 0 {
			return fmt.Errorf("%w: mixture-of-experts model", ErrUnsupported)
		}
	}
	if _, ok := f.Tensor(fam.Tensors.name(wAttnOBias, 0, true)); ok {
		return fmt.Errorf("%w: %s (o_proj bias)", ErrUnsupported, fam.Tensors.name(wAttnOBias, 0, true))
	}
	if q := fam.Tensors.name(wAttnQBias, 0, true); !fam.QKVBias {
		if _, ok := f.Tensor(q); ok {
			return fmt.Errorf("%w: %s (q/k/v bias in a %s model)", ErrUnsupported, q, fam.Arch)
		}
	}
	if _, ok := f.Tensor(fam.Tensors[wRoPEFreqs].GGUF); ok && !fam.GGUFRoPEFreqs {
		return fmt.Errorf("%w: %s in a %s model", ErrUnsupported, fam.Tensors[wRoPEFreqs].GGUF, fam.Arch)
	}
	return nil
}

// ropeFreqs reads llama.cpp's rope_freqs tensor (headDim/2 divisors of the
// RoPE frequencies), nil when the file has none.
func ropeFreqs(f *gguf.File, fam *Family, headDim int) ([]float32, error) {
	name := fam.Tensors[wRoPEFreqs].GGUF
	t, ok := f.Tensor(name)
	if !ok {
		return nil, nil
	}
	if len(t.Shape) != 1 || t.Shape[0] != uint64(headDim/2) {
		return nil, fmt.Errorf("tensor %s has shape %v, want [%d] (head_dim/2)", name, t.Shape, headDim/2)
	}
	if t.Type != dtype.F32 {
		return nil, fmt.Errorf("tensor %s has type %v, want F32", name, t.Type)
	}
	v := make([]float32, headDim/2) // (headDim/2)
	if err := dtype.Dequantize(t.Type, v, t.Data); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	for i, x := range v {
		if !(x > 0) || x > 1e9 {
			return nil, fmt.Errorf("tensor %s[%d] = %g, want a positive finite divisor", name, i, x)
		}
	}
	return v, nil
}
