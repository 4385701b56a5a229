package testmodel

import (
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/quant"
)

// TestTensorType checks that a type name types every matrix, that a mix
// gives what internal/quant's recipe gives (whose rule quant's own tests
// check against llama.cpp's), and that anything else is an error.
func TestTensorType(t *testing.T) {
	for _, name := range []string{"output.weight", "token_embd.weight", "blk.2.ffn_down.weight", "blk.3.attn_q.weight"} {
		if have, err := TensorType("q5_0", name, 28); err != nil || have != dtype.Q5_0 {
			t.Errorf("q5_0 %s: %v, %v; want Q5_0", name, have, err)
		}
		for _, recipe := range Recipes {
			want, werr := quant.TensorType(recipe, name, 28)
			if have, err := TensorType(recipe, name, 28); err != nil || werr != nil || have != want {
				t.Errorf("%s %s: %v, %v; want %v, %v", recipe, name, have, err, want, werr)
			}
		}
	}
	if have, err := TensorType("q4_k_m", "blk.2.ffn_down.weight", 28); err != nil || have != dtype.Q6_K {
		t.Errorf("q4_k_m layer 2 ffn_down: %v, %v; want Q6_K (a more-bits layer)", have, err)
	}
	for _, bad := range []string{"q4_k_x", "", "q8_0_m"} {
		if _, err := TensorType(bad, "output.weight", 28); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
}
