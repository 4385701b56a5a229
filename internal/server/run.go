// The life cycle of a serving process: listen at once (GET /health answers
// 503 loading), load the model, build the engine, run one warm-up draft,
// turn healthy, and on cancellation stop accepting, let in-flight requests
// finish, close the engine and the model. It does not parse flags
// (cmd/draftd/serve.go does).

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/kernels"
	"github.com/draftd/draftd/internal/model"
)

// Strategy names how drafts are made.
const Strategy = "model-greedy"

// Run serves on ln until ctx is cancelled, then shuts down gracefully and
// returns nil. It returns an error if the model cannot be loaded or warmed
// up, or if serving fails. ln is closed on return.
func Run(ctx context.Context, ln net.Listener, cfg Config) error {
	start := time.Now()
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second, // headers + body
		// No WriteTimeout: a draft may wait in the queue; a client that gives up
		// disconnects, which cancels its work.
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	s.log.Info("listening", "addr", ln.Addr().String(), "model", cfg.ModelPath)

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

	s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
	s.closing.Store(true)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		s.log.Warn("in-flight requests did not finish in time", "err", err)
		hs.Close()
	}
	if loadDone != nil {
		<-loadDone // a warm-up in progress sees ctx cancelled
	}
	if err := s.Close(sctx); err != nil {
		// Requests still running at the deadline were failed; the process can
		// exit all the same.
		s.log.Warn("shutdown incomplete", "err", err)
	}
	s.log.Info("stopped")
	return runErr
}

// Load loads the model, starts the engine and runs one warm-up draft; the
// server is healthy when it returns nil.
func (s *Server) Load(ctx context.Context) error {
	if s.cfg.beforeLoad != nil {
		s.cfg.beforeLoad()
	}
	t0 := time.Now()
	path := s.cfg.ModelPath
	if s.cfg.Resolve != nil {
		var err error
		if path, err = s.cfg.Resolve(ctx, path); err != nil {
			return fmt.Errorf("prepare model %s: %w", s.cfg.ModelPath, err)
		}
	}
	m, err := model.Load(path, model.Options{Threads: s.cfg.Threads, KVF32: s.cfg.KVF32})
	if err != nil {
		return fmt.Errorf("load model: %w", err)
	}
	tLoad := time.Since(t0)
	if err := ctx.Err(); err != nil {
		m.Close()
		return err
	}
	e, err := engine.New(m, engine.Options{
		MaxBatch: s.cfg.MaxBatch, MaxQueue: s.cfg.MaxQueue, KVCacheBytes: s.cfg.KVCacheBytes,
		MaxDraftLen: s.cfg.MaxDraftLen, Logger: s.log, Observer: observer{s.met},
	})
	if err != nil {
		m.Close()
		return fmt.Errorf("start engine: %w", err)
	}
	var d Drafter = e
	if s.cfg.wrap != nil {
		d = s.cfg.wrap(d)
	}
	b := &backend{d: d, m: m, lim: limits{
		Vocab: m.Vocab, MaxContext: m.MaxContext, DraftLen: s.cfg.DraftLen, MaxDraftLen: s.cfg.MaxDraftLen,
	}}
	s.mu.Lock()
	s.loaded = b
	s.mu.Unlock()

	t1 := time.Now()
	warm := warmupContext(&m.Config)
	res, err := d.Draft(ctx, warm, 1)
	if err == nil && len(res.Draft) != 1 {
		err = fmt.Errorf("got %d tokens, want 1", len(res.Draft))
	}
	if err != nil {
		return fmt.Errorf("warm-up draft: %w", err)
	}
	if b.info, err = json.Marshal(s.info(m)); err != nil {
		return err
	}
	s.ready.Store(b)
	s.log.Info("model ready", "model", m.String(), "kernels", kernels.Impl(), "threads", m.Threads(),
		"load", tLoad.Round(time.Millisecond), "warmup", time.Since(t1).Round(time.Millisecond))
	return nil
}

// warmupContext is a short context of valid ids for the warm-up draft.
func warmupContext(c *model.Config) []int {
	n := min(8, c.MaxContext-1, c.Vocab)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	if c.BOS >= 0 && c.BOS < c.Vocab {
		ids[0] = c.BOS
	}
	return ids
}

// Close refuses new work, closes the engine (which finishes what it holds,
// or fails it when ctx ends, and returns once its goroutine has stopped) and
// then the model.
func (s *Server) Close(ctx context.Context) error {
	s.closing.Store(true)
	s.mu.Lock()
	b := s.loaded
	s.loaded = nil
	s.mu.Unlock()
	if b == nil {
		return nil
	}
	err := b.d.Close(ctx)
	if errors.Is(err, engine.ErrClosed) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("close engine: %w", err)
	}
	return errors.Join(err, b.m.Close())
}

// info is the answer of GET /v1/info.
type info struct {
	Architecture string         `json:"architecture"`
	Parameters   int64          `json:"parameters"`
	WeightBytes  int64          `json:"weight_bytes"`
	WeightTypes  map[string]int `json:"weight_types"` // tensors per storage type
	VocabSize    int            `json:"vocab_size"`
	MaxContext   int            `json:"max_context"`
	Hidden       int            `json:"hidden_size"`
	Layers       int            `json:"num_layers"`
	Heads        int            `json:"num_heads"`
	KVHeads      int            `json:"num_kv_heads"`
	HeadDim      int            `json:"head_dim"`
	Model        string         `json:"model"`
	DraftLen     int            `json:"draft_len"`
	MaxDraftLen  int            `json:"max_draft_len"`
	Strategy     string         `json:"strategy"`
	Kernels      string         `json:"kernels"`
	Threads      int            `json:"threads"`
	KVCacheType  string         `json:"kv_cache_type"`
	MaxBatch     int            `json:"max_batch"`
	MaxQueue     int            `json:"max_queue"`
	Version      string         `json:"version"`
	Build        buildInfo      `json:"build"`
}

type buildInfo struct {
	Module      string `json:"module"`
	Version     string `json:"module_version"`
	Go          string `json:"go"`
	VCSRevision string `json:"vcs_revision,omitempty"`
	VCSTime     string `json:"vcs_time,omitempty"`
	VCSModified bool   `json:"vcs_modified,omitempty"`
}

func (s *Server) info(m *model.Model) info {
	kv := "f16"
	if m.KVF32() {
		kv = "f32"
	}
	bi := readBuildInfo()
	return info{
		Architecture: m.Arch, Parameters: m.Params, WeightBytes: m.WeightBytes, WeightTypes: m.TypeCounts,
		VocabSize: m.Vocab, MaxContext: m.MaxContext, Hidden: m.Hidden, Layers: m.Layers,
		Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, Model: filepath.Base(m.Path()),
		DraftLen: s.cfg.DraftLen, MaxDraftLen: s.cfg.MaxDraftLen, Strategy: Strategy,
		Kernels: kernels.Impl(), Threads: m.Threads(), KVCacheType: kv,
		MaxBatch: s.cfg.MaxBatch, MaxQueue: s.cfg.MaxQueue,
		Version: bi.version(), Build: bi,
	}
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
