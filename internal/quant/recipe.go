// Package quant turns a model's weights into a GGUF file of a chosen
// quantization recipe: which tensor gets which ggml type (the recipes of
// llama.cpp's llama-quantize), the exact size of the result before it is
// written, and the tensor-by-tensor conversion driver. It is not a codec:
// the block encodings live in internal/dtype (dtype.Quantize), and it is not a
// downloader (internal/hub).
package quant

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
)

// The K-quant types of the recipes (internal/dtype/kquant.go).
const (
	typeQ4K = dtype.Q4_K
	typeQ5K = dtype.Q5_K
	typeQ6K = dtype.Q6_K
)

// Recipe is one quantization recipe: a name as llama-quantize spells it, the
// llama_ftype written as general.file_type, and the base tensor type.
type Recipe struct {
	Name     string
	FileType uint32     // llama_ftype (general.file_type)
	Base     dtype.Type // type of every weight matrix the recipe does not single out
	// mixed recipes follow llama.cpp's llama_tensor_get_type; the others are
	// "pure" (llama-quantize --pure): every matrix in Base.
	mixed bool
	// keep is the recipe "keep": every tensor of a GGUF source in its own
	// type and bytes (with Options.HeadType, all but the LM head).
	keep bool
}

// Keep is the recipe that copies a GGUF source's tensors as they are (its
// own types, bytes and general.file_type): with Options.HeadType it
// re-encodes the LM head alone. Not a candidate of Auto, and not in Recipes.
var Keep = Recipe{Name: "keep", keep: true}

// recipes, highest quality first. bf16 comes before f16: it is the dtype HF
// checkpoints ship in, so it loses nothing from them (f16 can overflow).
// q4_0 is llama-quantize --pure Q4_0 (the output/tied embedding in Q4_0 too,
// not Q6_K): the smallest file, and free of K-quant types.
var recipes = []Recipe{
	{"f32", 0, dtype.F32, false, false},
	{"bf16", 32, dtype.BF16, false, false},
	{"f16", 1, dtype.F16, false, false},
	{"q8_0", 7, dtype.Q8_0, false, false},
	{"q6_k", 18, typeQ6K, true, false},
	{"q5_k_m", 17, typeQ5K, true, false},
	{"q4_k_m", 15, typeQ4K, true, false},
	{"q4_0", 2, dtype.Q4_0, false, false},
}

// Recipes lists every recipe, highest quality (largest file) first.
func Recipes() []Recipe { return append([]Recipe(nil), recipes...) }

// Lookup finds a recipe by name (case-insensitive), Keep included.
func Lookup(name string) (Recipe, error) {
	for _, r := range append(Recipes(), Keep) {
		if strings.EqualFold(r.Name, name) {
			return r, nil
		}
	}
	names := make([]string, len(recipes))
	for i, r := range recipes {
		names[i] = r.Name
	}
	return Recipe{}, fmt.Errorf("unknown quantization %q (want auto, keep or one of %s)", name, strings.Join(names, ", "))
}

// HeadTypes are the types Options.HeadType may name: the types draftd
// encodes and runs that are ≤ 8 bits per weight (a wider head is a wider
// recipe's business).
var HeadTypes = []dtype.Type{dtype.Q8_0, typeQ6K, dtype.Q5_1, typeQ5K, dtype.Q5_0, dtype.Q4_1, typeQ4K, dtype.Q4_0}

// ParseHeadType maps a name such as "q4_0" to one of HeadTypes.
func ParseHeadType(name string) (dtype.Type, error) {
	t, err := dtype.Parse(name)
	if err == nil && slices.Contains(HeadTypes, t) {
		return t, nil
	}
	names := make([]string, len(HeadTypes))
	for i, h := range HeadTypes {
		names[i] = strings.ToLower(h.String())
	}
	return 0, fmt.Errorf("unknown LM head type %q (want one of %s)", name, strings.Join(names, ", "))
}

// Types lists the tensor types the recipe can produce.
func (r Recipe) Types() []dtype.Type {
	ts := []dtype.Type{dtype.F32, r.Base}
	if r.mixed {
		ts = append(ts, typeQ6K, dtype.Q8_0) // Q8_0: the Q6_K fallback for odd rows
	}
	return ts
}

// Supported reports whether internal/dtype can encode and draftd compute with
// every type the recipe produces.
func (r Recipe) Supported() bool {
	for _, t := range r.Types() {
		if !t.Supported() {
			return false
		}
	}
	return true
}

// TensorType is the ggml type recipe gives the GGUF tensor ggufName of a
// model with nLayers blocks, as llama.cpp's llama_tensor_get_type does for
// that ftype. 1-D tensors (norms, biases) stay F32. token_embd.weight is
// typed as in a model with its own output.weight; in a tied model (no
// output.weight) llama.cpp gives token_embd the output's type: ask for
// "output.weight" instead, or use Plan, which does that.
func TensorType(recipe, ggufName string, nLayers int) (dtype.Type, error) {
	r, err := Lookup(recipe)
	if err != nil {
		return 0, err
	}
	return r.tensorType(ggufName, nLayers)
}

func (r Recipe) tensorType(name string, nLayers int) (dtype.Type, error) {
	if strings.HasSuffix(name, "_norm.weight") || strings.HasSuffix(name, ".bias") {
		return dtype.F32, nil
	}
	cat, layer, err := category(name, nLayers)
	if err != nil {
		return 0, err
	}
	if !r.mixed {
		return r.Base, nil
	}
	// llama_tensor_get_type_impl for Q4_K_M, Q5_K_M and Q6_K.
	switch cat {
	case "output":
		return typeQ6K, nil // any base other than Q8_0 becomes Q6_K
	case "attn_v", "ffn_down":
		if r.Base != typeQ6K && moreBits(layer, nLayers) {
			return typeQ6K, nil
		}
	}
	return r.Base, nil
}

// moreBits is llama.cpp's use_more_bits: the first and last eighth of the
// layers and every third layer in between get more bits.
func moreBits(i, n int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }

// category names the role of a weight matrix and its layer (-1 outside blocks).
func category(name string, nLayers int) (cat string, layer int, err error) {
	switch name {
	case "token_embd.weight":
		return "token_embd", -1, nil
	case "output.weight":
		return "output", -1, nil
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if ok {
		num, role, ok2 := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if ok2 && err == nil && n >= 0 && n < nLayers {
			switch role {
			case "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
				"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight":
				return strings.TrimSuffix(role, ".weight"), n, nil
			}
		}
		if ok2 && err == nil && (n < 0 || n >= nLayers) {
			return "", 0, fmt.Errorf("quant: tensor %s: layer %d outside [0, %d)", name, n, nLayers)
		}
	}
	return "", 0, fmt.Errorf("quant: no recipe rule for tensor %s", name)
}

// TensorSpec is one tensor to be planned: its GGUF name and ggml shape
// (Shape[0] is the row length).
type TensorSpec struct {
	Name  string
	Shape []uint64
}

// Plan types every tensor of one model: TensorType, with token_embd typed as
// the output when there is no output.weight (tied embeddings), and
// llama.cpp's fallback when a row is not a whole number of blocks (Q6_K →
// Q8_0; others are an error naming the tensor).
func (r Recipe) Plan(tensors []TensorSpec, nLayers int) ([]dtype.Type, error) {
	return r.plan(tensors, nLayers, nil, nil)
}

// LMHead is the name of the tensor that is the LM head: output.weight, or
// token_embd.weight in a tied model (no output.weight).
func LMHead(tensors []TensorSpec) string {
	for _, t := range tensors {
		if t.Name == "output.weight" {
			return t.Name
		}
	}
	return "token_embd.weight"
}

// plan is Plan with the LM head (LMHead) in *head when head is not nil (no
// fallback: rows that do not split into its blocks are an error naming the
// types that would). The recipe keep gives every tensor its type in src
// (the GGUF source's types, index by index) instead.
func (r Recipe) plan(tensors []TensorSpec, nLayers int, head *dtype.Type, src []dtype.Type) ([]dtype.Type, error) {
	var (
		out []dtype.Type
		err error
	)
	switch {
	case r.keep && len(src) != len(tensors):
		return nil, fmt.Errorf("quant: recipe keep copies a GGUF source's own tensor types; this source is not a GGUF file")
	case r.keep:
		out = slices.Clone(src)
	default:
		if out, err = r.planRecipe(tensors, nLayers); err != nil {
			return nil, err
		}
	}
	if head == nil {
		return out, nil
	}
	name := LMHead(tensors)
	i := slices.IndexFunc(tensors, func(t TensorSpec) bool { return t.Name == name })
	if i < 0 || len(tensors[i].Shape) < 2 {
		return nil, fmt.Errorf("quant: no LM head (%s) to give type %v", name, *head)
	}
	if bs, _ := blockSize(*head); tensors[i].Shape[0]%uint64(bs) != 0 {
		var fit []string
		for _, h := range HeadTypes {
			if b, _ := blockSize(h); tensors[i].Shape[0]%uint64(b) == 0 {
				fit = append(fit, strings.ToLower(h.String()))
			}
		}
		return nil, fmt.Errorf("quant: LM head type %v: %s has rows of %d, not a whole number of %d-weight blocks (head types that fit: %s)",
			*head, name, tensors[i].Shape[0], bs, strings.Join(fit, ", "))
	}
	out[i] = *head
	return out, nil
}

func (r Recipe) planRecipe(tensors []TensorSpec, nLayers int) ([]dtype.Type, error) {
	tied := true
	for _, t := range tensors {
		if t.Name == "output.weight" {
			tied = false
		}
	}
	out := make([]dtype.Type, len(tensors))
	for i, t := range tensors {
		name := t.Name
		if tied && name == "token_embd.weight" {
			name = "output.weight"
		}
		if len(t.Shape) < 2 { // norms, biases, llama.cpp's rope_freqs
			out[i] = dtype.F32
			continue
		}
		typ, err := r.tensorType(name, nLayers)
		if err != nil {
			return nil, err
		}
		if bs, _ := blockSize(typ); t.Shape[0]%uint64(bs) != 0 {
			// llama.cpp's tensor_type_fallback for rows that are not whole 256-blocks.
			fb, ok := map[dtype.Type]dtype.Type{typeQ4K: dtype.Q5_0, typeQ5K: dtype.Q5_1, typeQ6K: dtype.Q8_0}[typ]
			if !ok || t.Shape[0]%dtype.QK != 0 {
				return nil, fmt.Errorf("quant: tensor %s: rows of %d do not split into %v blocks of %d", t.Name, t.Shape[0], typ, bs)
			}
			typ = fb
		}
		out[i] = typ
	}
	return out, nil
}

func blockSize(t dtype.Type) (int, bool) {
	switch t {
	case typeQ4K, typeQ5K, typeQ6K:
		return 256, true
	}
	return t.BlockSize(), true
}
