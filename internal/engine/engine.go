// Package engine is draftd's scheduler: one goroutine owns the model and the
// prefix cache (internal/kvcache) and runs every admitted request in one
// continuously batched forward step — ragged prefill of new context tokens
// (chunked, so long prompts do not starve decoding) together with one decode
// token per drafting sequence. Requests join and leave at step boundaries.
//
// This file is the API: options, Draft, Close, Stats and the errors the
// server maps to HTTP statuses. loop.go is the goroutine. The engine does not
// speak HTTP, decide which tokens become a draft (a strategy of
// internal/draft does, driven from strategy.go) or own the model's lifetime
// (the caller closes the model after Close).
package engine

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/kvcache"
	"github.com/draftd/draftd/internal/model"
)

// Defaults for zero Options fields: the one definition (the server and
// cmd/draftd take theirs from here).
const (
	DefaultMaxBatch     = 32
	DefaultMaxQueue     = 256
	DefaultMaxDraftLen  = 64
	DefaultPrefillChunk = 512
	DefaultQueueTimeout = 30 * time.Second
)

// Upper bounds of Options fields; New refuses larger values. They keep a
// typo (or 2⁶³) from allocating a queue or a batch nobody can serve.
const (
	MaxMaxBatch     = 1024    // sequences per step
	MaxMaxQueue     = 1 << 16 // waiting requests
	MaxMaxDraftLen  = 1024    // draft tokens per request
	MaxQueueTimeout = time.Hour
	// MaxBackgroundDelay bounds Options.BackgroundDelay.
	MaxBackgroundDelay = time.Hour
)

// Options configure an Engine. Zero fields take the defaults.
type Options struct {
	MaxBatch int // max sequences per forward step (default 32)
	MaxQueue int // max waiting requests; beyond → ErrQueueFull at once (default 256)
	// KVCacheBytes is the byte budget of all KV blocks (prefix cache and
	// active sequences). 0 sizes it from free memory: 1/4 of MemAvailable in
	// /proc/meminfo, capped at 8 GiB, at least 64 MiB; 1 GiB where
	// /proc/meminfo is unreadable. See DefaultKVCacheBytes.
	KVCacheBytes int64
	MaxDraftLen  int // largest n accepted (default 64)
	// QueueTimeout bounds the time a request waits in the queue before it
	// joins the batch; past it Draft returns ErrQueueTimeout (default 30 s).
	QueueTimeout time.Duration
	// BackgroundDelay holds background (pre-draft) work back until this
	// long after the last step that held a request (0: none): a client's
	// next request usually follows its answer within a millisecond or two,
	// and background work started in that gap would only make it wait.
	BackgroundDelay time.Duration
	// PrefillChunk caps the prefill tokens of one step, summed over the
	// batch (default 512); longer prompts are prefilled over several steps.
	PrefillChunk int
	Logger       *slog.Logger // nil: discard
	Observer     Observer     // may be nil
	// Strategy drafts the requests that name none (nil: draft.Model).
	Strategy draft.Strategy
}

// Observer receives the engine's events, for metrics. It is called from the
// engine goroutine and must return quickly.
type Observer interface {
	// Step is called after each forward step with the number of sequences
	// in it and its prefill and decode token counts.
	Step(batchSize, prefillTokens, decodeTokens int)
	// CacheHit is called on admission of a request with a cached prefix of
	// tokens > 0 positions.
	CacheHit(tokens int)
	// StepTime is called after each forward step with its duration;
	// background is true for a step that held only background (pre-draft)
	// sequences.
	StepTime(d time.Duration, background bool)
	// BackgroundWait is called, once per draft, on admission of a request
	// that was queued while a step holding only background sequences ran:
	// d is the time from its queueing to that step's end, what pre-drafting
	// added to its latency (at most that one step).
	BackgroundWait(d time.Duration)
}

// Result is the answer to one Draft call.
type Result struct {
	Draft         []int       // (≤ n) the strategy's draft; shorter at the model's maximum context, or when a model-free strategy finds nothing
	PrefillTokens int         // context tokens run through prefill (= len(tokens) − CachedTokens)
	CachedTokens  int         // context tokens whose KV came from the prefix cache
	Strategy      string      // the strategy that drafted it
	Sources       draft.Stats // where the draft tokens came from
	// Alts (with Item.Alts) holds, for each draft position, the drafter's
	// runner-up there and the probabilities of the draft token and of it;
	// nil without Item.Alts.
	Alts []Alt // (len(Draft))
	// Confidences (with Item.Confidences or Item.MinConfidence > 0) holds
	// the confidence of each draft token (see Confidence); nil otherwise.
	Confidences []float32 // (len(Draft))
	// Stopped reports that the chain stopped before a token whose
	// confidence fell below Item.MinConfidence (the draft is then shorter
	// than asked).
	Stopped bool
}

// ConfidenceSignal names the drafter's confidence in a draft token that
// Result.Confidences reports and Item.MinConfidence bounds by default: the
// softmax probability of the token under the drafter (its top-1
// probability, over the LM head's vocabulary), the value the LM-head argmax
// kernel already compared to choose the token (model.Seq.PNext; with a
// strategy's proposals in the step, the row that chose it,
// model.Seq.RowAlts). A token the model did not choose from its own
// distribution — a lookup proposal of a model-free strategy — has no such
// value: its confidence is 1 (unmeasured), and the bound never stops before
// it.
const ConfidenceSignal = SignalTop1

// The confidence signals an Item may choose (Item.ConfidenceSignal).
// SignalChain is the running product of the chain's top-1 probabilities up
// to and including the token: the drafter's own estimate that every token
// so far is right, non-increasing along the chain (an unmeasured token
// multiplies by 1).
const (
	SignalTop1  = "top1_prob"
	SignalChain = "chain_prob"
)

// ConfidenceSignals lists the signals, the default first.
var ConfidenceSignals = []string{SignalTop1, SignalChain}

// NextConfidence is the confidence under signal of a draft token whose
// drafter probability is p (1: unmeasured) and whose predecessor's
// confidence is prev (1 for the chain's first token): p itself, or for
// SignalChain the running product prev·p. The engine's bounded chains and
// the server's conversion of pre-drafted answers both use it.
func NextConfidence(signal string, prev, p float32) float32 {
	if signal == SignalChain {
		return prev * p
	}
	return p
}

// MaxConfidence bounds Item.MinConfidence: confidences lie in [0, 1].
const MaxConfidence = 1

// Alt is the drafter's second choice at one draft position (for
// pre-drafting): ID is the most likely id other than the draft token there,
// P the draft token's softmax probability and PAlt ID's. A position drafted
// without the model's full distribution (a kept lookup proposal) has
// ID = −1 and P = PAlt = −1.
type Alt struct {
	ID      int
	P, PAlt float32
}

// Stats is a snapshot of the engine's gauges and counters.
type Stats struct {
	QueueDepth    int   // requests waiting for admission
	Active        int   // sequences in the running batch
	KVBytesInUse  int64 // bytes of KV blocks holding data (cache + active)
	KVBytesBudget int64 // the KV byte budget
	KVBlocks      int   // blocks holding data (cache + active)
	KVCacheBlocks int   // blocks held by the prefix cache
	KVBlockBytes  int64 // bytes of one block

	Requests      uint64 // requests answered with a draft
	Steps         uint64 // forward steps run
	PrefillTokens uint64 // context tokens prefilled
	DecodeTokens  uint64 // decode tokens run
	CachedTokens  uint64 // context tokens served from the prefix cache
	Evictions     uint64 // cache blocks evicted

	// Background (pre-draft) work, below every request in priority.
	BackgroundQueued int    // background drafts waiting
	BackgroundActive int    // background sequences holding KV (running or parked)
	BackgroundTokens uint64 // draft tokens made by background sequences
	Preemptions      uint64 // background sequences taken out of the batch for a request
	BackgroundEvicts uint64 // background sequences ended to free KV for a request
	BackgroundStops  uint64 // background-only steps stopped between layers for a request (run again later)
}

var (
	// ErrQueueFull: the queue holds MaxQueue requests; retry later (503).
	ErrQueueFull = errors.New("engine: queue is full")
	// ErrQueueTimeout: the request waited QueueTimeout in the queue (503).
	ErrQueueTimeout = errors.New("engine: waited too long in the queue")
	// ErrClosed: the engine is shutting down or closed (503).
	ErrClosed = errors.New("engine: closed")
	// ErrInternal wraps a failed or panicking forward step: a bug (500).
	ErrInternal = errors.New("engine: internal error")
	// ErrInput is wrapped by every *InputError (400).
	ErrInput = errors.New("engine: invalid input")
	// ErrEvicted: a background draft was ended to free KV for a request.
	ErrEvicted = errors.New("engine: background draft evicted for a request")
)

// The request rules of docs/protocol.md, defined once: the codes of an
// InputError and the checks of Rules. The server applies the same Rules
// while it parses a body (to name the JSON field in its messages); Draft
// applies them for every other caller.
const (
	CodeMissingTokens     = "missing_tokens"         // no context, or an empty one
	CodeTokenOutOfRange   = "token_out_of_range"     // an id < 0 or ≥ vocab
	CodeInvalidN          = "invalid_n"              // n outside [1, MaxDraftLen]
	CodeContextTooLong    = "context_too_long"       // the context fills the model's maximum
	CodeContextOverKV     = "context_over_kv_budget" // context + draft need more KV than the budget
	CodeInvalidConfidence = "invalid_request"        // MinConfidence outside [0, MaxConfidence], an unknown ConfidenceSignal
)

// Rules are the limits a request is checked against.
type Rules struct {
	Vocab       int // ids in [0, Vocab)
	MaxContext  int // contexts shorter than this
	MaxDraftLen int // 1 ≤ n ≤ MaxDraftLen
}

// TokenOK reports whether id is in the vocabulary.
func (r Rules) TokenOK(id int64) bool { return id >= 0 && id < int64(r.Vocab) }

// ContextOK reports whether a context of L tokens can be drafted from
// (at least one token of room before the maximum context).
func (r Rules) ContextOK(L int) bool { return L >= 1 && L < r.MaxContext }

// NOK reports whether n draft tokens may be asked for.
func (r Rules) NOK(n int64) bool { return n >= 1 && n <= int64(r.MaxDraftLen) }

// Fit is the draft length that fits before the maximum context.
func (r Rules) Fit(L, n int) int { return min(n, r.MaxContext-L) }

// Rules returns the rules this engine checks.
func (e *Engine) Rules() Rules {
	return Rules{Vocab: e.m.Vocab, MaxContext: e.m.MaxContext, MaxDraftLen: e.opt.MaxDraftLen}
}

// InputError reports a request that can never be served as given (400).
type InputError struct {
	Code string // one of the Code constants above
	Msg  string // what was wrong, for the client
}

func (e *InputError) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, ErrInput) hold.
func (e *InputError) Unwrap() error { return ErrInput }

func inputErr(code, format string, args ...any) error {
	return &InputError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Engine serves Draft calls from many goroutines with one model.
type Engine struct {
	m     *model.Model
	opt   Options
	log   *slog.Logger
	cache *kvcache.Cache

	mu      sync.RWMutex // guards closed against pushes on queue
	closed  bool
	queue   *queue
	closing chan struct{} // closed by Close: drain, then stop
	abort   chan struct{} // closed when Close's ctx ends: fail the rest, stop
	done    chan struct{} // closed when the loop has returned
	once    sync.Once     // closes closing
	abortMu sync.Once     // closes abort

	fwd func([]*model.Seq, func() bool) error // the model's ForwardStop (tests wrap it, through newWithForward)

	// Owned by the loop goroutine, reused across steps.
	batch []*seq       // sequences in the current step
	seqs  []*model.Seq // their model.Seq, for Forward

	lowq *queue // background drafts (Item.Background), below every request

	queued, active                        atomic.Int64 // queued: drafts not yet admitted (queue and loopState.pend), bounded by MaxQueue
	requests, steps, prefill, decode, hit atomic.Uint64
	lowQueued, lowActive                  atomic.Int64
	bgTokens, preempts, bgEvicts, bgStops atomic.Uint64
}

// request is one Draft call on its way through the engine.
type request struct {
	ctx     context.Context
	tokens  []int // (L) the context, a private copy with room for n more
	n       int   // draft tokens to produce, already shortened to fit MaxContext
	strat   draft.Guided
	alts    bool        // record Result.Alts
	conf    bool        // record Result.Confidences (asked, or minConf > 0)
	minConf float32     // Item.MinConfidence
	signal  string      // Item.ConfidenceSignal (NextConfidence)
	recall  []int       // Item.Recall, a private copy
	bg      *Background // non-nil: background work (lowq)
	reply   chan reply
	enq     time.Time     // when it was queued (Observer.BackgroundWait)
	elem    *list.Element // its place in the queue; nil once popped or withdrawn (guarded by queue.mu)
	// members are the drafts of one DraftBatch call, queued as this one
	// entry (each with its own reply) and admitted one after the other at
	// the same step boundary; nil for one draft.
	members []*request
}

// size is the number of drafts the entry holds (what the queue's bound and
// QueueDepth count).
func (r *request) size() int {
	if r.members != nil {
		return len(r.members)
	}
	return 1
}

type reply struct {
	res Result
	err error
}

// New starts an engine on m. The caller keeps m and closes it after Close.
// Options outside their bounds (negative, or above the Max constants) are
// an error.
func New(m *model.Model, opt Options) (*Engine, error) {
	if m == nil {
		return nil, errors.New("engine: nil model")
	}
	return newWithForward(m, opt, m.ForwardStop)
}

// newWithForward is New with the forward step given (tests wrap
// m.ForwardStop).
func newWithForward(m *model.Model, opt Options, fwd func([]*model.Seq, func() bool) error) (*Engine, error) {
	switch {
	case opt.MaxBatch < 0 || opt.MaxBatch > MaxMaxBatch:
		return nil, fmt.Errorf("engine: max batch %d outside [1, %d]", opt.MaxBatch, MaxMaxBatch)
	case opt.MaxQueue < 0 || opt.MaxQueue > MaxMaxQueue:
		return nil, fmt.Errorf("engine: max queue %d outside [1, %d]", opt.MaxQueue, MaxMaxQueue)
	case opt.MaxDraftLen < 0 || opt.MaxDraftLen > MaxMaxDraftLen:
		return nil, fmt.Errorf("engine: max draft length %d outside [1, %d]", opt.MaxDraftLen, MaxMaxDraftLen)
	case opt.QueueTimeout < 0 || opt.QueueTimeout > MaxQueueTimeout:
		return nil, fmt.Errorf("engine: queue timeout %v outside [0, %v]", opt.QueueTimeout, MaxQueueTimeout)
	case opt.KVCacheBytes < 0:
		return nil, fmt.Errorf("engine: KV cache budget %d bytes < 0", opt.KVCacheBytes)
	case opt.BackgroundDelay < 0 || opt.BackgroundDelay > MaxBackgroundDelay:
		return nil, fmt.Errorf("engine: background delay %v outside [0, %v]", opt.BackgroundDelay, MaxBackgroundDelay)
	case opt.PrefillChunk < 0:
		return nil, fmt.Errorf("engine: prefill chunk %d < 0", opt.PrefillChunk)
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = DefaultMaxBatch
	}
	if opt.MaxQueue <= 0 {
		opt.MaxQueue = DefaultMaxQueue
	}
	if opt.MaxDraftLen <= 0 {
		opt.MaxDraftLen = DefaultMaxDraftLen
	}
	if opt.PrefillChunk <= 0 {
		opt.PrefillChunk = DefaultPrefillChunk
	}
	if opt.QueueTimeout == 0 {
		opt.QueueTimeout = DefaultQueueTimeout
	}
	if opt.KVCacheBytes <= 0 {
		opt.KVCacheBytes = DefaultKVCacheBytes()
	}
	if opt.Strategy == nil {
		opt.Strategy = draft.Model{}
	}
	if err := checkStrategy(opt.Strategy); err != nil {
		return nil, err
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cache, err := kvcache.New(kvcache.SpecOf(m), opt.KVCacheBytes)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{
		m: m, opt: opt, log: log, cache: cache, fwd: fwd,
		queue:   newQueue(opt.MaxQueue),
		lowq:    newQueue(opt.MaxQueue),
		closing: make(chan struct{}),
		abort:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	log.Info("engine started", "max_batch", opt.MaxBatch, "max_queue", opt.MaxQueue,
		"kv_budget_bytes", opt.KVCacheBytes, "kv_block_bytes", m.BlockBytes(),
		"kv_blocks", cache.MaxBlocks(), "max_draft_len", opt.MaxDraftLen, "prefill_chunk", opt.PrefillChunk,
		"queue_timeout", opt.QueueTimeout, "strategy", opt.Strategy.Name())
	go e.loop()
	return e, nil
}

// Options returns the options in effect (defaults filled in).
func (e *Engine) Options() Options { return e.opt }

// Draft is DraftWith the engine's strategy (Options.Strategy).
func (e *Engine) Draft(ctx context.Context, tokens []int, n int) (Result, error) {
	return e.DraftWith(ctx, tokens, n, nil)
}

// DraftWith returns the draft of strategy s (nil: Options.Strategy) after
// tokens, n tokens long (shorter when the model's maximum context comes
// first, or when a model-free strategy has nothing to propose). It fails at
// once with an *InputError for bad input, ErrQueueFull when MaxQueue
// requests wait, and ErrClosed after Close, ErrQueueTimeout when it waited
// QueueTimeout for a place in the batch; it returns ctx.Err() when ctx ends
// first (a queued request then leaves the queue at once, a running one the
// batch at the next step boundary). A request whose own context and draft
// need more KV than the whole budget holds fails at once with an
// *InputError (CodeContextOverKV), before it is queued. DraftWith keeps no
// reference to tokens after it returns.
func (e *Engine) DraftWith(ctx context.Context, tokens []int, n int, s draft.Strategy) (Result, error) {
	res, errs, err := e.DraftBatch(ctx, []Item{{Tokens: tokens, N: n, Strategy: s}})
	if err != nil {
		return Result{}, err
	}
	return res[0], errs[0]
}

// Item is one draft of a DraftBatch call.
type Item struct {
	Tokens   []int          // (L) the context
	N        int            // draft tokens wanted
	Strategy draft.Strategy // nil: Options.Strategy
	Alts     bool           // also return Result.Alts (the argmax kernel keeps the row's logits: an argmax and a Σexp over the head per step)
	// Background, when set, makes this (the call's only) item pre-draft
	// work: it waits in a queue of its own (no queue timeout; it leaves
	// when ctx ends), is admitted only when no request waits, is taken out
	// of the batch at a step boundary when a request needs its slot (and
	// resumed later from where it was), and is ended with ErrEvicted when a
	// request needs its KV. Promote turns it into an ordinary request.
	Background *Background
	// MinConfidence, when > 0, stops the chain before the first token whose
	// confidence (ConfidenceSignal) is below it: the draft then has fewer
	// than N tokens (possibly none) and Result.Stopped is set. The stopped
	// sequence leaves the batch at once. 0 = off; at most MaxConfidence.
	MinConfidence float32
	// Confidences asks for Result.Confidences (also given with a bound).
	Confidences bool
	// ConfidenceSignal chooses what Confidences report and MinConfidence
	// bounds: one of ConfidenceSignals; "": ConfidenceSignal.
	ConfidenceSignal string
	// Recall is a session's previous draft after the tokens its target
	// accepted (the first one replaced by the bonus, Tokens' last), for a
	// strategy that is a draft.Recaller; others ignore it. It chooses what
	// the model checks, never the draft.
	Recall []int
}

// Background is the handle of one background draft (Item.Background).
type Background struct {
	e        atomic.Pointer[Engine]
	promoted atomic.Bool
	drafted  atomic.Int64 // draft tokens made so far
	first    atomic.Int64 // the first draft token, −1 before
}

// NewBackground returns a handle for one background draft.
func NewBackground() *Background {
	b := &Background{}
	b.first.Store(-1)
	return b
}

// Promote gives the draft a request's priority from the next step boundary
// on (a request is now waiting for it): it is no longer preempted or
// evicted, and if it still waits it is admitted before the queued requests.
func (b *Background) Promote() {
	if b.promoted.Swap(true) {
		return
	}
	if e := b.e.Load(); e != nil {
		e.lowq.wake()
	}
}

// Promoted reports whether Promote was called.
func (b *Background) Promoted() bool { return b.promoted.Load() }

// Drafted returns the draft tokens made so far and the first of them
// (−1 before there is one).
func (b *Background) Drafted() (n, first int) {
	return int(b.drafted.Load()), int(b.first.Load())
}

// MaxBatchItems bounds the items of one DraftBatch call.
const MaxBatchItems = MaxMaxQueue

// DraftBatch drafts items as DraftWith drafts each, with every item that
// needs the model entering the queue as one entry: the loop admits them one
// after the other at the same step boundary (a call with more items than
// free batch slots goes on at the next boundaries, before any request queued
// after it). errs[i] is item i's own failure (an *InputError, or ctx.Err()
// when ctx ends while it runs); err is the call's, with no results: ctx
// ended before the call was queued or while it waited, ErrQueueFull (the
// items do not fit in the queue beside those waiting), ErrClosed,
// ErrQueueTimeout (the entry waited QueueTimeout before its first item was
// admitted). DraftBatch keeps no reference to the items' tokens after it
// returns.
func (e *Engine) DraftBatch(ctx context.Context, items []Item) (res []Result, errs []error, err error) {
	if len(items) == 0 || len(items) > MaxBatchItems {
		return nil, nil, fmt.Errorf("%w: %d items outside [1, %d]", ErrInput, len(items), MaxBatchItems)
	}
	var bg *Background
	for i, it := range items {
		if it.Background != nil {
			if len(items) != 1 {
				return nil, nil, fmt.Errorf("%w: a background item must be its call's only item (item %d of %d)", ErrInput, i, len(items))
			}
			bg = it.Background
		}
	}
	res, errs = make([]Result, len(items)), make([]error, len(items))
	var members []*request
	var slots []int // item index of each member
	for i, it := range items {
		if errs[i] = e.validate(it.Tokens, it.N); errs[i] != nil {
			continue
		}
		if !(it.MinConfidence >= 0 && it.MinConfidence <= MaxConfidence) { // NaN too
			errs[i] = inputErr(CodeInvalidConfidence, "min_confidence = %v is outside [0, %d]", it.MinConfidence, MaxConfidence)
			continue
		}
		if it.ConfidenceSignal != "" && !slices.Contains(ConfidenceSignals, it.ConfidenceSignal) {
			errs[i] = inputErr(CodeInvalidConfidence, "confidence_signal %.40q is none of %v", it.ConfidenceSignal, ConfidenceSignals)
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		g, r, err := e.route(it.Tokens, it.N, it.Strategy)
		if g == nil && err == nil && (it.Confidences || it.MinConfidence > 0) {
			r.Confidences = unmeasured(len(r.Draft))
		}
		if g == nil {
			if errors.Is(err, ErrClosed) {
				return nil, nil, err
			}
			res[i], errs[i] = r, err
			continue
		}
		n := e.Rules().Fit(len(it.Tokens), it.N)
		// Decided from the budget alone, before admission: waiting could
		// never make it fit, and a retryable 503 would have the caller retry
		// forever.
		if need, have := kvcache.BlocksFor(len(it.Tokens)+n-1), e.cache.MaxBlocks(); need > have {
			errs[i] = inputErr(CodeContextOverKV, "context of %d tokens plus %d draft tokens needs %d KV blocks of %d positions; the server's KV budget of %d bytes (--kv-cache-bytes) holds %d",
				len(it.Tokens), n, need, kvcache.BlockSize, e.opt.KVCacheBytes, have)
			continue
		}
		// The one copy of the context the engine keeps (the loop may still
		// read it after we return), with room for the draft.
		own := make([]int, len(it.Tokens), len(it.Tokens)+n)
		copy(own, it.Tokens)
		members = append(members, &request{ctx: ctx, tokens: own, n: n, strat: g, alts: it.Alts, bg: bg, reply: make(chan reply, 1),
			conf: it.Confidences || it.MinConfidence > 0, minConf: it.MinConfidence, signal: it.ConfidenceSignal})
		if _, ok := g.(draft.Recaller); ok && len(it.Recall) > 0 {
			members[len(members)-1].recall = slices.Clone(it.Recall)
		}
		slots = append(slots, i)
	}
	if len(members) == 0 {
		return res, errs, nil
	}
	entry := members[0]
	if len(members) > 1 {
		entry = &request{ctx: ctx, members: members}
	}
	entry.enq = time.Now()
	q, queued := e.queue, &e.queued
	if bg != nil {
		q, queued = e.lowq, &e.lowQueued
		bg.e.Store(e)
	}
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return nil, nil, ErrClosed
	}
	// The bound counts every draft not yet admitted — those in the queue
	// and the rest of an entry the loop has begun to admit — so the
	// reservation is made on the count of both, before the push (the
	// loop's decrement never goes first).
	if !reserve(queued, entry.size(), e.opt.MaxQueue) {
		e.mu.RUnlock()
		return nil, nil, ErrQueueFull
	}
	if !q.push(entry) {
		queued.Add(-int64(entry.size()))
		e.mu.RUnlock()
		return nil, nil, ErrQueueFull
	}
	e.mu.RUnlock()
	t := time.NewTimer(e.opt.QueueTimeout)
	defer t.Stop()
	timeout := t.C
	if bg != nil {
		timeout = nil // background work waits until its ctx ends
	}
	for k, m := range members {
		for done := false; !done; {
			select {
			case rep := <-m.reply:
				res[slots[k]], errs[slots[k]] = rep.res, rep.err
				done = true
			case <-ctx.Done():
				// Still queued: leave at once, so that a caller gone (a
				// reset connection) holds no place. Taken by the loop: it
				// drops the members at its next step.
				if q.withdraw(entry) {
					queued.Add(-int64(entry.size()))
					return nil, nil, ctx.Err()
				}
				if k == 0 {
					return nil, nil, ctx.Err()
				}
				for _, j := range slots[k:] {
					errs[j] = ctx.Err()
				}
				return res, errs, nil
			case <-timeout:
				timeout = nil
				if q.withdraw(entry) {
					queued.Add(-int64(entry.size()))
					return nil, nil, ErrQueueTimeout
				}
				// Taken by the loop just now: it runs to the end.
			}
		}
		timeout = nil // the entry was taken: no more queue timeout
	}
	return res, errs, nil
}

// reserve adds k to the count of drafts waiting n unless that makes it
// exceed max.
func reserve(n *atomic.Int64, k, max int) bool {
	for {
		v := n.Load()
		if v+int64(k) > int64(max) {
			return false
		}
		if n.CompareAndSwap(v, v+int64(k)) {
			return true
		}
	}
}

// unmeasured is the confidences of n tokens the model did not choose from
// its own distribution (see ConfidenceSignal).
func unmeasured(n int) []float32 {
	c := make([]float32, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

func (e *Engine) validate(tokens []int, n int) error {
	r := e.Rules()
	if len(tokens) == 0 {
		return inputErr(CodeMissingTokens, "tokens is empty")
	}
	if !r.NOK(int64(n)) {
		return inputErr(CodeInvalidN, "n = %d is outside [1, %d]", n, r.MaxDraftLen)
	}
	for i, t := range tokens {
		if !r.TokenOK(int64(t)) {
			return inputErr(CodeTokenOutOfRange, "tokens[%d] = %d is outside the vocabulary [0, %d)", i, t, r.Vocab)
		}
	}
	if !r.ContextOK(len(tokens)) {
		return inputErr(CodeContextTooLong, "context of %d tokens fills the model's maximum context of %d", len(tokens), r.MaxContext)
	}
	return nil
}

// Close stops accepting requests (Draft returns ErrClosed), finishes the
// queued and running ones and stops the engine goroutine. If ctx ends first,
// the remaining requests fail with ErrClosed and Close returns ctx.Err()
// once the goroutine has stopped (after at most one forward step).
func (e *Engine) Close(ctx context.Context) error {
	e.once.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.closing)
	})
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		e.abortMu.Do(func() { close(e.abort) })
		<-e.done
		return ctx.Err()
	}
}

// Stats returns a snapshot; cheap and safe from any goroutine.
func (e *Engine) Stats() Stats {
	cs := e.cache.Stats()
	return Stats{
		QueueDepth:    int(e.queued.Load()),
		Active:        int(e.active.Load()),
		KVBytesInUse:  cs.BytesInUse,
		KVBytesBudget: cs.BudgetBytes,
		KVBlocks:      cs.TrieBlocks + cs.LeasedBlocks,
		KVCacheBlocks: cs.TrieBlocks,
		KVBlockBytes:  cs.BlockBytes,
		Requests:      e.requests.Load(),
		Steps:         e.steps.Load(),
		PrefillTokens: e.prefill.Load(),
		DecodeTokens:  e.decode.Load(),
		CachedTokens:  e.hit.Load(),
		Evictions:     cs.Evictions,

		BackgroundQueued: int(e.lowQueued.Load()),
		BackgroundActive: int(e.lowActive.Load()),
		BackgroundTokens: e.bgTokens.Load(),
		Preemptions:      e.preempts.Load(),
		BackgroundEvicts: e.bgEvicts.Load(),
		BackgroundStops:  e.bgStops.Load(),
	}
}
