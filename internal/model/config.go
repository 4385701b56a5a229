// Config is the validated set of hyper-parameters of one decoder, read from an
// HF config.json (config_hf.go) or from GGUF metadata (config_gguf.go) with
// the keys its Family declares. Anything draftd does not implement is an
// error here, so a model either runs exactly or not at all. Counts are also
// bounded here; load.go checks them against the tensors the file holds
// before anything is allocated from them.
package model

import (
	"errors"
	"fmt"
	"slices"
)

// Config holds one decoder's hyper-parameters.
type Config struct {
	Arch         string  // the Family's name: ArchQwen3, ArchQwen2, ArchLlama, …
	Hidden       int     // hidden_size
	Intermediate int     // intermediate_size
	Layers       int     // num_hidden_layers
	Heads        int     // num_attention_heads
	KVHeads      int     // num_key_value_heads
	HeadDim      int     // head_dim (qwen3: independent of Hidden/Heads)
	Vocab        int     // vocab_size (rows of the embedding)
	MaxContext   int     // max_position_embeddings
	RMSEps       float32 // rms_norm_eps
	RopeTheta    float64 // rope_theta
	// RoPE scaling: at most one is set. Llama3 comes from an HF rope_scaling
	// of type llama3; RoPEFreqFactors (headDim/2) from a GGUF rope_freqs
	// tensor, llama.cpp's form of the same scaling: inv_freq[i] is divided
	// by RoPEFreqFactors[i].
	Llama3          *Llama3RoPE
	RoPEFreqFactors []float32
	TiedEmbed       bool // lm_head = embed_tokens
	QKNorm          bool // per-head RMSNorm of q and k (the Family's flag)
	QKVBias         bool // q/k/v projections have a bias (the Family's flag)
	BOS, EOS        int  // -1 when unknown

	keys ConfigKeys // the keys the values were read from, for errors
}

// Llama3RoPE is HF's rope_scaling {"rope_type": "llama3", ...}
// (transformers' _compute_llama3_parameters).
type Llama3RoPE struct {
	Factor         float64 // factor
	LowFreqFactor  float64 // low_freq_factor
	HighFreqFactor float64 // high_freq_factor
	OriginalMaxPos float64 // original_max_position_embeddings
}

// ErrUnsupported marks a model feature draftd does not implement.
var ErrUnsupported = errors.New("unsupported model feature")

// Limits on hyper-parameters: far above any real drafter, low enough that
// no product of them overflows and that nothing is sized from an absurd
// count before the file is checked.
const (
	maxContext = 1 << 20
	maxHeadDim = 1024
	maxHeads   = 1 << 12
	maxLayers  = 1 << 12
	maxWidth   = 1 << 24 // hidden, intermediate, vocab
)

// Validate checks that the configuration is complete, consistent and
// within draftd's limits.
func (c *Config) Validate() error {
	fam, ok := FamilyOf(c.Arch)
	if !ok {
		return fmt.Errorf("%w: architecture %q (want one of %v)", ErrUnsupported, c.Arch, Families())
	}
	k := c.keys
	if k == (ConfigKeys{}) {
		k = fam.HF
	}
	for _, p := range []struct {
		key    string
		v, max int
	}{
		{k.Hidden, c.Hidden, maxWidth}, {k.Intermediate, c.Intermediate, maxWidth},
		{k.Layers, c.Layers, maxLayers}, {k.Heads, c.Heads, maxHeads},
		{k.KVHeads, c.KVHeads, maxHeads}, {k.HeadDim, c.HeadDim, maxHeadDim},
		{k.Vocab, c.Vocab, maxWidth}, {k.MaxContext, c.MaxContext, maxContext},
	} {
		name := p.key
		if name == "" {
			name = "derived value"
		}
		if p.v <= 0 {
			return fmt.Errorf("config: %s = %d, want > 0", name, p.v)
		}
		if p.v > p.max {
			return fmt.Errorf("config: %s = %d is larger than draftd supports (%d)", name, p.v, p.max)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("config: %s %d is not a multiple of %s %d", k.Heads, c.Heads, k.KVHeads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("config: %s %d must be even for RoPE", k.HeadDim, c.HeadDim)
	}
	if !(c.RMSEps > 0 && c.RMSEps < 1) {
		return fmt.Errorf("config: %s %g out of (0, 1)", k.RMSEps, c.RMSEps)
	}
	if !(c.RopeTheta > 1) {
		return fmt.Errorf("config: %s %g must be > 1", k.RopeTheta, c.RopeTheta)
	}
	if c.Llama3 != nil && c.RoPEFreqFactors != nil {
		return fmt.Errorf("config: both rope_scaling llama3 and rope_freqs factors")
	}
	if c.Llama3 != nil {
		if !slices.Contains(fam.RoPEScaling, "llama3") {
			return fmt.Errorf("%w: rope_scaling llama3 in a %s model", ErrUnsupported, fam.Arch)
		}
		if err := c.Llama3.validate(); err != nil {
			return err
		}
	}
	if c.RoPEFreqFactors != nil && !fam.GGUFRoPEFreqs {
		return fmt.Errorf("%w: rope_freqs factors in a %s model", ErrUnsupported, fam.Arch)
	}
	if c.RoPEFreqFactors != nil && len(c.RoPEFreqFactors) != c.HeadDim/2 {
		return fmt.Errorf("config: %d rope_freqs factors for head_dim %d; want %d", len(c.RoPEFreqFactors), c.HeadDim, c.HeadDim/2)
	}
	for i, f := range c.RoPEFreqFactors {
		if !(f > 0) || f > 1e9 {
			return fmt.Errorf("config: rope_freqs factor %d = %g, want a positive finite value", i, f)
		}
	}
	return nil
}

// validate checks the llama3 parameters as transformers'
// _validate_llama3_parameters does, but as errors.
func (r *Llama3RoPE) validate() error {
	switch {
	case !(r.Factor >= 1) || r.Factor > 1e6:
		return fmt.Errorf("config: rope_scaling llama3 factor %g, want ≥ 1", r.Factor)
	case !(r.LowFreqFactor > 0) || r.LowFreqFactor > 1e6:
		return fmt.Errorf("config: rope_scaling llama3 low_freq_factor %g, want > 0", r.LowFreqFactor)
	case !(r.HighFreqFactor > r.LowFreqFactor) || r.HighFreqFactor > 1e6:
		return fmt.Errorf("config: rope_scaling llama3 high_freq_factor %g, want > low_freq_factor %g", r.HighFreqFactor, r.LowFreqFactor)
	case !(r.OriginalMaxPos >= 1) || r.OriginalMaxPos > maxContext:
		return fmt.Errorf("config: rope_scaling llama3 original_max_position_embeddings %g, want in [1, %d]", r.OriginalMaxPos, maxContext)
	}
	return nil
}

// QDim is the width of the query projection (Heads·HeadDim).
func (c *Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of the key and value projections (KVHeads·HeadDim).
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }
