// The Qwen3 family (Qwen3-0.6B … 32B dense): Llama's layout plus a per-head
// RMSNorm of q and k, no biases, tied embeddings in the small models. Not the
// Qwen3 MoE models (qwen3_moe), which are rejected.
package model

// ArchQwen3 is the Qwen3 family's name.
const ArchQwen3 = "qwen3"

func init() {
	register(&Family{
		Arch:             ArchQwen3,
		HFArchitectures:  []string{"Qwen3ForCausalLM"},
		HFModelTypes:     []string{"qwen3"},
		GGUFArch:         "qwen3",
		HF:               StandardHF,
		GGUF:             StandardGGUF,
		HFDefaultHeadDim: 128, // Qwen3Config: head_dim is independent of hidden/heads
		HFDefaultKVHeads: 32,  // Qwen3Config's default
		Tensors:          StandardTensors,
		QKNorm:           true,
	})
}
