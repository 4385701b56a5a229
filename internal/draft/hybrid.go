// The hybrid strategy: lookup proposals verified by the drafter model in the
// same forward step, the model's own greedy token where they stop.
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
type Hybrid struct{ Opt Options }

func (Hybrid) Name() string { return NameHybrid }

// Start implements Guided.
func (h Hybrid) Start(ctx []int, n int) Drafter {
	return &hybridDrafter{opt: h.Opt, x: NewIndex(ctx, n, h.Opt.Choice)}
}

type hybridDrafter struct {
	opt  Options
	x    *Index // context + draft so far
	prop []int  // the proposal of this step
	lens []int  // match length of each proposal token
	st   Stats
}

func (d *hybridDrafter) Propose(max int) []int {
	d.prop, d.lens = d.prop[:0], d.lens[:0]
	m := d.x.Len()
	for len(d.prop) < max {
		q, ok := d.x.Query()
		if !ok || q.Length < d.opt.MinMatch || (len(d.lens) > 0 && len(d.prop) >= d.lens[0]) {
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

func (d *hybridDrafter) Accept(greedy []int) int {
	kept := 0
	for kept < len(d.prop) && kept < len(greedy)-1 {
		if greedy[kept] != d.prop[kept] && (d.opt.Trust == 0 || d.lens[kept] < d.opt.Trust) {
			break
		}
		d.x.Append(d.prop[kept])
		kept++
	}
	d.x.Append(greedy[kept])
	d.st.FromLookup += kept
	d.st.Kept += kept
	d.st.Rejected += len(d.prop) - kept
	d.st.FromModel++
	d.prop, d.lens = d.prop[:0], d.lens[:0]
	return kept
}

func (d *hybridDrafter) Stats() Stats { return d.st }
