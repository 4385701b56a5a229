// Package testmodel makes deterministic random decoders with the exact
// Qwen3/Qwen2/Llama architecture, written both as a GGUF file (llama.cpp
// names, layouts and metadata) and as an HF safetensors directory holding the
// identical numbers. They exist to test and benchmark the engine; they are
// not language models and their output means nothing.
//
// Weights are drawn so that logits are peaked (top-2 margins well above
// rounding noise) and continuations vary: norm weights ≠ 1, the residual
// contributions of attention and MLP comparable to the embedding, and values
// chosen to be exactly representable in the target storage type, so that the
// GGUF (quantized) and the HF (f32/f16/bf16) copies encode the same model.
package testmodel

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/model"
)

// Spec describes one random model.
type Spec struct {
	Name         string
	Arch         string // model.ArchQwen3, ArchQwen2 or ArchLlama
	Hidden       int
	Intermediate int
	Layers       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Vocab        int
	MaxContext   int
	Tied         bool
	Type         dtype.Type // storage type of the matrices in the GGUF file
	// Recipe, when set, chooses each matrix's type instead: a llama.cpp mix
	// ("q4_k_m", see TensorType) or "kmix" (every K-quant and Q4_1/Q5_0/Q5_1
	// type on some matrix, for tests). Type is then the recipe's base type.
	Recipe string
	// RefGGUF makes WriteHF write only config.json, pointing the numpy
	// reference at the GGUF file (../Name.gguf) for the weights: the shipped
	// K-quant models, whose F32 copy would be large.
	RefGGUF bool
	Seed    uint64
	Shards  int // HF safetensors shards (≤ 1: one model.safetensors)
	// Decay, when in (0, 1), scales the residual contributions (o_proj and
	// down_proj) of layer i by Decay^i, so that the model truncated to its
	// first layers is a close approximation of the whole (a demo drafter).
	Decay float64
	// Llama3, when set, is the Llama 3.x RoPE scaling of the model: HF
	// rope_scaling {rope_type: llama3, ...}, and in GGUF llama.cpp's
	// rope_freqs tensor.
	Llama3 *model.Llama3RoPE
}

// Tiny is the small model of each architecture used by fidelity tests.
func Tiny(arch string, t dtype.Type) Spec {
	s := Spec{Arch: arch, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2,
		HeadDim: 16, Vocab: 512, MaxContext: 256, Type: t, Seed: 1}
	if arch == model.ArchQwen3 {
		s.HeadDim, s.Tied = 32, true // head_dim independent of hidden/heads
	}
	s.Name = fmt.Sprintf("tiny-%s-%s", arch, lower(t.String()))
	return s
}

// TinyLlama3 is the small Llama 3.x-style model: tied embeddings (as
// Llama-3.2-1B/3B) and rope_scaling llama3, with an original context of 64
// positions so that the three frequency bands of the scaling (kept,
// smoothed, divided) all occur within the 256-position context.
func TinyLlama3(t dtype.Type) Spec {
	s := Tiny(model.ArchLlama, t)
	s.Name = "tiny-llama3-" + lower(t.String())
	s.Tied = true
	s.Llama3 = &model.Llama3RoPE{Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 64}
	return s
}

// TinyK is the smallest qwen3 whose every matrix has rows of 256 (the
// K-quant super-block), with one layer, in a recipe (see Spec.Recipe) or type name.
func TinyK(recipe string) (Spec, error) {
	s := Spec{Arch: model.ArchQwen3, Hidden: 256, Intermediate: 256, Layers: 1, Heads: 4, KVHeads: 1,
		HeadDim: 64, Vocab: 256, MaxContext: 256, Tied: true, Seed: 3}
	s.Name = "tiny-qwen3k-" + recipe
	s.RefGGUF = true
	return s.WithRecipe(recipe)
}

// WithRecipe sets the matrix types from a recipe or type name (Spec.Recipe).
func (s Spec) WithRecipe(recipe string) (Spec, error) {
	if recipe == "kmix" {
		s.Recipe, s.Type = recipe, dtype.Q4_K
		return s, nil
	}
	t, err := TensorType(recipe, "blk.0.attn_q.weight", 1)
	if err != nil {
		return s, err
	}
	if _, perr := dtype.Parse(recipe); perr == nil {
		s.Recipe, s.Type = "", t
	} else {
		s.Recipe, s.Type = recipe, t
	}
	return s, nil
}

// kmixTypes gives the i-th matrix of a "kmix" spec (file order: embedding,
// then per layer q, k, v, o, gate, up, down) its type.
var kmixTypes = []dtype.Type{dtype.Q4_1, dtype.Q2_K, dtype.Q3_K, dtype.Q5_0, dtype.Q4_K, dtype.Q5_K, dtype.Q5_1, dtype.Q6_K}

// matrixType is the storage type of the i-th matrix (HF name hf, cols columns).
func (s Spec) matrixType(i int, hf string, cols int) (dtype.Type, error) {
	switch s.Recipe {
	case "":
		return s.Type, nil
	case "kmix":
		return kmixTypes[i%len(kmixTypes)], nil
	}
	name := model.GGUFName(hf)
	if s.Tied && name == "token_embd.weight" {
		name = "output.weight" // the tied embedding is the output matrix
	}
	t, err := TensorType(s.Recipe, name, s.Layers)
	if err != nil {
		return 0, err
	}
	if cols%t.BlockSize() != 0 { // llama.cpp's fallback for short rows
		t = map[dtype.Type]dtype.Type{dtype.Q2_K: dtype.Q4_0, dtype.Q3_K: dtype.Q4_0, dtype.Q4_K: dtype.Q5_0, dtype.Q5_K: dtype.Q5_1, dtype.Q6_K: dtype.Q8_0}[t]
	}
	return t, nil
}

// Qwen3_06B has the shapes of Qwen3-0.6B.
func Qwen3_06B(t dtype.Type) Spec {
	return Spec{Name: "qwen3-0.6b-random-" + lower(t.String()), Arch: model.ArchQwen3, Hidden: 1024, Intermediate: 3072,
		Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, Vocab: 151936, MaxContext: 40960, Tied: true, Type: t, Seed: 6}
}

// Qwen3_17B has the shapes of Qwen3-1.7B.
func Qwen3_17B(t dtype.Type) Spec {
	return Spec{Name: "qwen3-1.7b-random-" + lower(t.String()), Arch: model.ArchQwen3, Hidden: 2048, Intermediate: 6144,
		Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, Vocab: 151936, MaxContext: 40960, Tied: true, Type: t, Seed: 17}
}

// ByName returns the spec of a named shape: tiny-ARCH, qwen3-0.6b, qwen3-1.7b.
func ByName(shape string, t dtype.Type) (Spec, error) {
	switch shape {
	case "qwen3-0.6b":
		return Qwen3_06B(t), nil
	case "qwen3-1.7b":
		return Qwen3_17B(t), nil
	case "tiny-qwen3":
		return Tiny(model.ArchQwen3, t), nil
	case "tiny-qwen2":
		return Tiny(model.ArchQwen2, t), nil
	case "tiny-llama":
		return Tiny(model.ArchLlama, t), nil
	case "tiny-llama3":
		return TinyLlama3(t), nil
	}
	return Spec{}, fmt.Errorf("unknown model shape %q (want qwen3-0.6b, qwen3-1.7b, tiny-qwen3, tiny-qwen2, tiny-llama or tiny-llama3)", shape)
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// hfType is the safetensors dtype that holds Type's numbers exactly.
func (s Spec) hfType() dtype.Type {
	switch s.Type {
	case dtype.F16, dtype.BF16:
		return s.Type
	}
	return dtype.F32
}

// weight is one generated tensor: its HF name, HF shape and exact values.
type weight struct {
	name   string
	shape  []int     // HF order
	vals   []float32 // exactly representable in the storage type
	matrix bool
	typ    dtype.Type // storage type in the GGUF file
	enc    []byte     // matrices: vals encoded as typ (the GGUF bytes)
}

func rng(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// gen builds every tensor of the spec, in file order.
func (s Spec) gen() ([]weight, error) {
	if s.Hidden%dtype.QK != 0 || s.Intermediate%dtype.QK != 0 || (s.Heads*s.HeadDim)%dtype.QK != 0 {
		return nil, fmt.Errorf("testmodel %s: hidden, intermediate and heads·head_dim must be multiples of %d", s.Name, dtype.QK)
	}
	fam, ok := model.FamilyOf(s.Arch)
	if !ok {
		return nil, fmt.Errorf("testmodel %s: unknown architecture %q", s.Name, s.Arch)
	}
	var ws []weight
	// matrix draws N(0, std²) and rounds through the storage type.
	nmat := 0
	matrix := func(name string, rows, cols int, std float64) error {
		typ, err := s.matrixType(nmat, name, cols)
		if err != nil {
			return err
		}
		nmat++
		r := rng(s.Seed, name)
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(r.NormFloat64() * std)
		}
		enc, err := quantizeRows(typ, v, rows, cols)
		if err != nil {
			return fmt.Errorf("testmodel %s: %s: %w", s.Name, name, err)
		}
		if err := dtype.Dequantize(typ, v, enc); err != nil {
			return err
		}
		ws = append(ws, weight{name: name, shape: []int{rows, cols}, vals: v, matrix: true, typ: typ, enc: enc})
		return nil
	}
	// vector draws values on a grid of 1/64 that f16 and bf16 hold exactly.
	vector := func(name string, n int, center, spread float64) {
		r := rng(s.Seed, name)
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Round((center+spread*(2*r.Float64()-1))*64) / 64)
		}
		ws = append(ws, weight{name: name, shape: []int{n}, vals: v})
	}
	h, q, kv, ff := s.Hidden, s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.Intermediate
	// Tied logits have std ≈ 6·(norm weight): peaked, but not one-hot.
	embStd := 6 / math.Sqrt(float64(h))
	if err := matrix("model.embed_tokens.weight", s.Vocab, h, embStd); err != nil {
		return nil, err
	}
	for i := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		gain := 1.0
		if s.Decay > 0 && s.Decay < 1 {
			gain = math.Pow(s.Decay, float64(i))
		}
		vector(p+"input_layernorm.weight", h, 1, 0.5)
		for _, m := range []struct {
			n    string
			r, c int
			std  float64
		}{
			{"self_attn.q_proj.weight", q, h, 1 / math.Sqrt(float64(h))},
			{"self_attn.k_proj.weight", kv, h, 1 / math.Sqrt(float64(h))},
			{"self_attn.v_proj.weight", kv, h, 1 / math.Sqrt(float64(h))},
			{"self_attn.o_proj.weight", h, q, gain * 12 * embStd / math.Sqrt(float64(q))},
		} {
			if err := matrix(p+m.n, m.r, m.c, m.std); err != nil {
				return nil, err
			}
		}
		if fam.QKVBias {
			vector(p+"self_attn.q_proj.bias", q, 0, 0.5)
			vector(p+"self_attn.k_proj.bias", kv, 0, 0.5)
			vector(p+"self_attn.v_proj.bias", kv, 0, 0.5)
		}
		if fam.QKNorm {
			vector(p+"self_attn.q_norm.weight", s.HeadDim, 1, 0.5)
			vector(p+"self_attn.k_norm.weight", s.HeadDim, 1, 0.5)
		}
		vector(p+"post_attention_layernorm.weight", h, 1, 0.5)
		for _, m := range []struct {
			n    string
			r, c int
			std  float64
		}{
			{"mlp.gate_proj.weight", ff, h, 1 / math.Sqrt(float64(h))},
			{"mlp.up_proj.weight", ff, h, 1 / math.Sqrt(float64(h))},
			{"mlp.down_proj.weight", h, ff, gain * 16 * embStd / math.Sqrt(float64(ff))},
		} {
			if err := matrix(p+m.n, m.r, m.c, m.std); err != nil {
				return nil, err
			}
		}
	}
	vector("model.norm.weight", h, 1, 0.5)
	if !s.Tied {
		// Logit std ≈ 6 after the final norm: peaked, but not one-hot.
		if err := matrix("lm_head.weight", s.Vocab, h, 6/math.Sqrt(float64(h))); err != nil {
			return nil, err
		}
	}
	return ws, nil
}

// quantizeRows is dtype.Quantize of a (rows, cols) matrix, rows split over
// the CPUs (the K-quant encoders are slow enough for a 1.7B model to matter).
func quantizeRows(typ dtype.Type, v []float32, rows, cols int) ([]byte, error) {
	rb, err := typ.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	out := make([]byte, rows*rb)
	nw := min(runtime.GOMAXPROCS(0), max(1, rows/64))
	errs := make([]error, nw)
	var wg sync.WaitGroup
	for w := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lo, hi := rows*w/nw, rows*(w+1)/nw
			_, errs[w] = dtype.Quantize(typ, out[lo*rb:lo*rb:hi*rb], v[lo*cols:hi*cols])
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
