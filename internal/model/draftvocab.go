// The trimmed LM head for drafting (FR-Spec, arXiv 2502.14856): the greedy
// argmax of Forward runs over a chosen subset of the vocabulary — the most
// frequent tokens of a corpus plus the special tokens — instead of every
// row of the output matrix. The input embedding stays whole, and
// ForwardLogits (the exactness view) still computes every row. This file
// builds the subset head; the ranking of tokens is the caller's
// (`draftd vocab`).
package model

import (
	"fmt"
	"slices"

	"github.com/draftd/draftd/internal/kernels"
)

// SetDraftVocab restricts the argmax of Forward to the ids in keep (each in
// [0, Vocab), no duplicates, at least one); nil restores the full head. The
// rows are copied into a new matrix (ids ascending, so ties still go to the
// lowest id). Not safe to call concurrently with Forward.
func (m *Model) SetDraftVocab(keep []int) error {
	if keep == nil {
		m.mu.Lock()
		m.draftHead, m.draftIDs = nil, nil
		m.mu.Unlock()
		return nil
	}
	if len(keep) == 0 || len(keep) > m.Vocab {
		return fmt.Errorf("draft vocabulary of %d ids: want 1 to %d", len(keep), m.Vocab)
	}
	ids := slices.Clone(keep)
	slices.Sort(ids)
	for i, id := range ids {
		if id < 0 || id >= m.Vocab {
			return fmt.Errorf("draft vocabulary id %d is outside [0, %d)", id, m.Vocab)
		}
		if i > 0 && ids[i-1] == id {
			return fmt.Errorf("draft vocabulary lists id %d twice", id)
		}
	}
	rb := len(m.Output.Row(0))
	data := make([]byte, 0, len(ids)*rb) // (len(ids), hidden) in the output's storage type
	for _, id := range ids {
		data = append(data, m.Output.Row(id)...)
	}
	head, err := kernels.NewMatrix(m.Output.Type, len(ids), m.Output.Cols, data)
	if err != nil {
		return fmt.Errorf("draft vocabulary head: %w", err)
	}
	m.mu.Lock()
	m.draftHead, m.draftIDs = head, ids
	m.mu.Unlock()
	return nil
}

// DraftVocab is the number of ids the draft argmax runs over (Vocab without
// a trimmed head).
func (m *Model) DraftVocab() int {
	if m.draftIDs == nil {
		return m.Vocab
	}
	return len(m.draftIDs)
}

// StepWeightBytes is the weight bytes one decode step streams: every
// weight, with the trimmed head in place of the output matrix when one is
// set.
func (m *Model) StepWeightBytes() int64 {
	if m.draftHead == nil {
		return m.WeightBytes
	}
	return m.WeightBytes - int64(m.Output.Bytes()) + int64(m.draftHead.Bytes())
}
