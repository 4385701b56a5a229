// Which storage type each matrix of a generated model gets: a plain ggml
// type name ("q4_k", "q5_0", …) for every matrix, or one of llama.cpp's
// K-quant mixes, whose per-tensor rule is internal/quant's (the same rule
// `draftd prepare` uses). Only the choice of type lives here; encoding is
// dtype.Quantize.
package testmodel

import (
	"fmt"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/quant"
)

// Recipes lists the mixes TensorType knows, besides a plain type name
// ("q4_k", "q6_k", …), which gives every matrix that type.
var Recipes = []string{"q4_k_m", "q5_k_m", "q6_k"}

// TensorType is the storage type the recipe or type name gives the matrix
// ggufName ("blk.3.attn_v.weight", "token_embd.weight", "output.weight") of a
// model with nLayers layers: a type name applies to every matrix; a mix
// (Recipes) follows quant.TensorType. A tied token embedding is also the
// output matrix: ask for "output.weight". A row length that is not a
// multiple of 256 needs llama.cpp's fallback (Q4_K → Q5_0, Q5_K → Q5_1,
// Q6_K → Q8_0), which is the caller's to apply.
func TensorType(recipe, ggufName string, nLayers int) (dtype.Type, error) {
	if t, err := dtype.Parse(recipe); err == nil {
		return t, nil
	}
	for _, r := range Recipes {
		if r == recipe {
			return quant.TensorType(recipe, ggufName, nLayers)
		}
	}
	return 0, fmt.Errorf("unknown recipe or type %q (want %s or a type name)", recipe, strings.Join(Recipes, ", "))
}
