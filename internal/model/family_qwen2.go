// The Qwen2 family (Qwen2, Qwen2.5 dense): Llama's layout with a bias on the
// q, k and v projections (always, whatever attention_bias says, as in HF's
// Qwen2Attention). Not Qwen2-MoE or sliding-window variants, which are
// rejected.
package model

// ArchQwen2 is the Qwen2 family's name.
const ArchQwen2 = "qwen2"

func init() {
	register(&Family{
		Arch:             ArchQwen2,
		HFArchitectures:  []string{"Qwen2ForCausalLM"},
		HFModelTypes:     []string{"qwen2"},
		GGUFArch:         "qwen2",
		HF:               StandardHF,
		GGUF:             StandardGGUF,
		HFDefaultKVHeads: 32, // Qwen2Config's default
		Tensors:          StandardTensors,
		QKVBias:          true,
	})
}
