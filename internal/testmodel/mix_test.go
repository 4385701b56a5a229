package testmodel

import (
	"fmt"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
)

// TestTensorTypeQ4KM checks the Q4_K_M rule on a 28-layer model (Qwen3-1.7B)
// against the layers llama.cpp's use_more_bits selects, listed by hand:
// the first 3 (n/8), the last 4 (from 7n/8 = 24) and every third from 5.
func TestTensorTypeQ4KM(t *testing.T) {
	more := map[int]bool{0: true, 1: true, 2: true, 5: true, 8: true, 11: true, 14: true, 17: true, 20: true, 23: true,
		24: true, 25: true, 26: true, 27: true}
	for _, recipe := range []string{"q4_k_m", "q5_k_m"} {
		base := map[string]dtype.Type{"q4_k_m": dtype.Q4_K, "q5_k_m": dtype.Q5_K}[recipe]
		for i := range 28 {
			for _, tn := range []string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"} {
				name := fmt.Sprintf("blk.%d.%s.weight", i, tn)
				want := base
				if more[i] && (tn == "attn_v" || tn == "ffn_down") {
					want = dtype.Q6_K
				}
				if have, err := TensorType(recipe, name, 28); err != nil || have != want {
					t.Errorf("%s %s: %v, %v; want %v", recipe, name, have, err, want)
				}
			}
		}
		if have, _ := TensorType(recipe, "output.weight", 28); have != dtype.Q6_K {
			t.Errorf("%s output: %v; want Q6_K", recipe, have)
		}
		if have, _ := TensorType(recipe, "token_embd.weight", 28); have != base {
			t.Errorf("%s untied token_embd: %v; want %v", recipe, have, base)
		}
	}
	if have, _ := TensorType("q6_k", "blk.3.ffn_up.weight", 28); have != dtype.Q6_K {
		t.Errorf("q6_k: %v", have)
	}
	if _, err := TensorType("q4_k_x", "output.weight", 28); err == nil {
		t.Error("unknown recipe: want error")
	}
}
