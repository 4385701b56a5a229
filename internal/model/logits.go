// PrefillLogits: the logits of every position of a prompt, through
// ForwardLogits, for comparisons with a reference. Not the serving path.
package model

// PrefillLogits runs prompt through a fresh sequence and returns the logits
// after every prompt position, (len(prompt), vocab).
func (m *Model) PrefillLogits(prompt []int) ([]float32, error) {
	var blocks []*Block
	for range (len(prompt) + BlockSize - 1) / BlockSize {
		blocks = append(blocks, m.NewBlock())
	}
	logits := make([]float32, len(prompt)*m.Vocab) // (len(prompt), vocab)
	err := m.ForwardLogits([]*Seq{{Tokens: prompt, Blocks: blocks}}, logits)
	return logits, err
}
