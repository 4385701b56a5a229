// Package draft holds draftd's drafting strategies: which tokens become the
// draft of one request. The engine (internal/engine) keeps batching, the
// prefix cache and the forward pass, and drives a strategy through the small
// interfaces below; adding a strategy means adding a type here, not editing
// the scheduler.
//
//   - model: the drafter model's greedy chain (one forward step per token).
//   - lookup: the continuation of the longest suffix of the request's own
//     tokens that occurred earlier in them; no model (ModelFree).
//   - hybrid: lookup proposals checked by the model in the same forward
//     step, the model's own token after the first rejected one, a new lookup
//     after every model token (Guided); with Options.Eager in small batches
//     also the drafter's own chain of the session's previous request
//     (Recaller).
//   - pld: plain prompt-lookup decoding as published (n-gram 3→1, first
//     match), the baseline lookup is measured against (ModelFree).
//
// Every strategy's draft depends on the request's own tokens only: nothing
// kept across requests and nothing from stored data decides a token. (The
// session's previous draft that eager hybrid recalls only chooses which
// tokens the model checks; with trust 0 the draft is the model's chain.)
// All are deterministic: a draft depends on the context and the model's
// greedy tokens only, never on batching or the cache.
package draft

import (
	"fmt"
	"strings"
)

// Strategy names.
const (
	NameModel  = "model"
	NameLookup = "lookup"
	NameHybrid = "hybrid"
	NamePLD    = "pld"
)

// Default is the strategy a server uses unless told otherwise (see the
// measurements in docs/strategies.md).
const Default = NameHybrid

// Names lists the strategies New accepts.
var Names = []string{NameModel, NameLookup, NameHybrid, NamePLD}

// Defaults of Options, chosen from the measurements in docs/strategies.md.
const (
	DefaultTrust    = 0 // hybrid keeps a lookup token only where the model agrees: its draft is model's, in fewer steps (real pair: 16 cost 0.9 % τ)
	DefaultMinMatch = 4 // hybrid proposes after a match of four tokens or more
	DefaultChoice   = Frequent
	DefaultEager    = true // hybrid's extra proposals in small batches (see docs/strategies.md)
)

// Options tune lookup and hybrid.
type Options struct {
	// Trust: hybrid keeps a proposal token the model disagrees with when
	// the match it comes from is at least Trust tokens long (0: never).
	Trust int
	// MinMatch is the shortest match hybrid proposes from (≥ 1).
	MinMatch int
	// Choice picks among earlier occurrences of the longest match.
	Choice Choice
	// Eager: with Trust 0, in a step of at most SmallBatch sequences (see
	// BatchSizer), hybrid also proposes the drafter's own chain of the
	// session's previous request after its accepted tokens (Recaller) and
	// lookup continuations from matches of any length, all kept only where
	// the model agrees: more tokens per step, the same draft.
	Eager bool
}

// DefaultOptions are the options of the served strategies unless flags say
// otherwise.
func DefaultOptions() Options {
	return Options{Trust: DefaultTrust, MinMatch: DefaultMinMatch, Choice: DefaultChoice, Eager: DefaultEager}
}

// Strategy is implemented by every strategy, together with exactly one of
// ModelFree and Guided.
type Strategy interface {
	Name() string
}

// ModelFree strategies draft without the model; the engine answers them
// without joining the batch.
type ModelFree interface {
	Strategy
	// Draft returns at most n tokens continuing ctx (fewer, or none, when
	// the strategy has nothing to propose). It must not modify ctx.
	Draft(ctx []int, n int) []int
}

// Guided strategies draft with the model: each forward step the engine runs
// the sequence's pending token followed by the strategy's proposal, and the
// strategy decides from the model's greedy tokens what joins the draft.
type Guided interface {
	Strategy
	// Start begins one request of n draft tokens after ctx (not modified,
	// not kept past the request).
	Start(ctx []int, n int) Drafter
}

// Recaller is implemented by Guided strategies that can also use the
// drafter's own earlier chain of a session: recall is the previous draft
// after the tokens the target accepted of it (its first token the one the
// target replaced with the bonus, the last of ctx). StartRecall with an
// empty recall is Start; the draft it leads to must equal Start's (recall
// only chooses what the model checks).
type Recaller interface {
	Guided
	StartRecall(ctx []int, n int, recall []int) Drafter
}

// SmallBatch is the most sequences a step may hold for hybrid's eager
// proposals (Options.Eager): with one sequence an extra row of the step
// costs ~5 % of the step's CPU time on the real drafter (docs/strategies.md),
// while in a full batch a row costs about what a sequence does.
const SmallBatch = 4

// BatchSizer is implemented by Drafters whose proposals depend on the size
// of the step's batch; the engine calls Batch with the number of sequences
// in the batch before each Propose. Only proposals that never change the
// draft may depend on it (drafts never depend on batching).
type BatchSizer interface {
	Batch(seqs int)
}

// Drafter is one request's state in a Guided strategy. The engine calls
// Propose and then Accept once for each forward step in which the sequence
// reaches the end of its known tokens.
type Drafter interface {
	// Propose returns at most max tokens to run through the model after
	// the known tokens in this step (nil: none, the model drafts one token).
	// The slice stays valid until Accept.
	Propose(max int) []int
	// Accept receives the model's greedy token after the last known token
	// and after each proposed token (len(proposal)+1 ids) and returns how
	// many proposed tokens join the draft; greedy[kept] joins after them.
	Accept(greedy []int) (kept int)
}

// Stats count where one request's draft tokens came from.
type Stats struct {
	FromModel  int // draft tokens that are the model's greedy choice
	FromLookup int // draft tokens taken from proposals (lookup's or recalled)
	Kept       int // proposal tokens kept (= FromLookup for hybrid)
	Rejected   int // proposal tokens run through the model and dropped
	// Recalled and RecallRejected are the part of Kept and Rejected that
	// came from the session's earlier chain (Recaller).
	Recalled, RecallRejected int
}

// Counter is implemented by Drafters that report Stats.
type Counter interface {
	Stats() Stats
}

// New returns the named strategy ("" is model).
func New(name string, opt Options) (Strategy, error) {
	if opt.MinMatch < 1 || opt.MinMatch > MaxMatch {
		return nil, fmt.Errorf("draft: minimum match %d outside [1, %d]", opt.MinMatch, MaxMatch)
	}
	if opt.Trust < 0 || opt.Trust > MaxMatch {
		return nil, fmt.Errorf("draft: trust length %d outside [0, %d]", opt.Trust, MaxMatch)
	}
	switch name {
	case NameModel, "":
		return Model{}, nil
	case NameLookup:
		return Lookup{Choice: opt.Choice}, nil
	case NameHybrid:
		return Hybrid{Opt: opt}, nil
	case NamePLD:
		return PLD{}, nil
	}
	return nil, &UnknownError{Name: name}
}

// UnknownError is New's error for a name that is no strategy.
type UnknownError struct{ Name string }

func (e *UnknownError) Error() string {
	name := e.Name
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	return fmt.Sprintf("unknown drafting strategy %q: want one of %s", name, strings.Join(Names, ", "))
}

// Model is the drafter model's greedy chain.
type Model struct{}

func (Model) Name() string                   { return NameModel }
func (Model) Start(ctx []int, n int) Drafter { return &modelDrafter{} }

type modelDrafter struct{ st Stats }

func (d *modelDrafter) Propose(int) []int       { return nil }
func (d *modelDrafter) Accept(greedy []int) int { d.st.FromModel++; return 0 }
func (d *modelDrafter) Stats() Stats            { return d.st }
