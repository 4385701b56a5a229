// Config is the validated set of hyper-parameters of one decoder, read from an
// HF config.json or from GGUF metadata. Anything draftd does not implement is
// an error here, so a model either runs exactly or not at all.
package model

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/draftd/draftd/internal/fileio"
)

// Architectures draftd runs.
const (
	ArchQwen3 = "qwen3"
	ArchQwen2 = "qwen2"
	ArchLlama = "llama"
)

// Config holds one decoder's hyper-parameters.
type Config struct {
	Arch         string  // ArchQwen3, ArchQwen2 or ArchLlama
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
	TiedEmbed    bool    // lm_head = embed_tokens
	QKNorm       bool    // per-head RMSNorm of q and k (qwen3)
	QKVBias      bool    // q/k/v projections have a bias (qwen2, or attention_bias)
	BOS, EOS     int     // -1 when unknown
}

// ErrUnsupported marks a model feature draftd does not implement.
var ErrUnsupported = errors.New("unsupported model feature")

// Validate checks that the configuration is complete and consistent.
func (c *Config) Validate() error {
	switch c.Arch {
	case ArchQwen3, ArchQwen2, ArchLlama:
	default:
		return fmt.Errorf("%w: architecture %q (want qwen3, qwen2 or llama)", ErrUnsupported, c.Arch)
	}
	pos := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"intermediate_size", c.Intermediate},
		{"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim},
		{"vocab_size", c.Vocab}, {"max_position_embeddings", c.MaxContext},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("config: %s = %d, want > 0", p.name, p.v)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("config: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("config: head_dim %d must be even for RoPE", c.HeadDim)
	}
	if !(c.RMSEps > 0 && c.RMSEps < 1) {
		return fmt.Errorf("config: rms_norm_eps %g out of (0, 1)", c.RMSEps)
	}
	if !(c.RopeTheta > 1) {
		return fmt.Errorf("config: rope_theta %g must be > 1", c.RopeTheta)
	}
	if c.MaxContext > 1<<20 {
		return fmt.Errorf("config: max_position_embeddings %d is larger than draftd supports (%d)", c.MaxContext, 1<<20)
	}
	return nil
}

// QDim is the width of the query projection (Heads·HeadDim).
func (c *Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of the key and value projections (KVHeads·HeadDim).
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

// hfConfig is the subset of config.json draftd reads; pointers tell absent
// from zero.
type hfConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	NumLayers         int             `json:"num_hidden_layers"`
	NumHeads          int             `json:"num_attention_heads"`
	NumKVHeads        *int            `json:"num_key_value_heads"`
	HeadDim           *int            `json:"head_dim"`
	VocabSize         int             `json:"vocab_size"`
	MaxPos            int             `json:"max_position_embeddings"`
	RMSNormEps        float64         `json:"rms_norm_eps"`
	RopeTheta         *float64        `json:"rope_theta"`
	RopeScaling       json.RawMessage `json:"rope_scaling"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	AttentionBias     *bool           `json:"attention_bias"`
	MLPBias           bool            `json:"mlp_bias"`
	UseSlidingWindow  bool            `json:"use_sliding_window"`
	HiddenAct         string          `json:"hidden_act"`
	NumExperts        int             `json:"num_experts"`
	NumLocalExperts   int             `json:"num_local_experts"`
	BOSTokenID        *int            `json:"bos_token_id"`
	EOSTokenID        json.RawMessage `json:"eos_token_id"`
	QuantConfig       json.RawMessage `json:"quantization_config"`
}

// ConfigFromHF reads and validates an HF config.json.
func ConfigFromHF(path string) (*Config, *hfConfig, error) {
	data, err := fileio.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var h hfConfig
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := h.config()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, &h, nil
}

func (h *hfConfig) config() (*Config, error) {
	arch := h.ModelType
	if arch == "" && len(h.Architectures) > 0 {
		switch h.Architectures[0] {
		case "Qwen3ForCausalLM":
			arch = ArchQwen3
		case "Qwen2ForCausalLM":
			arch = ArchQwen2
		case "LlamaForCausalLM":
			arch = ArchLlama
		}
	}
	if arch == "" {
		return nil, fmt.Errorf("no model_type or known architectures entry")
	}
	if arch == "qwen3_moe" || arch == "qwen2_moe" || h.NumExperts > 0 || h.NumLocalExperts > 0 {
		return nil, fmt.Errorf("%w: mixture-of-experts model (%s)", ErrUnsupported, arch)
	}
	if len(h.RopeScaling) > 0 && string(h.RopeScaling) != "null" {
		return nil, fmt.Errorf("%w: rope_scaling %s", ErrUnsupported, h.RopeScaling)
	}
	if h.UseSlidingWindow {
		return nil, fmt.Errorf("%w: use_sliding_window true", ErrUnsupported)
	}
	if h.MLPBias {
		return nil, fmt.Errorf("%w: mlp_bias true", ErrUnsupported)
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return nil, fmt.Errorf("%w: hidden_act %q (want silu)", ErrUnsupported, h.HiddenAct)
	}
	c := &Config{
		Arch: arch, Hidden: h.HiddenSize, Intermediate: h.IntermediateSize,
		Layers: h.NumLayers, Heads: h.NumHeads, KVHeads: h.NumHeads,
		Vocab: h.VocabSize, MaxContext: h.MaxPos, RMSEps: float32(h.RMSNormEps),
		RopeTheta: 10000, BOS: -1, EOS: -1,
	}
	if h.NumKVHeads != nil {
		c.KVHeads = *h.NumKVHeads
	}
	if h.NumHeads > 0 {
		c.HeadDim = h.HiddenSize / h.NumHeads
	}
	if h.HeadDim != nil {
		c.HeadDim = *h.HeadDim
	}
	if h.RopeTheta != nil {
		c.RopeTheta = *h.RopeTheta
	}
	if h.TieWordEmbeddings != nil { // HF's default for all three is false
		c.TiedEmbed = *h.TieWordEmbeddings
	}
	switch arch {
	case ArchQwen3:
		c.QKNorm = true
		c.QKVBias = h.AttentionBias != nil && *h.AttentionBias
	case ArchQwen2:
		c.QKVBias = true
	case ArchLlama:
		c.QKVBias = h.AttentionBias != nil && *h.AttentionBias
	}
	if h.BOSTokenID != nil {
		c.BOS = *h.BOSTokenID
	}
	var eos int
	if json.Unmarshal(h.EOSTokenID, &eos) == nil {
		c.EOS = eos
	} else {
		var eoss []int
		if json.Unmarshal(h.EOSTokenID, &eoss) == nil && len(eoss) > 0 {
			c.EOS = eoss[0]
		}
	}
	return c, c.Validate()
}
