// Model families: everything that differs between the decoder families draftd
// runs — which names select them, which config.json and GGUF metadata keys
// hold their hyper-parameters, what their tensors are called, and which
// optional parts of the one shared forward pass they use. Each family is one
// small file (family_qwen3.go, family_qwen2.go, family_llama.go) that
// registers a Family; nothing else in the package switches on a family name.
// This file holds no math and reads no files.
package model

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Family declares one decoder family. To add one, copy the closest
// family_*.go file, change the names and flags, and add a tiny model to
// internal/testmodel and the numpy reference.
type Family struct {
	// Arch is the family's name in draftd (Config.Arch, `draftd info`).
	Arch string
	// HFArchitectures and HFModelTypes are the config.json `architectures[0]`
	// and `model_type` values that select the family.
	HFArchitectures, HFModelTypes []string
	// GGUFArch is the GGUF `general.architecture` value; the family's
	// metadata keys are "<GGUFArch>.<key>".
	GGUFArch string

	// HF and GGUF map each hyper-parameter to its key (see ConfigKeys).
	HF, GGUF ConfigKeys
	// HFDefaultHeadDim is head_dim when config.json omits it (HF's config
	// class default); 0 means hidden_size / num_attention_heads.
	HFDefaultHeadDim int
	// HFDefaultKVHeads is num_key_value_heads when config.json omits the key
	// (HF's config class default); 0 means num_attention_heads.
	HFDefaultKVHeads int

	// Tensors names every weight in both formats.
	Tensors TensorNames

	// Forward-pass flags.
	QKNorm  bool // per-head RMSNorm of q and k after the projection, before RoPE
	QKVBias bool // q/k/v projections have a bias (HF's attention_bias is then ignored)
	// GGUFPermutedQK: llama.cpp's converter permutes the Q/K rows of this
	// family for its interleaved RoPE; the loader undoes it.
	GGUFPermutedQK bool
	// RoPEScaling lists the HF rope_scaling types the family implements
	// beyond plain RoPE ("llama3"); any other type is an error.
	RoPEScaling []string
	// GGUFRoPEFreqs: a GGUF file may carry llama.cpp's per-frequency RoPE
	// divisors (the Tensors[wRoPEFreqs] tensor), as its converter writes for
	// rope_scaling llama3.
	GGUFRoPEFreqs bool
}

// ConfigKeys names the key of each hyper-parameter in one format. GGUF keys
// are relative to "<GGUFArch>."; an empty key means the format has none (the
// value comes from a default or from a tensor shape).
type ConfigKeys struct {
	Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, ValueDim string
	Vocab, MaxContext, RMSEps, RopeTheta                            string
}

// role is one kind of weight of a decoder.
type role int

// The weights of a decoder. Per-layer roles have a %d in their names.
const (
	wEmbed role = iota
	wOutNorm
	wOutput
	wRoPEFreqs
	wAttnNorm
	wAttnQ
	wAttnK
	wAttnV
	wAttnO
	wAttnQBias
	wAttnKBias
	wAttnVBias
	wAttnOBias
	wAttnQNorm
	wAttnKNorm
	wFFNNorm
	wFFNGate
	wFFNUp
	wFFNDown
	numRoles
)

// TensorName is a weight's name in an HF safetensors directory and in a GGUF
// file; per-layer names have one %d for the layer index. An empty name
// means the format has no such tensor.
type TensorName struct{ HF, GGUF string }

// TensorNames names every role.
type TensorNames [numRoles]TensorName

// perLayer reports whether the role has one tensor per layer.
func (r role) perLayer() bool { return r >= wAttnNorm }

// name is the role's tensor name for layer (ignored for whole-model roles)
// in the given format.
func (n *TensorNames) name(r role, layer int, gguf bool) string {
	p := n[r].HF
	if gguf {
		p = n[r].GGUF
	}
	if r.perLayer() {
		return fmt.Sprintf(p, layer)
	}
	return p
}

// StandardHF are the config.json keys of transformers' LlamaConfig, which
// Qwen2Config, Qwen3Config and most Llama-derived families share.
var StandardHF = ConfigKeys{
	Hidden: "hidden_size", Intermediate: "intermediate_size", Layers: "num_hidden_layers",
	Heads: "num_attention_heads", KVHeads: "num_key_value_heads", HeadDim: "head_dim",
	Vocab: "vocab_size", MaxContext: "max_position_embeddings", RMSEps: "rms_norm_eps",
	RopeTheta: "rope_theta",
}

// StandardGGUF are the metadata keys llama.cpp writes for llama-like
// families (after "<arch>."); the vocabulary is the embedding's row count.
var StandardGGUF = ConfigKeys{
	Hidden: "embedding_length", Intermediate: "feed_forward_length", Layers: "block_count",
	Heads: "attention.head_count", KVHeads: "attention.head_count_kv", HeadDim: "attention.key_length",
	ValueDim: "attention.value_length", MaxContext: "context_length",
	RMSEps: "attention.layer_norm_rms_epsilon", RopeTheta: "rope.freq_base",
}

// StandardTensors are the tensor names of transformers' Llama layout and of
// llama.cpp, shared by Llama, Qwen2 and Qwen3.
var StandardTensors = TensorNames{
	wEmbed:     {"model.embed_tokens.weight", "token_embd.weight"},
	wOutNorm:   {"model.norm.weight", "output_norm.weight"},
	wOutput:    {"lm_head.weight", "output.weight"},
	wRoPEFreqs: {"", "rope_freqs.weight"},
	wAttnNorm:  {"model.layers.%d.input_layernorm.weight", "blk.%d.attn_norm.weight"},
	wAttnQ:     {"model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight"},
	wAttnK:     {"model.layers.%d.self_attn.k_proj.weight", "blk.%d.attn_k.weight"},
	wAttnV:     {"model.layers.%d.self_attn.v_proj.weight", "blk.%d.attn_v.weight"},
	wAttnO:     {"model.layers.%d.self_attn.o_proj.weight", "blk.%d.attn_output.weight"},
	wAttnQBias: {"model.layers.%d.self_attn.q_proj.bias", "blk.%d.attn_q.bias"},
	wAttnKBias: {"model.layers.%d.self_attn.k_proj.bias", "blk.%d.attn_k.bias"},
	wAttnVBias: {"model.layers.%d.self_attn.v_proj.bias", "blk.%d.attn_v.bias"},
	wAttnOBias: {"model.layers.%d.self_attn.o_proj.bias", "blk.%d.attn_output.bias"},
	wAttnQNorm: {"model.layers.%d.self_attn.q_norm.weight", "blk.%d.attn_q_norm.weight"},
	wAttnKNorm: {"model.layers.%d.self_attn.k_norm.weight", "blk.%d.attn_k_norm.weight"},
	wFFNNorm:   {"model.layers.%d.post_attention_layernorm.weight", "blk.%d.ffn_norm.weight"},
	wFFNGate:   {"model.layers.%d.mlp.gate_proj.weight", "blk.%d.ffn_gate.weight"},
	wFFNUp:     {"model.layers.%d.mlp.up_proj.weight", "blk.%d.ffn_up.weight"},
	wFFNDown:   {"model.layers.%d.mlp.down_proj.weight", "blk.%d.ffn_down.weight"},
}

var families = map[string]*Family{}

// register adds a family; it panics on a duplicate name (a programming
// error caught by every test run, since families register in init).
func register(f *Family) {
	if _, dup := families[f.Arch]; dup {
		panic("model: family " + f.Arch + " registered twice")
	}
	for _, g := range families {
		for _, a := range f.HFArchitectures {
			if slices.Contains(g.HFArchitectures, a) {
				panic("model: HF architecture " + a + " claimed by " + g.Arch + " and " + f.Arch)
			}
		}
		for _, a := range f.HFModelTypes {
			if slices.Contains(g.HFModelTypes, a) {
				panic("model: HF model_type " + a + " claimed by " + g.Arch + " and " + f.Arch)
			}
		}
		if g.GGUFArch == f.GGUFArch {
			panic("model: GGUF architecture " + f.GGUFArch + " claimed by " + g.Arch + " and " + f.Arch)
		}
	}
	families[f.Arch] = f
}

// FamilyOf returns the family called arch (Config.Arch).
func FamilyOf(arch string) (*Family, bool) {
	f, ok := families[arch]
	return f, ok
}

// Families lists the registered family names, sorted.
func Families() []string {
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// familyBy returns the family whose field (picked by get) lists name.
func familyBy(name string, get func(*Family) []string) *Family {
	for _, f := range families {
		if slices.Contains(get(f), name) {
			return f
		}
	}
	return nil
}

// supported lists the names (picked by get) of every family, for errors.
func supported(get func(*Family) []string) string {
	var names []string
	for _, f := range families {
		names = append(names, get(f)...)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Weight is one tensor a model stores: its names in both formats and its
// shape in HF order ((rows, cols) for a matrix, (n) for a vector).
type Weight struct {
	HF, GGUF string
	Shape    []int
	role     role
	layer    int // per-layer roles
}

// Weights lists the tensors a model of config c stores, named by its
// family, in the order `draftd prepare` writes them: the embedding, then per layer the
// attention norm, Q, K, V (each followed by its bias with QKVBias), O, the
// QK norms (QKNorm), the FFN norm, gate, up and down; then the output norm
// and, unless tied, the output matrix. It is what Load binds (llama3's
// rope_freqs, computed from the config, is not listed).
func (c *Config) Weights() ([]Weight, error) {
	f, ok := FamilyOf(c.Arch)
	if !ok {
		return nil, fmt.Errorf("model: no family %q (have %s)", c.Arch, strings.Join(Families(), ", "))
	}
	var ws []Weight
	add := func(r role, layer int, shape ...int) {
		ws = append(ws, Weight{f.Tensors.name(r, layer, false), f.Tensors.name(r, layer, true), shape, r, layer})
	}
	h, q, kv, ff := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	add(wEmbed, 0, c.Vocab, h)
	for i := range c.Layers {
		add(wAttnNorm, i, h)
		for _, p := range []struct {
			w, b role
			rows int
		}{{wAttnQ, wAttnQBias, q}, {wAttnK, wAttnKBias, kv}, {wAttnV, wAttnVBias, kv}} {
			add(p.w, i, p.rows, h)
			if c.QKVBias {
				add(p.b, i, p.rows)
			}
		}
		add(wAttnO, i, h, q)
		if c.QKNorm {
			add(wAttnQNorm, i, c.HeadDim)
			add(wAttnKNorm, i, c.HeadDim)
		}
		add(wFFNNorm, i, h)
		add(wFFNGate, i, ff, h)
		add(wFFNUp, i, ff, h)
		add(wFFNDown, i, h, ff)
	}
	add(wOutNorm, 0, h)
	if !c.TiedEmbed {
		add(wOutput, 0, c.Vocab, h)
	}
	return ws, nil
}

// GGUFName maps an HF tensor name of the standard layout to llama.cpp's; a
// name it does not know is returned unchanged.
func GGUFName(hf string) string {
	var layer int
	if _, err := fmt.Sscanf(hf, "model.layers.%d.", &layer); err != nil {
		layer = -1
	}
	for r := range numRoles {
		if r.perLayer() != (layer >= 0) || StandardTensors[r].HF == "" {
			continue
		}
		if StandardTensors.name(r, layer, false) == hf {
			return StandardTensors.name(r, layer, true)
		}
	}
	return hf
}
