// Test-only access to the model's internals for the package's external
// tests (package model_test).
package model

// PrefillLogits runs prompt through a fresh sequence and returns the logits
// after every prompt position, (len(prompt), vocab): the view the fidelity
// tests compare with the numpy reference.
func (m *Model) PrefillLogits(prompt []int) ([]float32, error) {
	var blocks []*Block
	for range (len(prompt) + BlockSize - 1) / BlockSize {
		blocks = append(blocks, m.NewBlock())
	}
	logits := make([]float32, len(prompt)*m.Vocab) // (len(prompt), vocab)
	err := m.forward([]*Seq{{Tokens: prompt, Blocks: blocks}}, logits)
	return logits, err
}
