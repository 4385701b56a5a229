package model_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftd/draftd/internal/model"
)

// golden is the output of testdata/reference/reference.py (numpy, float64,
// straight from the HF formulas) for one shipped tiny model.
type golden struct {
	Model string       `json:"model"`
	Cases []goldenCase `json:"cases"`
	// CasesQ8Act: activations rounded to Q8_0 before every linear layer, as
	// llama.cpp (and draftd) compute with Q8_0/Q4_0 weights.
	CasesQ8Act []goldenCase `json:"cases_q8act"`
}

type goldenCase struct {
	Prompt  []int       `json:"prompt"`
	Logits  [][]float64 `json:"logits"`  // (len(prompt), vocab)
	Greedy  []int       `json:"greedy"`  // greedy continuation
	Margins []float64   `json:"margins"` // top1 - top2 at each greedy step
}

const (
	modelsDir = "../../testdata/models"
	goldenDir = "../../testdata/reference/golden"
)

// tolerance is the largest logit difference accepted for a model's weight
// type: f32 math on exact weights differs from float64 only by rounding; the
// f16 KV cache adds its rounding, the q8_0 cache its 8-bit rounding of
// keys and values and of the query for the scores (integer block dots);
// Q8_0/Q4_0 also quantize activations to 8 bits, as llama.cpp does.
func tolerance(kv model.KVType) float64 {
	switch kv {
	case model.KVF32:
		return 2e-3
	case model.KVQ8_0:
		return 0.75 // measured worst 0.516 over the shipped models (means ≤ 0.063); 0.366 before the query was quantized
	}
	return 0.03
}

func loadGolden(t *testing.T) []golden {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files in %s (%v)", goldenDir, err)
	}
	var gs []golden
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var g golden
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		gs = append(gs, g)
	}
	return gs
}

// TestFidelity compares the engine's logits and greedy continuations with
// the numpy reference, for every shipped model, from GGUF and from the HF
// directory, with an f16, a q8_0 and an f32 KV cache.
func TestFidelity(t *testing.T) {
	for _, g := range loadGolden(t) {
		for _, format := range []string{"gguf", "hf"} {
			for _, kv := range model.KVTypes {
				path := filepath.Join(modelsDir, g.Model)
				if format == "gguf" {
					path += ".gguf"
				} else if st, _ := filepath.Glob(filepath.Join(path, "*.safetensors")); len(st) == 0 {
					continue // a GGUF-only model (the reference read its blocks)
				}
				t.Run(fmt.Sprintf("%s/%s/kv=%v", g.Model, format, kv), func(t *testing.T) {
					m, err := model.Load(path, model.Options{Threads: 2, KV: kv})
					if kv == model.KVQ8_0 && err != nil && strings.Contains(err.Error(), "multiple of 32") {
						t.Skip(err) // head size 16: ggml's q8_0 cache needs whole 32-element blocks too
					}
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					cases, tol, meanTol := g.Cases, tolerance(kv), tolerance(kv)
					if kv == model.KVQ8_0 {
						meanTol = 0.1
					}
					if format == "gguf" && len(g.CasesQ8Act) > 0 {
						// The GGUF copy of a quantized model computes with
						// activations rounded to Q8_0 (as llama.cpp does). These
						// random models amplify that rounding (and any flip of
						// a rounding decision caused by f16 KV or summation
						// order) to ~0.5 in the logits, so against the exact
						// reference only gross errors are caught (a wrong block
						// layout is off by the logit scale, ~6); the emulating
						// reference must then match near-exactly on at least
						// one prompt where no rounding decision flipped.
						gross, grossMean := 1.0, 0.2
						if kv == model.KVQ8_0 {
							gross, grossMean = 2*gross, 2*grossMean
						}
						checkModel(t, m, g.Cases, gross, grossMean)
						best := math.Inf(1)
						for _, c := range g.CasesQ8Act {
							best = min(best, maxPrefillDiff(t, m, c))
						}
						t.Logf("closest prompt to the Q8_0-activation reference: max |logit diff| %.3g", best)
						if kv == model.KVF32 && !(best <= 1e-3) {
							t.Errorf("no prompt matches the Q8_0-activation reference within 1e-3 (best %.3g)", best)
						}
						return
					}
					checkModel(t, m, cases, tol, meanTol)
				})
			}
		}
	}
}

// maxPrefillDiff is the largest logit difference over the prompt of c.
func maxPrefillDiff(t *testing.T, m *model.Model, c goldenCase) float64 {
	logits := prefill(t, m, c.Prompt)
	var worst float64
	for p, want := range c.Logits {
		for v, w := range want {
			worst = max(worst, math.Abs(float64(logits[p*m.Vocab+v])-w))
		}
	}
	return worst
}

// prefill returns the logits (len(prompt), vocab) of every prompt position.
func prefill(t *testing.T, m *model.Model, prompt []int) []float32 {
	logits, err := m.PrefillLogits(prompt)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// checkModel compares prefill logits (max and mean |diff|) and the greedy
// continuation with the reference cases.
func checkModel(t *testing.T, m *model.Model, cases []goldenCase, tol, meanTol float64) {
	for ci, c := range cases {
		logits := prefill(t, m, c.Prompt)
		var worst float64
		worstAt := ""
		for p, want := range c.Logits {
			for v, w := range want {
				if d := math.Abs(float64(logits[p*m.Vocab+v]) - w); d > worst || math.IsNaN(d) {
					worst, worstAt = d, fmt.Sprintf("position %d id %d: have %g; want %g", p, v, logits[p*m.Vocab+v], w)
				}
			}
		}
		var sum float64
		for p, want := range c.Logits {
			for v, w := range want {
				sum += math.Abs(float64(logits[p*m.Vocab+v]) - w)
			}
		}
		mean := sum / float64(len(c.Logits)*m.Vocab)
		t.Logf("case %d: prompt %d tokens, max |logit diff| %.3g (tol %g), mean %.3g (tol %g)", ci, len(c.Prompt), worst, tol, mean, meanTol)
		if !(worst <= tol) {
			t.Errorf("case %d: max |logit diff| %.3g > %g at %s", ci, worst, tol, worstAt)
		}
		if !(mean <= meanTol) {
			t.Errorf("case %d: mean |logit diff| %.3g > %g", ci, mean, meanTol)
		}
		// Greedy continuation: must agree until the first step whose
		// reference top-2 margin is within the tolerance (a near-tie).
		out, err := m.Generate(c.Prompt, len(c.Greedy))
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range c.Greedy {
			if out[i] == want {
				continue
			}
			if c.Margins[i] <= 2*tol {
				t.Logf("case %d: greedy differs at step %d (have %d; want %d) at a near-tie, margin %.3g", ci, i, out[i], want, c.Margins[i])
				break
			}
			t.Errorf("case %d: first differing greedy id at step %d: have %d; want %d (reference margin %.3g > %g)\nhave %v\nwant %v",
				ci, i, out[i], want, c.Margins[i], 2*tol, out, c.Greedy)
			break
		}
	}
}
