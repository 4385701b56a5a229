// The life cycle of a serving process: listen at once (GET /health answers
// 503 loading), open the backend (Config.Open: cmd/draftd loads the model
// and starts the engine), run one warm-up draft, turn healthy, and on
// cancellation stop accepting, let in-flight requests finish and close the
// backend. It does not parse flags (cmd/draftd/serve.go does) nor build the
// backend.

package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
)

// Run serves on ln until ctx is cancelled, then shuts down gracefully and
// returns nil. It returns an error if the backend cannot be opened or
// warmed up, or if serving fails. ln is closed on return.
//
// The graceful shutdown (the drain): ln is closed at once (new connections
// are refused) and GET /health answers 503 shutting_down; connections
// already open stay open, and every answer written from then on carries
// Connection: close. A request that arrives on an open connection — one
// that was idle at the signal, or one whose headers were still arriving —
// is answered 503 shutting_down (Retry-After: 1); requests in flight run to
// their end. A request pipelined behind one answered during the drain is not
// read (its predecessor's Connection: close tells the client to resend it).
// When no connection is busy, the rest (idle) are closed, the backend is
// closed and Run returns nil. If that takes longer than
// Config.ShutdownTimeout, the backend fails what it still holds (those
// requests are answered 503 shutting_down), connections are closed within a
// further second, and Run returns an error wrapping ErrShutdownIncomplete.
//
// A cancellation while Config.Open is still loading does not wait for it:
// Run returns at once, and a backend that Open delivers later is closed
// as soon as it arrives.
func Run(ctx context.Context, ln net.Listener, cfg Config) error {
	start := time.Now()
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	conns := newConnSet()
	tl := &trackListener{Listener: ln, set: conns}
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		// Headers and body; POST /draft sets its own body deadline
		// (--body-timeout) and clears it once the body is read, so that a
		// request waiting for the engine is not cut off.
		ReadTimeout: readHeaderTimeout + s.cfg.BodyTimeout,
		// No WriteTimeout: a draft may wait in the queue (bounded by the
		// engine's queue timeout); a client that gives up resets or closes.
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ConnState:      conns.connState,
		ErrorLog:       errorLog(s.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(tl) }()
	s.log.Info("listening", "addr", ln.Addr().String(), "model", cfg.Name)

	loadDone := make(chan error, 1)
	go func() { loadDone <- s.Load(ctx) }()

	var runErr error
	for runErr == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			serveErr = nil
			runErr = fmt.Errorf("serve: %w", err)
		case err := <-loadDone:
			loadDone = nil
			if err != nil {
				if ctx.Err() == nil {
					runErr = err
				}
				break
			}
			d := time.Since(start)
			s.met.startup.Set(d.Seconds())
			s.log.Info("healthy", "startup", d.Round(time.Millisecond))
		}
	}

	if loadDone != nil && s.ready.Load() == nil {
		s.log.Info("stop requested while loading the model; not waiting for the load")
	}
	s.closing.Store(true)
	tl.Close() // refuse new connections; the open ones stay, for the drain
	s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	var incomplete error
	drained := conns.waitQuiet(sctx)
	if !drained {
		n := conns.busy()
		s.log.Warn("drain incomplete: connections still busy at the shutdown timeout; failing what remains", "busy", n, "timeout", s.cfg.ShutdownTimeout)
		incomplete = fmt.Errorf("%w: %d connections still busy after --shutdown-timeout %v", ErrShutdownIncomplete, n, s.cfg.ShutdownTimeout)
	}
	// The backend finishes what it holds (nothing, after a full drain) or,
	// its context over, fails it: those handlers answer 503 shutting_down.
	if err := s.Close(sctx); err != nil {
		s.log.Warn("shutdown incomplete", "err", err)
		if incomplete == nil {
			incomplete = fmt.Errorf("%w: %v", ErrShutdownIncomplete, err)
		}
	}
	if !drained {
		gctx, gcancel := context.WithTimeout(context.Background(), closeGrace)
		conns.waitQuiet(gctx) // let the failed requests' answers out
		gcancel()
	}
	hs.Close() // the idle connections, and whatever is stuck
	s.log.Info("stopped")
	return errors.Join(runErr, incomplete)
}

// closeGrace is how long an incomplete drain waits, after failing the
// backend's requests, for their answers to be written before it closes
// every connection.
const closeGrace = time.Second

// errStopped: Close ran before the backend was ready.
var errStopped = errors.New("server stopped before the backend was ready")

// Load opens the backend and runs one warm-up draft; the server is healthy
// when it returns nil. If Close runs first, the backend is closed and Load
// returns an error.
func (s *Server) Load(ctx context.Context) error {
	t0 := time.Now()
	d, err := s.cfg.Open(ctx, observer{s.met})
	if err != nil {
		return err
	}
	tLoad := time.Since(t0)
	bi := d.Info()
	if s.cfg.DraftLen > bi.Rules.MaxDraftLen {
		d.Close(ctx)
		return fmt.Errorf("%w: draft length %d > max draft length %d", ErrConfig, s.cfg.DraftLen, bi.Rules.MaxDraftLen)
	}
	if need := int64(bi.Rules.MaxContext + bi.Rules.MaxDraftLen); s.cfg.MaxSessionTokens < need {
		d.Close(ctx)
		return fmt.Errorf("%w: --max-session-tokens %d cannot hold one session of the model's maximum context %d plus a draft of %d (--max-draft-len)",
			ErrConfig, s.cfg.MaxSessionTokens, bi.Rules.MaxContext, bi.Rules.MaxDraftLen)
	}
	// A call is queued whole: more items than the queue holds could never
	// be. The default follows a smaller queue; a larger explicit value is an
	// error.
	maxItems := s.cfg.MaxBatchItems
	if maxItems == 0 {
		maxItems = Defaults.MaxBatchItems
		if bi.MaxQueue > 0 {
			maxItems = min(maxItems, bi.MaxQueue)
		}
	}
	if bi.MaxQueue > 0 && maxItems > bi.MaxQueue {
		d.Close(ctx)
		return fmt.Errorf("%w: max batch items %d > the engine's max queue %d: such a call could never be queued", ErrConfig, maxItems, bi.MaxQueue)
	}
	b := &backend{d: d, maxItems: maxItems, lim: limits{Rules: bi.Rules, DraftLen: s.cfg.DraftLen}, strs: bi.Strategies, strategy: bi.Strategy,
		traffic: newTraffic(bi.VocabSize, bi.TokenClasses), model: bi.Model}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		d.Close(context.WithoutCancel(ctx))
		return errStopped
	}
	s.loaded = b
	s.mu.Unlock()

	t1 := time.Now()
	warm := warmupContext(bi)
	res, err := d.DraftStrategy(ctx, warm, 1, draft.NameModel) // the model, whatever the default
	if err == nil && len(res.Draft) != 1 {
		err = fmt.Errorf("got %d tokens, want 1", len(res.Draft))
	}
	if err != nil {
		return fmt.Errorf("warm-up draft: %w", err)
	}
	if b.info, err = json.Marshal(s.info(bi, maxItems)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errStopped
	}
	s.ready.Store(b)
	s.log.Info("model ready", "model", bi.Model, "arch", bi.Architecture, "kernels", bi.Kernels, "threads", bi.Threads,
		"load", tLoad.Round(time.Millisecond), "warmup", time.Since(t1).Round(time.Millisecond))
	return nil
}

// warmupContext is a short context of valid ids for the warm-up draft.
func warmupContext(bi BackendInfo) []int {
	n := min(8, bi.Rules.MaxContext-1, bi.Rules.Vocab)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	if bi.BOS >= 0 && bi.BOS < bi.Rules.Vocab {
		ids[0] = bi.BOS
	}
	return ids
}

// Close refuses new work and closes the backend (which finishes what it
// holds, or fails it when ctx ends).
func (s *Server) Close(ctx context.Context) error {
	s.closing.Store(true)
	s.mu.Lock()
	b := s.loaded
	s.loaded = nil
	s.stopped = true
	s.mu.Unlock()
	if b == nil {
		return nil
	}
	err := b.d.Close(ctx)
	if errors.Is(err, engine.ErrClosed) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("close backend: %w", err)
	}
	return err
}

// info is the answer of GET /v1/info: the backend's description and the
// server's own settings.
type info struct {
	BackendInfo
	DraftLen      int `json:"draft_len"`
	MaxBatchItems int `json:"max_batch_items"` // items of one POST /v1/drafts call
	// The confidence bound and signal of requests that give none
	// (Config.MinConfidence, Config.ConfidenceSignal) and the signals a
	// request may choose (engine.ConfidenceSignals).
	MinConfidence     float32   `json:"min_confidence"`
	ConfidenceSignal  string    `json:"confidence_signal"`
	ConfidenceSignals []string  `json:"confidence_signals"`
	Version           string    `json:"version"`
	Build             buildInfo `json:"build"`
}

type buildInfo struct {
	Module      string `json:"module"`
	Version     string `json:"module_version"`
	Go          string `json:"go"`
	VCSRevision string `json:"vcs_revision,omitempty"`
	VCSTime     string `json:"vcs_time,omitempty"`
	VCSModified bool   `json:"vcs_modified,omitempty"`
}

func (s *Server) info(bi BackendInfo, maxItems int) info {
	b := readBuildInfo()
	return info{BackendInfo: bi, DraftLen: s.cfg.DraftLen, MaxBatchItems: maxItems, MinConfidence: s.cfg.MinConfidence,
		ConfidenceSignal: cmp.Or(s.cfg.ConfidenceSignal, engine.ConfidenceSignal), ConfidenceSignals: engine.ConfidenceSignals, Version: b.version(), Build: b}
}

func readBuildInfo() buildInfo {
	var b buildInfo
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Module, b.Version, b.Go = bi.Main.Path, bi.Main.Version, bi.GoVersion
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			b.VCSRevision = st.Value
		case "vcs.time":
			b.VCSTime = st.Value
		case "vcs.modified":
			b.VCSModified = st.Value == "true"
		}
	}
	return b
}

// version is the short form: the VCS revision (12 digits, "+dirty" when
// modified) if known, else the module version.
func (b buildInfo) version() string {
	if b.VCSRevision != "" {
		v := b.VCSRevision[:min(12, len(b.VCSRevision))]
		if b.VCSModified {
			v += "+dirty"
		}
		return v
	}
	if b.Version != "" {
		return b.Version
	}
	return "unknown"
}
