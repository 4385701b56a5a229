// Config from GGUF metadata, with the key names llama.cpp writes.
package model

import (
	"fmt"

	"github.com/draftd/draftd/internal/gguf"
)

// ConfigFromGGUF reads and validates the hyper-parameters of a GGUF file.
func ConfigFromGGUF(f *gguf.File) (*Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	switch arch {
	case ArchQwen3, ArchQwen2, ArchLlama:
	default:
		return nil, fmt.Errorf("%s: %w: general.architecture %q (want qwen3, qwen2 or llama)", f.Path, ErrUnsupported, arch)
	}
	u := func(key string) int {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = f.Uint(arch + "." + key)
		return int(v)
	}
	c := &Config{Arch: arch, BOS: -1, EOS: -1}
	c.Hidden = u("embedding_length")
	c.Intermediate = u("feed_forward_length")
	c.Layers = u("block_count")
	c.Heads = u("attention.head_count")
	c.MaxContext = u("context_length")
	if err != nil {
		return nil, err
	}
	c.KVHeads = c.Heads
	if f.Has(arch + ".attention.head_count_kv") {
		c.KVHeads = u("attention.head_count_kv")
	}
	c.HeadDim = c.Hidden / max(c.Heads, 1)
	if f.Has(arch + ".attention.key_length") {
		c.HeadDim = u("attention.key_length")
		if f.Has(arch+".attention.value_length") && u("attention.value_length") != c.HeadDim {
			return nil, fmt.Errorf("%s: %w: key_length != value_length", f.Path, ErrUnsupported)
		}
	}
	if err != nil {
		return nil, err
	}
	eps, err := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	if err != nil {
		return nil, err
	}
	c.RMSEps = float32(eps)
	c.RopeTheta = 10000
	if f.Has(arch + ".rope.freq_base") {
		if c.RopeTheta, err = f.Float(arch + ".rope.freq_base"); err != nil {
			return nil, err
		}
	}
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
		return nil, fmt.Errorf("%s: %w: rope scaling (%s)", f.Path, ErrUnsupported, arch+k)
	}
	if f.Has(arch + ".attention.sliding_window") {
		return nil, fmt.Errorf("%s: %w: sliding-window attention", f.Path, ErrUnsupported)
	}
	if f.Has(arch + ".expert_count") {
		if n, _ := f.Uint(arch + ".expert_count"); n > 0 {
			return nil, fmt.Errorf("%s: %w: mixture-of-experts model", f.Path, ErrUnsupported)
		}
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("%s: missing tensor token_embd.weight", f.Path)
	}
	if len(emb.Shape) != 2 {
		return nil, fmt.Errorf("%s: token_embd.weight has %d dimensions, want 2", f.Path, len(emb.Shape))
	}
	c.Vocab = int(emb.Shape[1])
	_, hasOutput := f.Tensor("output.weight")
	c.TiedEmbed = !hasOutput
	c.QKNorm = arch == ArchQwen3
	_, c.QKVBias = f.Tensor("blk.0.attn_q.bias")
	if v, err := f.Uint("tokenizer.ggml.bos_token_id"); err == nil {
		c.BOS = int(v)
	}
	if v, err := f.Uint("tokenizer.ggml.eos_token_id"); err == nil {
		c.EOS = int(v)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return c, nil
}
