package quant

import (
	"fmt"
	"slices"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// TestTensorType checks the recipes against llama.cpp's rules for a 28-layer
// model, written out by hand from llama_tensor_get_type: Q4_K_M and Q5_K_M
// give attn_v and ffn_down Q6_K in layers i < 28/8, i ≥ 7·28/8 and
// (i − 28/8) % 3 == 2; the output (or a tied token_embd) is Q6_K in every K
// recipe; pure recipes put every matrix in their type; norms and biases F32.
func TestTensorType(t *testing.T) {
	more := []int{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}
	for _, tc := range []struct {
		recipe, name string
		want         dtype.Type
	}{
		{"q8_0", "output.weight", dtype.Q8_0},
		{"q8_0", "blk.3.attn_v.weight", dtype.Q8_0},
		{"q4_0", "output.weight", dtype.Q4_0},
		{"q4_0", "token_embd.weight", dtype.Q4_0},
		{"q4_0", "blk.0.attn_norm.weight", dtype.F32},
		{"q4_0", "blk.0.attn_q.bias", dtype.F32},
		{"bf16", "blk.0.ffn_up.weight", dtype.BF16},
		{"f16", "output.weight", dtype.F16},
		{"q6_k", "blk.0.ffn_down.weight", typeQ6K},
		{"q6_k", "token_embd.weight", typeQ6K},
		{"q4_k_m", "output.weight", typeQ6K},
		{"q4_k_m", "token_embd.weight", typeQ4K},
		{"q4_k_m", "blk.3.attn_q.weight", typeQ4K},
		{"q4_k_m", "blk.0.attn_k.weight", typeQ4K},
		{"q4_k_m", "blk.0.attn_output.weight", typeQ4K},
		{"q4_k_m", "blk.27.ffn_gate.weight", typeQ4K},
		{"q5_k_m", "output.weight", typeQ6K},
		{"q5_k_m", "blk.4.ffn_up.weight", typeQ5K},
	} {
		have, err := TensorType(tc.recipe, tc.name, 28)
		if err != nil || have != tc.want {
			t.Errorf("%s %s: have %v (%v); want %v", tc.recipe, tc.name, have, err, tc.want)
		}
	}
	for _, recipe := range []string{"q4_k_m", "q5_k_m"} {
		base := map[string]dtype.Type{"q4_k_m": typeQ4K, "q5_k_m": typeQ5K}[recipe]
		for i := range 28 {
			for _, role := range []string{"attn_v", "ffn_down"} {
				want := base
				if slices.Contains(more, i) {
					want = typeQ6K
				}
				name := fmt.Sprintf("blk.%d.%s.weight", i, role)
				if have, err := TensorType(recipe, name, 28); err != nil || have != want {
					t.Errorf("%s %s: have %v (%v); want %v", recipe, name, have, err, want)
				}
			}
		}
	}
	for _, bad := range []string{"blk.28.attn_q.weight", "blk.0.mystery.weight", "rope_freqs.weight"} {
		if _, err := TensorType("q4_0", bad, 28); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
	if _, err := TensorType("q3_k_m", "output.weight", 28); err == nil {
		t.Error("unknown recipe: want an error")
	}
}

// TestPlan: in a tied model token_embd takes the output's type; a Q6_K row
// that is not a whole number of 256-blocks falls back to Q8_0 as llama.cpp
// does; 1-D tensors stay F32.
func TestPlan(t *testing.T) {
	r, _ := Lookup("q4_k_m")
	tied := []TensorSpec{{"token_embd.weight", []uint64{2048, 151936}}, {"output_norm.weight", []uint64{2048}}}
	types, err := r.Plan(tied, 28)
	if err != nil || types[0] != typeQ6K || types[1] != dtype.F32 {
		t.Errorf("tied: have %v (%v); want [Q6_K F32]", types, err)
	}
	untied := append(tied, TensorSpec{"output.weight", []uint64{2048, 151936}})
	types, err = r.Plan(untied, 28)
	if err != nil || types[0] != typeQ4K || types[2] != typeQ6K {
		t.Errorf("untied: have %v (%v); want [Q4_K F32 Q6_K]", types, err)
	}
	odd := []TensorSpec{{"output.weight", []uint64{96, 10}}}
	if types, err := r.Plan(odd, 28); err != nil || types[0] != dtype.Q8_0 {
		t.Errorf("output with 96-wide rows: have %v (%v); want Q8_0", types, err)
	}
	if types, err := r.Plan([]TensorSpec{{"blk.0.attn_q.weight", []uint64{96, 10}}}, 28); err != nil || types[0] != dtype.Q5_0 {
		t.Errorf("Q4_K with 96-wide rows: have %v (%v); want llama.cpp's fallback Q5_0", types, err)
	}
	if _, err := r.Plan([]TensorSpec{{"blk.0.attn_q.weight", []uint64{80, 10}}}, 28); err == nil {
		t.Error("Q4_K with 80-wide rows: want an error (not even 32-blocks)")
	}
}

// TestRecipesOrder: highest quality first, each K recipe unsupported exactly
// while its types are.
func TestRecipesOrder(t *testing.T) {
	var names []string
	for _, r := range Recipes() {
		names = append(names, r.Name)
		if r.Supported() != (r.Base.Supported() && typeQ6K.Supported()) && r.mixed {
			t.Errorf("%s: Supported() = %v", r.Name, r.Supported())
		}
		if !r.Supported() {
			t.Logf("%s: not supported yet (types %v)", r.Name, r.Types())
		}
	}
	want := []string{"f32", "bf16", "f16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0"}
	if !slices.Equal(names, want) {
		t.Errorf("have %v; want %v", names, want)
	}
}
