// Greedy generation of one sequence with a private, linearly grown KV cache:
// the reference behaviour the batched, cached server must reproduce exactly.
package model

import "fmt"

// Generate returns the greedy continuation of prompt, n tokens long, or
// shorter when the model's maximum context is reached first.
func (m *Model) Generate(prompt []int, n int) ([]int, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("%w: empty prompt", ErrInput)
	}
	if len(prompt) >= m.MaxContext {
		return nil, fmt.Errorf("%w: prompt of %d tokens fills the model's maximum context of %d", ErrInput, len(prompt), m.MaxContext)
	}
	n = min(n, m.MaxContext-len(prompt))
	var blocks []*Block
	ensure := func(positions int) {
		for len(blocks)*BlockSize < positions {
			blocks = append(blocks, m.NewBlock())
		}
	}
	out := make([]int, 0, n)
	s := &Seq{Tokens: prompt}
	for len(out) < n {
		ensure(s.Pos + len(s.Tokens))
		s.Blocks = blocks
		if err := m.Forward([]*Seq{s}); err != nil {
			return out, err
		}
		out = append(out, s.Next)
		s.Pos += len(s.Tokens)
		s.Tokens = []int{s.Next}
	}
	return out, nil
}
