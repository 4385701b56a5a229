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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/kvcache"
	"github.com/draftd/draftd/internal/model"
)

// Defaults for zero Options fields.
const (
	DefaultMaxBatch     = 32
	DefaultMaxQueue     = 256
	DefaultMaxDraftLen  = 64
	DefaultPrefillChunk = 512
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
}

// Result is the answer to one Draft call.
type Result struct {
	Draft         []int       // (≤ n) the strategy's draft; shorter at the model's maximum context, or when a model-free strategy finds nothing
	PrefillTokens int         // context tokens run through prefill (= len(tokens) − CachedTokens)
	CachedTokens  int         // context tokens whose KV came from the prefix cache
	Strategy      string      // the strategy that drafted it
	Sources       draft.Stats // where the draft tokens came from
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
}

var (
	// ErrQueueFull: the queue holds MaxQueue requests; retry later (503).
	ErrQueueFull = errors.New("engine: queue is full")
	// ErrClosed: the engine is shutting down or closed (503).
	ErrClosed = errors.New("engine: closed")
	// ErrInternal wraps a failed or panicking forward step: a bug (500).
	ErrInternal = errors.New("engine: internal error")
	// ErrInput is wrapped by every *InputError (400).
	ErrInput = errors.New("engine: invalid input")
)

// InputError reports a request that can never be served as given (400).
type InputError struct {
	Code string // machine-readable: empty_tokens, token_out_of_range, n_out_of_range, context_too_long, context_over_kv_budget
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

	mu      sync.RWMutex // guards closed against sends on queue
	closed  bool
	queue   chan *request
	closing chan struct{} // closed by Close: drain, then stop
	abort   chan struct{} // closed when Close's ctx ends: fail the rest, stop
	done    chan struct{} // closed when the loop has returned
	once    sync.Once     // closes closing
	abortMu sync.Once     // closes abort

	testHookForward func([]*model.Seq) // tests: runs before each Forward

	// Owned by the loop goroutine, reused across steps.
	batch []*seq       // sequences in the current step
	seqs  []*model.Seq // their model.Seq, for Forward

	queued, active                        atomic.Int64
	requests, steps, prefill, decode, hit atomic.Uint64
}

// request is one Draft call on its way through the engine.
type request struct {
	ctx    context.Context
	tokens []int // (L) the context, a private copy
	n      int   // draft tokens to produce, already shortened to fit MaxContext
	strat  draft.Guided
	reply  chan reply
}

type reply struct {
	res Result
	err error
}

// New starts an engine on m. The caller keeps m and closes it after Close.
func New(m *model.Model, opt Options) (*Engine, error) {
	if m == nil {
		return nil, errors.New("engine: nil model")
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
		m: m, opt: opt, log: log, cache: cache,
		queue:   make(chan *request, opt.MaxQueue),
		closing: make(chan struct{}),
		abort:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	log.Info("engine started", "max_batch", opt.MaxBatch, "max_queue", opt.MaxQueue,
		"kv_budget_bytes", opt.KVCacheBytes, "kv_block_bytes", m.BlockBytes(),
		"kv_blocks", cache.MaxBlocks(), "max_draft_len", opt.MaxDraftLen, "prefill_chunk", opt.PrefillChunk,
		"strategy", opt.Strategy.Name())
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
// requests wait, and ErrClosed after Close; it returns ctx.Err() when ctx
// ends first (the request then leaves the batch at the next step boundary).
func (e *Engine) DraftWith(ctx context.Context, tokens []int, n int, s draft.Strategy) (Result, error) {
	if err := e.validate(tokens, n); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	g, res, err := e.route(tokens, n, s)
	if g == nil {
		return res, err
	}
	r := &request{
		ctx:    ctx,
		tokens: append([]int(nil), tokens...), // the loop may still read it after we return
		n:      min(n, e.m.MaxContext-len(tokens)),
		strat:  g,
		reply:  make(chan reply, 1),
	}
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return Result{}, ErrClosed
	}
	e.queued.Add(1) // before the send, so that the loop's decrement never goes first
	select {
	case e.queue <- r:
	default:
		e.queued.Add(-1)
		e.mu.RUnlock()
		return Result{}, ErrQueueFull
	}
	e.mu.RUnlock()
	select {
	case rep := <-r.reply:
		return rep.res, rep.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (e *Engine) validate(tokens []int, n int) error {
	if len(tokens) == 0 {
		return inputErr("empty_tokens", "tokens is empty")
	}
	if n < 1 || n > e.opt.MaxDraftLen {
		return inputErr("n_out_of_range", "n = %d is outside [1, %d]", n, e.opt.MaxDraftLen)
	}
	for i, t := range tokens {
		if t < 0 || t >= e.m.Vocab {
			return inputErr("token_out_of_range", "tokens[%d] = %d is outside the vocabulary [0, %d)", i, t, e.m.Vocab)
		}
	}
	if len(tokens) >= e.m.MaxContext {
		return inputErr("context_too_long", "context of %d tokens fills the model's maximum context of %d", len(tokens), e.m.MaxContext)
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
	}
}
