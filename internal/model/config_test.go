package model_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
)

// writeConfig writes the shipped tiny model's config.json with overrides
// (a nil value deletes the key) and returns its path.
func writeConfig(t *testing.T, name string, over map[string]any) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(modelsDir, name, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, v := range over {
		if v == nil {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var llama3 = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
	"high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

func with(m map[string]any, k string, v any) map[string]any {
	out := map[string]any{k: v}
	for mk, mv := range m {
		if mk != k {
			out[mk] = mv
		}
	}
	return out
}

// TestHFConfigRejects checks that every config.json feature the forward pass
// does not implement is a clear error naming it, not a silently wrong model.
func TestHFConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		over        map[string]any
		want        string
		unsupported bool
	}{
		{"rope linear", "tiny-llama-f32", map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2.0}}, `"linear"`, true},
		{"rope dynamic", "tiny-llama-f32", map[string]any{"rope_scaling": map[string]any{"rope_type": "dynamic", "factor": 2.0}}, "dynamic", true},
		{"rope yarn", "tiny-qwen3-f32", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, "yarn", true},
		{"rope longrope", "tiny-llama-f32", map[string]any{"rope_parameters": map[string]any{"rope_type": "longrope", "long_factor": []float64{1}}}, "longrope", true},
		{"llama3 on qwen3", "tiny-qwen3-f32", map[string]any{"rope_scaling": llama3}, "llama3", true},
		{"llama3 on qwen2", "tiny-qwen2-bf16", map[string]any{"rope_scaling": llama3}, "llama3", true},
		{"llama3 without factor", "tiny-llama-f32", map[string]any{"rope_scaling": with(llama3, "factor", nil)}, "missing factor", false},
		{"llama3 extra key", "tiny-llama-f32", map[string]any{"rope_scaling": with(llama3, "beta_fast", 32)}, "beta_fast", true},
		{"llama3 factor < 1", "tiny-llama-f32", map[string]any{"rope_scaling": with(llama3, "factor", 0.5)}, "factor 0.5", false},
		{"llama3 high ≤ low", "tiny-llama-f32", map[string]any{"rope_scaling": with(llama3, "high_freq_factor", 1.0)}, "high_freq_factor", false},
		{"llama3 partial rotary", "tiny-llama-f32", map[string]any{"rope_scaling": with(llama3, "partial_rotary_factor", 0.5)}, "partial_rotary_factor", true},
		{"rope_theta conflict", "tiny-qwen3-f32", map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e4}}, "conflicts", false},
		{"sliding window", "tiny-qwen2-bf16", map[string]any{"use_sliding_window": true}, "use_sliding_window", true},
		{"sliding layer types", "tiny-qwen3-f32", map[string]any{"layer_types": []string{"full_attention", "sliding_attention"}}, "sliding_attention", true},
		{"moe", "tiny-qwen3-f32", map[string]any{"num_experts": 8}, "mixture-of-experts", true},
		{"qwen3 moe type", "tiny-qwen3-f32", map[string]any{"model_type": "qwen3_moe", "architectures": nil}, "qwen3_moe", true},
		{"mistral", "tiny-llama-f32", map[string]any{"model_type": "mistral", "architectures": []string{"MistralForCausalLM"}}, "mistral", true},
		{"families disagree", "tiny-qwen3-f32", map[string]any{"model_type": "qwen2"}, "different families", false},
		{"no family", "tiny-qwen3-f32", map[string]any{"model_type": nil, "architectures": nil}, "model_type", false},
		{"attention bias on llama", "tiny-llama-f32", map[string]any{"attention_bias": true}, "attention_bias", true},
		{"mlp bias", "tiny-llama-f32", map[string]any{"mlp_bias": true}, "mlp_bias", true},
		{"gelu", "tiny-llama-f32", map[string]any{"hidden_act": "gelu"}, "gelu", true},
		{"fractional layers", "tiny-qwen3-f32", map[string]any{"num_hidden_layers": 2.5}, "num_hidden_layers", false},
		{"odd head_dim", "tiny-llama-f32", map[string]any{"head_dim": 15}, "head_dim 15", false},
		{"heads not a multiple", "tiny-llama-f32", map[string]any{"num_key_value_heads": 3}, "num_key_value_heads", false},
		{"negative vocab", "tiny-llama-f32", map[string]any{"vocab_size": -1}, "vocab_size", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := model.ConfigFromHF(writeConfig(t, tc.model, tc.over))
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("have %q; want it to contain %q", err, tc.want)
			}
			if tc.unsupported && !errors.Is(err, model.ErrUnsupported) {
				t.Errorf("error %q does not wrap ErrUnsupported", err)
			}
		})
	}
}

func TestHFConfigTooLarge(t *testing.T) {
	path := writeConfig(t, "tiny-qwen3-f32", nil)
	if err := os.Truncate(path, 16<<20+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	if _, err := model.ConfigFromHF(path); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a 16 MiB config.json: have %v; want a size error", err)
	}
}

// TestHFConfigFamilies checks the family chosen from model_type and
// architectures, HF's class defaults for absent keys, and the llama3
// scaling parameters.
func TestHFConfigFamilies(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		over        map[string]any
		arch        string
		headDim     int
		kvHeads     int
	}{
		{"qwen3 by both", "tiny-qwen3-f32", nil, model.ArchQwen3, 32, 2},
		{"qwen3 by architectures", "tiny-qwen3-f32", map[string]any{"model_type": nil}, model.ArchQwen3, 32, 2},
		{"qwen3 by model_type", "tiny-qwen3-f32", map[string]any{"architectures": nil}, model.ArchQwen3, 32, 2},
		{"qwen3 default head_dim 128", "tiny-qwen3-f32", map[string]any{"head_dim": nil}, model.ArchQwen3, 128, 2},
		{"qwen3 default kv heads 32", "tiny-qwen3-f32", map[string]any{"num_key_value_heads": nil, "num_attention_heads": 32}, model.ArchQwen3, 32, 32},
		{"qwen2", "tiny-qwen2-bf16", nil, model.ArchQwen2, 16, 2},
		{"llama derived head_dim", "tiny-llama-f32", map[string]any{"head_dim": nil}, model.ArchLlama, 16, 2},
		{"llama absent kv heads", "tiny-llama-f32", map[string]any{"num_key_value_heads": nil}, model.ArchLlama, 16, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := model.ConfigFromHF(writeConfig(t, tc.model, tc.over))
			if err != nil {
				t.Fatal(err)
			}
			if c.Arch != tc.arch || c.HeadDim != tc.headDim || c.KVHeads != tc.kvHeads {
				t.Errorf("arch, head_dim, kv heads: have %s, %d, %d; want %s, %d, %d", c.Arch, c.HeadDim, c.KVHeads, tc.arch, tc.headDim, tc.kvHeads)
			}
			fam, ok := model.FamilyOf(c.Arch)
			if !ok || c.QKNorm != fam.QKNorm || c.QKVBias != fam.QKVBias {
				t.Errorf("flags q/k norm %v, q/k/v bias %v; want the family's", c.QKNorm, c.QKVBias)
			}
		})
	}
	c, err := model.ConfigFromHF(writeConfig(t, "tiny-llama-f32", map[string]any{"rope_scaling": nil, "rope_parameters": with(llama3, "rope_theta", 1e6)}))
	if err != nil {
		t.Fatal(err)
	}
	want := model.Llama3RoPE{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8192}
	if c.Llama3 == nil || *c.Llama3 != want {
		t.Errorf("rope_parameters llama3: have %+v; want %+v", c.Llama3, want)
	}
}

// TestLlama3GGUFAndHFAgree checks that the shipped Llama 3.x model's two
// forms of the same scaling — the HF rope_scaling formula and llama.cpp's
// rope_freqs divisors in the GGUF — give the same frequencies, and that the
// scaling changes them (the golden test compares both with numpy).
func TestLlama3GGUFAndHFAgree(t *testing.T) {
	hf, err := model.LoadConfig(filepath.Join(modelsDir, "tiny-llama3-bf16"))
	if err != nil {
		t.Fatal(err)
	}
	gg, err := model.LoadConfig(filepath.Join(modelsDir, "tiny-llama3-bf16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if hf.Llama3 == nil || gg.RoPEFreqFactors == nil {
		t.Fatalf("scaling: HF %+v, GGUF factors %v; want both set", hf.Llama3, gg.RoPEFreqFactors)
	}
	a, b := hf.InvFreq(), gg.InvFreq()
	plain := *hf
	plain.Llama3 = nil
	p := plain.InvFreq()
	changed := 0
	for i := range a {
		if d := math.Abs(float64(a[i]-b[i])) / float64(a[i]); d > 1e-6 {
			t.Errorf("inv_freq[%d]: HF %g, GGUF %g", i, a[i], b[i])
		}
		if a[i] != p[i] {
			changed++
		}
	}
	if changed == 0 {
		t.Error("llama3 scaling changed no frequency")
	}
}

// extraTensor is an F32 tensor added to a rewritten GGUF.
type extraTensor struct {
	name string
	vals []float32
}

// rewriteGGUF copies the GGUF at src to dst with the metadata in kv set (a
// nil value deletes the key) and the tensors in add appended.
func rewriteGGUF(t *testing.T, src, dst string, kv map[string]any, add []extraTensor) {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, e := range f.KV {
		v, ok := kv[e.Key]
		if !ok {
			v = e.Value
		}
		if v != nil {
			if err := w.Add(e.Key, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, v := range kv {
		if _, had := f.Value(k); !had && v != nil {
			if err := w.Add(k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensor(ti.Name, ti.Type, ti.Shape, ti.Data); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range add {
		data, err := dtype.Quantize(dtype.F32, nil, e.vals)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(e.name, dtype.F32, []uint64{uint64(len(e.vals))}, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(dst); err != nil {
		t.Fatal(err)
	}
}

// TestGGUFRejects checks the GGUF side: tensors and metadata of features a
// family does not have are errors naming them, as is a malformed rope_freqs.
func TestGGUFRejects(t *testing.T) {
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	for _, tc := range []struct {
		name, model string
		kv          map[string]any
		add         []extraTensor
		want        string
		unsupported bool
	}{
		{"rope_freqs in qwen3", "tiny-qwen3-f32", nil, []extraTensor{{"rope_freqs.weight", ones(16)}}, "rope_freqs.weight in a qwen3 model", true},
		{"q bias in llama", "tiny-llama-f32", nil, []extraTensor{{"blk.0.attn_q.bias", ones(64)}}, "blk.0.attn_q.bias", true},
		{"o bias", "tiny-qwen2-bf16", nil, []extraTensor{{"blk.0.attn_output.bias", ones(64)}}, "o_proj bias", true},
		{"rope scaling linear", "tiny-llama-f32", map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(2)}, nil, "rope scaling", true},
		{"sliding window", "tiny-qwen2-bf16", map[string]any{"qwen2.attention.sliding_window": uint32(64)}, nil, "sliding-window", true},
		{"unknown architecture", "tiny-llama-f32", map[string]any{"general.architecture": "mistral"}, nil, `"mistral"`, true},
		{"rope_freqs shape", "tiny-llama-f32", nil, []extraTensor{{"rope_freqs.weight", ones(9)}}, "want [8]", false},
		{"rope_freqs zero", "tiny-llama-f32", nil, []extraTensor{{"rope_freqs.weight", append(ones(7), 0)}}, "positive finite divisor", false},
		{"missing eps", "tiny-qwen3-f32", map[string]any{"qwen3.attention.layer_norm_rms_epsilon": nil}, nil, "layer_norm_rms_epsilon", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			rewriteGGUF(t, filepath.Join(modelsDir, tc.model+".gguf"), path, tc.kv, tc.add)
			m, err := model.Load(path, model.Options{Threads: 1})
			if err == nil {
				m.Close()
				t.Fatalf("loaded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("have %q; want it to contain %q", err, tc.want)
			}
			if tc.unsupported && !errors.Is(err, model.ErrUnsupported) {
				t.Errorf("error %q does not wrap ErrUnsupported", err)
			}
		})
	}
}

// TestRealConfigs parses the config.json files of the drafters users pick
// (copied from their Hugging Face repositories, numbers only).
func TestRealConfigs(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       model.Config
	}{
		{"Llama-3.2-1B", `{"architectures":["LlamaForCausalLM"],"attention_bias":false,"attention_dropout":0.0,
			"bos_token_id":128000,"eos_token_id":[128001,128008,128009],"head_dim":64,"hidden_act":"silu",
			"hidden_size":2048,"initializer_range":0.02,"intermediate_size":8192,"max_position_embeddings":131072,
			"mlp_bias":false,"model_type":"llama","num_attention_heads":32,"num_hidden_layers":16,
			"num_key_value_heads":8,"pretraining_tp":1,"rms_norm_eps":1e-05,"rope_scaling":{"factor":32.0,
			"high_freq_factor":4.0,"low_freq_factor":1.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},
			"rope_theta":500000.0,"tie_word_embeddings":true,"torch_dtype":"bfloat16","use_cache":true,"vocab_size":128256}`,
			model.Config{Arch: model.ArchLlama, Hidden: 2048, Intermediate: 8192, Layers: 16, Heads: 32, KVHeads: 8,
				HeadDim: 64, Vocab: 128256, MaxContext: 131072, RMSEps: 1e-5, RopeTheta: 500000, TiedEmbed: true,
				Llama3: &model.Llama3RoPE{Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8192},
				BOS:    128000, EOS: 128001}},
		{"Qwen3-0.6B", `{"architectures":["Qwen3ForCausalLM"],"attention_bias":false,"attention_dropout":0.0,
			"bos_token_id":151643,"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":1024,
			"initializer_range":0.02,"intermediate_size":3072,"max_position_embeddings":40960,"max_window_layers":28,
			"model_type":"qwen3","num_attention_heads":16,"num_hidden_layers":28,"num_key_value_heads":8,
			"rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":1000000,"sliding_window":null,
			"tie_word_embeddings":true,"torch_dtype":"bfloat16","use_cache":true,"use_sliding_window":false,"vocab_size":151936}`,
			model.Config{Arch: model.ArchQwen3, Hidden: 1024, Intermediate: 3072, Layers: 28, Heads: 16, KVHeads: 8,
				HeadDim: 128, Vocab: 151936, MaxContext: 40960, RMSEps: 1e-6, RopeTheta: 1e6, TiedEmbed: true, QKNorm: true,
				BOS: 151643, EOS: 151645}},
		{"Qwen2.5-0.5B", `{"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.0,"bos_token_id":151643,
			"eos_token_id":151643,"hidden_act":"silu","hidden_size":896,"initializer_range":0.02,"intermediate_size":4864,
			"max_position_embeddings":32768,"max_window_layers":24,"model_type":"qwen2","num_attention_heads":14,
			"num_hidden_layers":24,"num_key_value_heads":2,"rms_norm_eps":1e-06,"rope_theta":1000000.0,
			"sliding_window":32768,"tie_word_embeddings":true,"torch_dtype":"bfloat16","use_cache":true,
			"use_sliding_window":false,"vocab_size":151936}`,
			model.Config{Arch: model.ArchQwen2, Hidden: 896, Intermediate: 4864, Layers: 24, Heads: 14, KVHeads: 2,
				HeadDim: 64, Vocab: 151936, MaxContext: 32768, RMSEps: 1e-6, RopeTheta: 1e6, TiedEmbed: true, QKVBias: true,
				BOS: 151643, EOS: 151643}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.json")
			if err := os.WriteFile(path, []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := model.ConfigFromHF(path)
			if err != nil {
				t.Fatal(err)
			}
			have, want := *c, tc.want
			if (have.Llama3 == nil) != (want.Llama3 == nil) || (have.Llama3 != nil && *have.Llama3 != *want.Llama3) {
				t.Errorf("llama3: have %+v; want %+v", have.Llama3, want.Llama3)
			}
			have.Llama3, want.Llama3 = nil, nil
			h, w := fmt.Sprintf("%+v", have), fmt.Sprintf("%+v", want)
			h, w = h[:strings.Index(h, " keys:")], w[:strings.Index(w, " keys:")] // the unexported key names
			if h != w {
				t.Errorf("have %s\nwant %s", h, w)
			}
		})
	}
}
