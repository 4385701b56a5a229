// The Llama family (Llama 2, Llama 3.x — e.g. Llama-3.2-1B/3B, the usual
// drafters for Llama-3.1-8B targets — TinyLlama, and other LlamaForCausalLM
// checkpoints): the base layout, no q/k norm, no biases, Llama 3.x RoPE
// scaling. In GGUF, llama.cpp stores Q/K rows permuted for its interleaved
// RoPE and the llama3 scaling as a rope_freqs tensor.
//
// This file is the template for a new family: copy it, change the names and
// flags, and add the family's tiny model to internal/testmodel and to the
// numpy reference (testdata/reference).
package model

// ArchLlama is the Llama family's name.
const ArchLlama = "llama"

func init() {
	register(&Family{
		Arch:            ArchLlama,
		HFArchitectures: []string{"LlamaForCausalLM"},
		HFModelTypes:    []string{"llama"},
		GGUFArch:        "llama",
		HF:              StandardHF,
		GGUF:            StandardGGUF,
		Tensors:         StandardTensors,
		GGUFPermutedQK:  true,
		RoPEScaling:     []string{"llama3"},
		GGUFRoPEFreqs:   true,
	})
}
