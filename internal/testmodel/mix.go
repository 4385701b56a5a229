// The per-tensor type rule of llama.cpp's K-quant mixes (llama-quantize
// without an importance matrix), for dense Qwen/Llama decoders. Only the
// choice of type lives here; encoding is dtype.Quantize.
package testmodel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
)

// Recipes lists the mixes TensorType knows, besides a plain type name
// ("q4_k", "q6_k", …), which gives every matrix that type.
var Recipes = []string{"q4_k_m", "q5_k_m", "q6_k"}

// TensorType is the storage type llama.cpp's recipe gives the matrix
// ggufName ("blk.3.attn_v.weight", "token_embd.weight", "output.weight") of a
// model with nLayers layers. Recipes:
//
//	q4_k_m: Q4_K; Q6_K for output, and for attn_v and ffn_down on the
//	        "more bits" layers (the first and last eighth, and every third between).
//	q5_k_m: the same with Q5_K as the base.
//	q6_k:   Q6_K everywhere.
//
// A tied token embedding is also the output matrix: ask for "output.weight".
// A row length that is not a multiple of 256 needs llama.cpp's fallback
// (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0), which is the caller's to apply.
func TensorType(recipe, ggufName string, nLayers int) (dtype.Type, error) {
	var base dtype.Type
	switch recipe {
	case "q4_k_m":
		base = dtype.Q4_K
	case "q5_k_m":
		base = dtype.Q5_K
	case "q6_k":
		return dtype.Q6_K, nil
	default:
		t, err := dtype.Parse(recipe)
		if err != nil {
			return 0, fmt.Errorf("unknown recipe or type %q (want %s or a type name)", recipe, strings.Join(Recipes, ", "))
		}
		return t, nil
	}
	if ggufName == "output.weight" {
		return dtype.Q6_K, nil
	}
	if strings.HasSuffix(ggufName, ".attn_v.weight") || strings.HasSuffix(ggufName, ".ffn_down.weight") {
		layer, err := layerOf(ggufName)
		if err != nil {
			return 0, err
		}
		if moreBits(layer, nLayers) {
			return dtype.Q6_K, nil
		}
	}
	return base, nil
}

// moreBits is llama.cpp's use_more_bits: layers that get a wider type.
func moreBits(i, n int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }

func layerOf(name string) (int, error) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if ok {
		num, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(num); err == nil {
			return i, nil
		}
	}
	return 0, fmt.Errorf("tensor %q has no layer number", name)
}
