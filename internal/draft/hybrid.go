// The hybrid strategy: lookup proposals (and, in a session, the drafter's
// own earlier chain) verified by the drafter model in the same forward
// step, the model's own greedy token where they stop.
package draft

// Hybrid proposes, each step, the lookup continuation of the text so far
// (context plus draft) — re-looked-up after every proposed token, as many
// tokens as the first one's match is long (a short match rarely continues
// far; every proposed token costs a row of the forward step) and at most
// the room left — and the engine runs it through the model in one forward
// step.
// Proposal tokens are kept while the model's greedy token agrees with them,
// or while their match is at least Opt.Trust tokens long; the first rejected
// one is replaced by the model's token (which joins the draft in any case,
// after the kept ones). No proposal (no match of Opt.MinMatch tokens) means
// one plain model step, as with Model.
//
// With Opt.Eager and Opt.Trust 0 — whose draft is the model's chain
// whatever is proposed — a step of at most SmallBatch sequences (where an
// extra row is cheap) gets more proposals, kept only where the model
// agrees: a session's request also gets the drafter's chain of the previous
// request after the accepted tokens (StartRecall; the target replaced its
// first token with the bonus, and the drafter's new chain often rejoins the
// old one after it: a different word, then the same line), proposed from
// where the new chain is aligned with it; and lookup proposes from a match
// of any length, not only Opt.MinMatch.
type Hybrid struct{ Opt Options }

func (Hybrid) Name() string { return NameHybrid }

// Start implements Guided.
func (h Hybrid) Start(ctx []int, n int) Drafter {
	eager := h.Opt.Eager && h.Opt.Trust == 0
	return &hybridDrafter{opt: h.Opt, x: NewIndex(ctx, n, h.Opt.Choice), eager: eager, small: eager}
}

// StartRecall implements Recaller.
func (h Hybrid) StartRecall(ctx []int, n int, recall []int) Drafter {
	d := h.Start(ctx, n).(*hybridDrafter)
	if d.eager && len(recall) > 1 && len(ctx) > 0 {
		d.rec = recall
		d.align(ctx[len(ctx)-1]) // the bonus, in place of recall[0]
	}
	return d
}

// maxRecallMiss is how many recalled proposals in a row may be rejected at
// their first token before the recall stops proposing: the chain has left
// the old one for good, and every proposal token costs a row.
const maxRecallMiss = 2

// eagerRows caps the proposal tokens of a step in a small batch (a recalled
// chain or lookup's): an extra row costs 6–10 %
// of a one-row step, more the more rows (docs/strategies.md), and 4 gave the
// fewest step-equivalents over the recorded real-pair traces at n = 8 and 16.
const eagerRows = 4

type hybridDrafter struct {
	opt  Options
	x    *Index // context + draft so far
	prop []int  // the proposal of this step
	lens []int  // match length of each proposal token (0: recalled, never trusted)
	st   Stats

	eager bool // Opt.Eager with Opt.Trust 0
	small bool // eager, and this step's batch is small (Batch)

	rec     []int // the recalled chain (nil: none)
	rp      int   // index in rec of the token expected next
	miss    int   // recalled proposals in a row rejected at once
	recProp bool  // this step's proposal is recalled
}

// align moves the recall past tok, the token just added to the text: tok is
// the one expected (rp), or the one before it (the new chain inserted a
// token), or the one after it (the new chain left one out); otherwise tok
// took the expected one's place. It reports whether tok is one of the three
// (the chains are aligned).
func (d *hybridDrafter) align(tok int) bool {
	switch {
	case d.rp < len(d.rec) && d.rec[d.rp] == tok:
		d.rp++
	case d.rp > 0 && d.rp <= len(d.rec) && d.rec[d.rp-1] == tok:
	case d.rp+1 < len(d.rec) && d.rec[d.rp+1] == tok:
		d.rp += 2
	default:
		d.rp++
		return false
	}
	return true
}

// Batch implements BatchSizer.
func (d *hybridDrafter) Batch(seqs int) { d.small = d.eager && seqs <= SmallBatch }

func (d *hybridDrafter) Propose(max int) []int {
	d.prop, d.lens, d.recProp = d.prop[:0], d.lens[:0], false
	if d.recall(max) { // the drafter's own chain before lookup's
		return d.prop
	}
	m := d.x.Len()
	minMatch := d.opt.MinMatch
	if d.small {
		minMatch, max = 1, min(max, eagerRows)
	}
	for len(d.prop) < max {
		q, ok := d.x.Query()
		if !ok || q.Length < minMatch || (len(d.lens) > 0 && len(d.prop) >= d.lens[0]) {
			break
		}
		d.prop = append(d.prop, q.Next)
		d.lens = append(d.lens, q.Length)
		d.x.Append(q.Next)
	}
	d.x.Truncate(m)
	if len(d.prop) == 0 {
		return nil
	}
	return d.prop
}

// recall makes the recalled chain from where it is aligned this step's
// proposal, if it proposes anything.
func (d *hybridDrafter) recall(max int) bool {
	if !d.small || d.rp >= len(d.rec) || d.miss >= maxRecallMiss || max <= 0 {
		return false
	}
	for _, t := range d.rec[d.rp:min(len(d.rec), d.rp+min(max, eagerRows))] {
		d.prop = append(d.prop, t)
		d.lens = append(d.lens, 0)
	}
	d.recProp = true
	return true
}

func (d *hybridDrafter) Accept(greedy []int) int {
	kept := 0
	for kept < len(d.prop) && kept < len(greedy)-1 {
		if greedy[kept] != d.prop[kept] && (d.opt.Trust == 0 || d.lens[kept] < d.opt.Trust) {
			break
		}
		d.x.Append(d.prop[kept])
		if d.rec != nil {
			d.align(d.prop[kept])
		}
		kept++
	}
	g := greedy[kept]
	d.x.Append(g)
	if d.rec != nil && d.align(g) {
		d.miss = 0 // the model's own token is aligned with the recalled chain
	}
	d.st.FromLookup += kept
	d.st.Kept += kept
	d.st.Rejected += len(d.prop) - kept
	d.st.FromModel++
	if d.recProp {
		d.st.Recalled += kept
		d.st.RecallRejected += len(d.prop) - kept
		if kept == 0 {
			d.miss++
		} else {
			d.miss = 0
		}
	}
	d.prop, d.lens, d.recProp = d.prop[:0], d.lens[:0], false
	return kept
}

func (d *hybridDrafter) Stats() Stats { return d.st }
