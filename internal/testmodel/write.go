// Writing a Spec as GGUF and as an HF directory.
package testmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/safetensors"
)

// ropeTheta is the RoPE base of every generated model.
const ropeTheta = 1e6

// MetaWriter adds extra metadata (e.g. a tokenizer) to a GGUF being written.
type MetaWriter func(w *gguf.Writer) error

// WriteGGUF writes the model as one GGUF file in llama.cpp's layout: matrices
// in s.Type, 1-D tensors in F32, llama Q/K rows permuted for interleaved RoPE.
func (s Spec) WriteGGUF(path string, extra ...MetaWriter) error {
	ws, err := s.gen()
	if err != nil {
		return err
	}
	w := gguf.NewWriter()
	a := s.Arch
	// llama.cpp's llama_ftype of the file (pure K types as their "_S" mix).
	ftype := map[dtype.Type]uint32{dtype.F32: 0, dtype.F16: 1, dtype.Q4_0: 2, dtype.Q8_0: 7, dtype.BF16: 32,
		dtype.Q4_1: 3, dtype.Q5_0: 8, dtype.Q5_1: 9, dtype.Q2_K: 10, dtype.Q3_K: 11, dtype.Q4_K: 14, dtype.Q5_K: 16, dtype.Q6_K: 18}[s.Type]
	if r, ok := map[string]uint32{"q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}[s.Recipe]; ok {
		ftype = r
	}
	meta := []struct {
		k string
		v any
	}{
		{"general.architecture", a},
		{"general.name", s.Name},
		{"general.file_type", ftype},
		{a + ".context_length", uint32(s.MaxContext)},
		{a + ".embedding_length", uint32(s.Hidden)},
		{a + ".feed_forward_length", uint32(s.Intermediate)},
		{a + ".block_count", uint32(s.Layers)},
		{a + ".attention.head_count", uint32(s.Heads)},
		{a + ".attention.head_count_kv", uint32(s.KVHeads)},
		{a + ".rope.freq_base", float32(ropeTheta)},
		{a + ".attention.layer_norm_rms_epsilon", float32(1e-6)},
	}
	if a == model.ArchQwen3 || s.HeadDim != s.Hidden/s.Heads {
		meta = append(meta, struct {
			k string
			v any
		}{a + ".attention.key_length", uint32(s.HeadDim)}, struct {
			k string
			v any
		}{a + ".attention.value_length", uint32(s.HeadDim)})
	}
	for _, kv := range meta {
		if err := w.Add(kv.k, kv.v); err != nil {
			return err
		}
	}
	for _, e := range extra {
		if err := e(w); err != nil {
			return err
		}
	}
	for _, t := range ws {
		typ := dtype.F32
		if t.matrix {
			typ = t.typ
		}
		data := t.enc // the K-quant encoders are not idempotent: write the bytes vals came from
		if data == nil {
			var err error
			if data, err = dtype.Quantize(typ, nil, t.vals); err != nil {
				return err
			}
		}
		name := model.GGUFName(t.name)
		if a == model.ArchLlama && (strings.HasSuffix(name, "attn_q.weight") || strings.HasSuffix(name, "attn_k.weight")) {
			heads := s.Heads
			if strings.HasSuffix(name, "attn_k.weight") {
				heads = s.KVHeads
			}
			data = model.PermuteRows(data, heads, s.HeadDim, len(data)/t.shape[0])
		}
		shape := make([]uint64, len(t.shape)) // ggml order: innermost first
		for i, d := range t.shape {
			shape[len(shape)-1-i] = uint64(d)
		}
		if err := w.AddTensor(name, typ, shape, data); err != nil {
			return err
		}
	}
	if s.Llama3 != nil {
		data, err := dtype.Quantize(dtype.F32, nil, llamaCppRoPEFactors(s))
		if err != nil {
			return err
		}
		if err := w.AddTensor("rope_freqs.weight", dtype.F32, []uint64{uint64(s.HeadDim / 2)}, data); err != nil {
			return err
		}
	}
	return w.WriteFile(path)
}

// llamaCppRoPEFactors are the divisors of the RoPE frequencies that
// llama.cpp's converter writes as rope_freqs for rope_scaling llama3
// (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors), computed in
// float32 as it does, from the spec's own original_max_position_embeddings.
func llamaCppRoPEFactors(s Spec) []float32 {
	r := s.Llama3
	lowWavelen := r.OriginalMaxPos / r.LowFreqFactor
	highWavelen := r.OriginalMaxPos / r.HighFreqFactor
	out := make([]float32, s.HeadDim/2)
	for i := range out {
		freq := float32(1 / math.Pow(ropeTheta, float64(2*i)/float64(s.HeadDim)))
		wavelen := 2 * math.Pi / float64(freq)
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(r.Factor)
		default:
			smooth := (r.OriginalMaxPos/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/r.Factor + smooth))
		}
	}
	return out
}

// WriteHF writes config.json and the weights as safetensors into dir, in the
// dtype that holds the spec's numbers exactly (F32 for quantized specs).
func (s Spec) WriteHF(dir string) error {
	ws, err := s.gen()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if s.RefGGUF {
		return s.writeConfig(dir, dtype.F32)
	}
	ht := s.hfType()
	stName := map[dtype.Type]string{dtype.F32: "F32", dtype.F16: "F16", dtype.BF16: "BF16"}[ht]
	tensors := make([]safetensors.Tensor, 0, len(ws))
	for _, t := range ws {
		data, err := dtype.Quantize(ht, nil, t.vals)
		if err != nil {
			return err
		}
		shape := make([]int64, len(t.shape))
		for i, d := range t.shape {
			shape[i] = int64(d)
		}
		tensors = append(tensors, safetensors.Tensor{Name: t.name, DType: stName, Shape: shape, Data: data})
	}
	if s.Shards > 1 {
		var total int64
		for _, t := range tensors {
			total += int64(len(t.Data))
		}
		err = safetensors.WriteSharded(dir, tensors, total/int64(s.Shards)+1)
	} else {
		err = safetensors.Write(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"})
	}
	if err != nil {
		return err
	}
	return s.writeConfig(dir, ht)
}

// writeConfig writes dir/config.json for weights stored as ht.
func (s Spec) writeConfig(dir string, ht dtype.Type) error {
	fam, ok := model.FamilyOf(s.Arch)
	if !ok {
		return fmt.Errorf("testmodel %s: unknown architecture %q", s.Name, s.Arch)
	}
	archName := map[string]string{model.ArchQwen3: "Qwen3ForCausalLM", model.ArchQwen2: "Qwen2ForCausalLM", model.ArchLlama: "LlamaForCausalLM"}[s.Arch]
	torchDType := map[dtype.Type]string{dtype.F32: "float32", dtype.F16: "float16", dtype.BF16: "bfloat16"}[ht]
	cfg := map[string]any{
		"architectures":           []string{archName},
		"model_type":              s.Arch,
		"hidden_size":             s.Hidden,
		"intermediate_size":       s.Intermediate,
		"num_hidden_layers":       s.Layers,
		"num_attention_heads":     s.Heads,
		"num_key_value_heads":     s.KVHeads,
		"head_dim":                s.HeadDim,
		"vocab_size":              s.Vocab,
		"max_position_embeddings": s.MaxContext,
		"rms_norm_eps":            1e-6,
		"rope_theta":              ropeTheta,
		"rope_scaling":            nil,
		"tie_word_embeddings":     s.Tied,
		"hidden_act":              "silu",
		"attention_bias":          fam.QKVBias,
		"torch_dtype":             torchDType,
		// Not an HF key: tells the numpy reference that the GGUF copy holds
		// these numbers in this type (so llama.cpp-style activation rounding applies).
		"draftd_gguf_type": lower(s.Type.String()),
	}
	if s.Recipe != "" {
		cfg["draftd_gguf_type"] = s.Recipe
	}
	if s.RefGGUF {
		// Not an HF key either: the weights are those of this GGUF file
		// (the reference decodes its blocks itself).
		cfg["draftd_gguf_file"] = "../" + s.Name + ".gguf"
	}
	if s.Arch == model.ArchQwen2 {
		cfg["use_sliding_window"] = false
	}
	if r := s.Llama3; r != nil {
		cfg["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": r.Factor, "low_freq_factor": r.LowFreqFactor,
			"high_freq_factor": r.HighFreqFactor, "original_max_position_embeddings": r.OriginalMaxPos}
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644)
}
