// draftd testmodel: writes a deterministic random model with an exact
// Qwen3/Qwen2/Llama architecture as GGUF and/or an HF directory, for tests
// and benchmarks. Its output is not a language model.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/testmodel"
	"github.com/draftd/draftd/internal/tokenizer"
)

func init() {
	register("testmodel", "write a deterministic random model (GGUF and/or HF dir)", runTestModel)
}

func runTestModel(ctx context.Context, args []string) error {
	fs := newFlags("testmodel", "testmodel (--gguf FILE | --hf DIR) [--shape S] [--type T] [flags]", "")
	shape := fs.String("shape", "qwen3-0.6b", "qwen3-0.6b, qwen3-1.7b, tiny-qwen3, tiny-qwen2, tiny-llama or tiny-llama3")
	typ := fs.String("type", "q8_0", "matrix storage type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k … q6_k) or mix: q4_k_m, q5_k_m (llama.cpp's rules), kmix (every K type)")
	out := fs.String("gguf", "", "write the GGUF file here")
	hf := fs.String("hf", "", "write the HF safetensors directory here")
	seed := fs.Uint64("seed", 0, "random seed (0: the shape's default)")
	layers := fs.Int("layers", 0, "override the number of layers (0: the shape's)")
	tokPath := fs.String("tokenizer", "", "embed this tokenizer (tokenizer.json, HF dir or GGUF) in the GGUF, padded to the vocabulary")
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	if *out == "" && *hf == "" {
		return clientUsageError(fs, "give --gguf FILE and/or --hf DIR")
	}
	t, err := dtype.Parse(*typ)
	recipe := ""
	if err != nil {
		// A llama.cpp mix (q4_k_m, q5_k_m) or kmix: types per tensor.
		if _, rerr := testmodel.TensorType(*typ, "output.weight", 1); rerr != nil && *typ != "kmix" {
			return clientUsageError(fs, fmt.Sprintf("--type: %v (or a mix: %s, kmix)", err, strings.Join(testmodel.Recipes, ", ")))
		}
		recipe, t = *typ, dtype.Q4_K
	}
	spec, err := testmodel.ByName(*shape, t)
	if err != nil {
		return clientUsageError(fs, fmt.Sprintf("--shape: %v", err))
	}
	if recipe != "" {
		name := strings.TrimSuffix(spec.Name, strings.ToLower(t.String())) + recipe
		if spec, err = spec.WithRecipe(recipe); err != nil {
			return fmt.Errorf("testmodel: %w", err)
		}
		spec.Name = name
	}
	if *seed != 0 {
		spec.Seed = *seed
	}
	if *layers < 0 {
		return clientUsageError(fs, fmt.Sprintf("--layers %d must be ≥ 0", *layers))
	}
	if *layers > 0 {
		spec.Layers = *layers
	}
	start := time.Now()
	if *out != "" {
		var extra []testmodel.MetaWriter
		if *tokPath != "" {
			tok, err := tokenizer.Load(*tokPath)
			if err != nil {
				return fmt.Errorf("testmodel: %w", err)
			}
			if tok.VocabSize() > spec.Vocab {
				return fmt.Errorf("testmodel: tokenizer has %d tokens, more than the %s vocabulary of %d", tok.VocabSize(), *shape, spec.Vocab)
			}
			extra = append(extra, func(w *gguf.Writer) error { return tok.WriteGGUFPadded(w, spec.Vocab) })
		}
		if err := interruptible(ctx, func() error { return spec.WriteGGUF(*out, extra...) }); err != nil {
			return fmt.Errorf("testmodel: --gguf %s: %w", *out, err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s (%s) in %v\n", *out, spec.Name, time.Since(start).Round(time.Millisecond))
	}
	if *hf != "" {
		if err := interruptible(ctx, func() error { return spec.WriteHF(*hf) }); err != nil {
			return fmt.Errorf("testmodel: --hf %s: %w", *hf, err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s (%s) in %v\n", *hf, spec.Name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}
