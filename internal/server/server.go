// Package server is draftd's HTTP front end: the draft protocol of
// docs/protocol.md (GET /health, POST /draft, GET /metrics, GET /v1/info,
// POST /v1/drafts, sessions, DELETE /v1/sessions/ID), request limits,
// metrics and logs, and the life cycle of a serving process (listen at once,
// open and warm up the backend, serve, shut down gracefully). It does not
// load, batch, cache or run the model: the Backend it is handed does
// (cmd/draftd builds it from internal/model and internal/engine).
//
// This file holds the Server, its routes and the middleware that logs,
// counts and recovers every request.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/session"
	"github.com/draftd/draftd/internal/vocabrank"
)

// Backend is what the server drafts with: the model and its engine, built
// by the caller (cmd/draftd) and handed over by Config.Open.
type Backend interface {
	// Draft is engine.Engine.Draft: the greedy continuation of tokens,
	// n tokens long (already shortened to fit the model's maximum context).
	Draft(ctx context.Context, tokens []int, n int) (engine.Result, error)
	// DraftStrategy is Draft with the named drafting strategy, one of
	// Info().Strategies, instead of the backend's default.
	DraftStrategy(ctx context.Context, tokens []int, n int, strategy string) (engine.Result, error)
	// DraftBatch is engine.Engine.DraftBatch with strategies by name (one
	// of Info().Strategies, "" for the backend's default): the items enter
	// the engine together; errs[i] is item i's failure, err the call's.
	DraftBatch(ctx context.Context, items []BatchItem) (res []engine.Result, errs []error, err error)
	// Stats is a snapshot of the engine's gauges, for /metrics.
	Stats() engine.Stats
	// Info describes the model and engine, for /v1/info and validation.
	Info() BackendInfo
	// Close finishes or (when ctx ends) fails the work it holds and
	// releases the model.
	Close(ctx context.Context) error
}

// BackendInfo is what the server needs to know of a backend: the request
// rules, a valid context for the warm-up draft, and the fields of
// GET /v1/info.
type BackendInfo struct {
	Rules engine.Rules `json:"-"`
	BOS   int          `json:"-"` // beginning-of-sequence id, or −1

	Architecture  string                 `json:"architecture"`
	Parameters    int64                  `json:"parameters"`
	WeightBytes   int64                  `json:"weight_bytes"`
	WeightTypes   map[string]int         `json:"weight_types"` // tensors per storage type
	WeightMix     map[string]WeightShare `json:"weight_mix"`   // tensors, parameters, bytes, bits/weight per storage type
	BitsPerWeight float64                `json:"bits_per_weight"`
	VocabSize     int                    `json:"vocab_size"`
	MaxContext    int                    `json:"max_context"`
	Hidden        int                    `json:"hidden_size"`
	Layers        int                    `json:"num_layers"`
	Heads         int                    `json:"num_heads"`
	KVHeads       int                    `json:"num_kv_heads"`
	HeadDim       int                    `json:"head_dim"`
	Model         string                 `json:"model"`
	MaxDraftLen   int                    `json:"max_draft_len"`
	Strategy      string                 `json:"strategy"`
	Strategies    []string               `json:"strategies"`  // names a request may give; must include "model"
	TrustMatch    int                    `json:"trust_match"` // hybrid's options (internal/draft)
	Eager         bool                   `json:"eager"`
	MinMatch      int                    `json:"min_match"`
	LookupChoice  string                 `json:"lookup_choice"`
	Kernels       string                 `json:"kernels"`
	Threads       int                    `json:"threads"`
	KVCacheType   string                 `json:"kv_cache_type"`
	MaxBatch      int                    `json:"max_batch"`
	MaxQueue      int                    `json:"max_queue"`
	// TokenClasses, when set, says which ids of the model's tokenizer are
	// special (always kept by a trimmed head) and which unused: what
	// GET /v1/vocab needs to write a ranking. Called at most once, on the
	// first GET /v1/vocab (it may load the tokenizer).
	TokenClasses func() ([]vocabrank.Class, error) `json:"-"`
}

// BatchItem is one draft of Backend.DraftBatch.
type BatchItem struct {
	Tokens   []int  // (L) the context
	N        int    // draft tokens wanted (already shortened to fit)
	Strategy string // "" for the backend's default
	// Alts and Background are engine.Item's (pre-drafting).
	Alts       bool
	Background *engine.Background
	// MinConfidence and Confidences are engine.Item's (confidence-bounded
	// drafts).
	MinConfidence    float32
	Confidences      bool
	ConfidenceSignal string
	// Recall is engine.Item's: a session's previous draft after its
	// accepted tokens (hybrid proposes it; the draft does not change).
	Recall []int
}

// EngineItem is it as an engine.Item, with the strategy s (nil: the
// engine's default) — the one mapping every Backend over an engine uses.
func (it *BatchItem) EngineItem(s draft.Strategy) engine.Item {
	return engine.Item{Tokens: it.Tokens, N: it.N, Strategy: s, Alts: it.Alts, Background: it.Background,
		MinConfidence: it.MinConfidence, Confidences: it.Confidences, ConfidenceSignal: it.ConfidenceSignal, Recall: it.Recall}
}

// WeightShare is one storage type's part of the weights (a K-quant mix such
// as Q4_K_M holds several).
type WeightShare struct {
	Tensors       int     `json:"tensors"`
	Params        int64   `json:"parameters"`
	Bytes         int64   `json:"bytes"`
	BitsPerWeight float64 `json:"bits_per_weight"`
}

// Config configures a server. Zero fields take the values of Defaults.
type Config struct {
	// Open loads the model and starts the engine (required), reporting the
	// engine's steps to obs (the server's metrics). It is called once, after
	// the server listens; ctx ends when the server is stopped.
	Open func(ctx context.Context, obs engine.Observer) (Backend, error)
	Name string // what is served (the model path), for the log

	DraftLen             int           // n when a request gives none
	MaxBodyBytes         int64         // POST /draft body limit (413 above)
	MaxInflightBodyBytes int64         // bytes of request bodies held at once (503 above)
	BodyTimeout          time.Duration // time to receive one request body (408 after)
	ShutdownTimeout      time.Duration // how long in-flight requests may take to finish
	Logger               *slog.Logger

	// Batched and incremental drafting (docs/protocol.md).
	MaxBatchItems    int           // items of one POST /v1/drafts call (0: Defaults', or the engine's max queue when smaller)
	MaxSessions      int           // sessions held at once (LRU eviction beyond)
	MaxSessionTokens int64         // context + last-draft tokens held over all sessions (LRU eviction beyond)
	SessionTTL       time.Duration // a session unused this long is gone
	// PredraftBranches is the number of next requests drafted ahead per
	// session (0: pre-drafting off).
	PredraftBranches int
	// MinConfidence is the confidence bound of /v1/drafts items and session
	// requests that give no "min_confidence" (0: none); a plain POST /draft
	// without the field is never bounded.
	MinConfidence float32
	// ConfidenceSignal is the confidence signal (engine.ConfidenceSignals)
	// of requests that give no "confidence_signal"; "": engine.ConfidenceSignal.
	ConfidenceSignal string
	Now              func() time.Time // the sessions' clock (nil: time.Now); tests inject one
}

// Defaults are the values zero Config fields take (and the defaults of the
// serve flags): the one definition.
var Defaults = Config{
	DraftLen:             16,
	MaxBodyBytes:         2 << 20,
	MaxInflightBodyBytes: 128 << 20,
	BodyTimeout:          10 * time.Second,
	ShutdownTimeout:      30 * time.Second,
	MaxBatchItems:        256,
	MaxSessions:          4096,
	MaxSessionTokens:     1 << 23,
	SessionTTL:           10 * time.Minute,
}

// Bounds of the Config fields (and of their serve flags). DraftLen is
// bounded by the backend's MaxDraftLen.
const (
	MinBodyBytes         = 64
	MaxBodyBytes         = 1 << 30
	MaxInflightBodyBytes = 64 << 30
	MaxBodyTimeout       = 10 * time.Minute
	MaxShutdownTimeout   = time.Hour
	readHeaderTimeout    = 10 * time.Second
	idleTimeout          = 120 * time.Second
	maxHeaderBytes       = 64 << 10
	MaxMaxBatchItems     = engine.MaxBatchItems
	MaxMaxSessions       = 1 << 20
	MaxMaxSessionTokens  = 1 << 32
	MaxSessionTTL        = 24 * time.Hour
)

// ErrConfig marks an unusable Config.
var ErrConfig = errors.New("bad server configuration")

func (c *Config) fill() error {
	if c.DraftLen == 0 {
		c.DraftLen = Defaults.DraftLen
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = Defaults.MaxBodyBytes
	}
	if c.MaxInflightBodyBytes == 0 {
		c.MaxInflightBodyBytes = max(Defaults.MaxInflightBodyBytes, c.MaxBodyBytes)
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = Defaults.BodyTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = Defaults.ShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = Defaults.MaxSessions
	}
	if c.MaxSessionTokens == 0 {
		c.MaxSessionTokens = Defaults.MaxSessionTokens
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = Defaults.SessionTTL
	}
	switch {
	case c.Open == nil:
		return fmt.Errorf("%w: no Open function", ErrConfig)
	case c.DraftLen < 1 || c.DraftLen > engine.MaxMaxDraftLen:
		return fmt.Errorf("%w: draft length %d outside [1, %d]", ErrConfig, c.DraftLen, engine.MaxMaxDraftLen)
	case c.MaxBodyBytes < MinBodyBytes || c.MaxBodyBytes > MaxBodyBytes:
		return fmt.Errorf("%w: max body bytes %d outside [%d, %d]", ErrConfig, c.MaxBodyBytes, MinBodyBytes, MaxBodyBytes)
	case c.MaxInflightBodyBytes < c.MaxBodyBytes || c.MaxInflightBodyBytes > MaxInflightBodyBytes:
		return fmt.Errorf("%w: max in-flight body bytes %d outside [max body bytes %d, %d]", ErrConfig, c.MaxInflightBodyBytes, c.MaxBodyBytes, MaxInflightBodyBytes)
	case c.BodyTimeout < 0 || c.BodyTimeout > MaxBodyTimeout:
		return fmt.Errorf("%w: body timeout %v outside (0, %v]", ErrConfig, c.BodyTimeout, MaxBodyTimeout)
	case c.ShutdownTimeout < 0 || c.ShutdownTimeout > MaxShutdownTimeout:
		return fmt.Errorf("%w: shutdown timeout %v outside (0, %v]", ErrConfig, c.ShutdownTimeout, MaxShutdownTimeout)
	case c.MaxBatchItems < 0 || c.MaxBatchItems > MaxMaxBatchItems:
		return fmt.Errorf("%w: max batch items %d outside [1, %d]", ErrConfig, c.MaxBatchItems, MaxMaxBatchItems)
	case c.MaxSessions < 1 || c.MaxSessions > MaxMaxSessions:
		return fmt.Errorf("%w: max sessions %d outside [1, %d]", ErrConfig, c.MaxSessions, MaxMaxSessions)
	case c.MaxSessionTokens < 1 || c.MaxSessionTokens > MaxMaxSessionTokens:
		return fmt.Errorf("%w: max session tokens %d outside [1, %d]", ErrConfig, c.MaxSessionTokens, int64(MaxMaxSessionTokens))
	case c.SessionTTL < 0 || c.SessionTTL > MaxSessionTTL:
		return fmt.Errorf("%w: session TTL %v outside (0, %v]", ErrConfig, c.SessionTTL, MaxSessionTTL)
	case !(c.MinConfidence >= 0 && c.MinConfidence <= engine.MaxConfidence):
		return fmt.Errorf("%w: min confidence %v outside [0, %d]", ErrConfig, c.MinConfidence, engine.MaxConfidence)
	case c.ConfidenceSignal != "" && !slices.Contains(engine.ConfidenceSignals, c.ConfidenceSignal):
		return fmt.Errorf("%w: confidence signal %q is none of %q", ErrConfig, c.ConfidenceSignal, engine.ConfidenceSignals)
	case c.PredraftBranches < 0 || c.PredraftBranches > MaxPredraftBranches:
		return fmt.Errorf("%w: pre-draft branches %d outside [0, %d]", ErrConfig, c.PredraftBranches, MaxPredraftBranches)
	}
	return nil
}

// Server answers the draft protocol. It starts in the loading state; Load
// makes it ready, Close stops it.
type Server struct {
	cfg     Config
	log     *slog.Logger
	met     *metrics
	handler http.Handler

	sessions  *session.Store
	pre       *predrafter             // nil: pre-drafting off
	ready     atomic.Pointer[backend] // nil while loading
	closing   atomic.Bool
	bodyBytes atomic.Int64 // bytes of request bodies being read or parsed

	mu      sync.Mutex
	loaded  *backend // what Close releases
	stopped bool     // Close ran: a backend that arrives later is closed at once
}

// backend is the loaded backend and what the server derived from it.
type backend struct {
	d        Backend
	maxItems int // items of one POST /v1/drafts call
	lim      limits
	info     []byte   // GET /v1/info answer
	strs     []string // the strategies a request may name
	strategy string   // the backend's default strategy
	traffic  *traffic // the token ids of the requests drafted for (GET /v1/vocab)
	model    string   // the model's file name, for GET /v1/vocab
}

// New returns a server in the loading state.
func New(cfg Config) (*Server, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	st, err := session.New(session.Options{MaxSessions: cfg.MaxSessions, MaxTokens: cfg.MaxSessionTokens, TTL: cfg.SessionTTL, Now: cfg.Now})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, sessions: st}
	s.met = newMetrics(func() (engine.Stats, bool) {
		if b := s.ready.Load(); b != nil {
			return b.d.Stats(), true
		}
		return engine.Stats{}, false
	}, st.Stats, session.MaxBytes(cfg.MaxSessions, cfg.MaxSessionTokens))
	if cfg.PredraftBranches > 0 {
		s.pre = newPredrafter(cfg.PredraftBranches, cfg.MaxSessions, s.met)
	}
	s.handler = s.routes()
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// handlerFunc is a route's handler: it writes a success itself and returns
// any failure for the middleware to answer (apiErrorFor).
type handlerFunc func(w http.ResponseWriter, r *http.Request, x *exchange) error

// exchange collects what the request log line says about one request.
type exchange struct {
	attrs    []slog.Attr
	bodyRead bool // parseBody read the whole body
}

func (x *exchange) add(a ...slog.Attr) { x.attrs = append(x.attrs, a...) }

// route is one method and path.
type route struct {
	method, path string
	h            handlerFunc
}

func (s *Server) routes() http.Handler {
	metricsHandler := promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{
		ErrorLog: errorLog(s.log.Handler(), slog.LevelWarn), Registry: s.met.reg,
	})
	table := []route{
		{"GET", "/health", s.handleHealth},
		{"POST", "/draft", s.handleDraft},
		{"GET", "/metrics", func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
			metricsHandler.ServeHTTP(w, r)
			return nil
		}},
		{"GET", "/v1/info", s.handleInfo},
		{"POST", "/v1/drafts", s.handleDrafts},
		{"DELETE", "/v1/sessions/{id}", s.handleDeleteSession},
		{"GET", "/v1/vocab", s.handleVocab},
	}
	mux := http.NewServeMux()
	allow := map[string][]string{}
	var list []string
	for _, rt := range table {
		mux.Handle(rt.method+" "+rt.path, s.wrap(rt.path, rt.h))
		allow[rt.path] = append(allow[rt.path], rt.method)
		if rt.method == "GET" {
			allow[rt.path] = append(allow[rt.path], "HEAD")
		}
		list = append(list, rt.method+" "+rt.path)
	}
	routesText := strings.Join(list, ", ")
	// Everything else: a JSON 405 for a known path, a JSON 404 otherwise;
	// a DELETE of a session path that names no single session (empty,
	// several segments) is a 400, as a malformed id is.
	other := s.wrap("other", func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
		path := r.URL.Path
		if strings.HasPrefix(path, "/v1/sessions/") {
			if r.Method == "DELETE" {
				return reqErr(CodeInvalidRequest, fmt.Sprintf("%s names no session: want /v1/sessions/ID, ID 1 to %d bytes of [A-Za-z0-9._:-]", clip(path), session.MaxIDLen))
			}
			path = "/v1/sessions/{id}"
		}
		if methods, ok := allow[path]; ok {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			return reqErr(CodeMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s; allowed: %s", clip(r.Method), r.URL.Path, strings.Join(methods, ", ")))
		}
		return reqErr(CodeNotFound, fmt.Sprintf("no route %s %s; routes: %s", clip(r.Method), clip(r.URL.Path), routesText))
	})
	mux.Handle("/", other)
	// A path that is not clean ("..", ".", "//") is never redirected to its
	// clean form, which may be another route or another session's path: it
	// matches no route.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p != "" && r.Method != "CONNECT" && cleanPath(p) != p {
			other.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// cleanPath is p with "." and ".." elements and repeated slashes resolved,
// a trailing slash kept (net/http.ServeMux's rule for a redirect).
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// recorder remembers the status a handler wrote, and marks every answer
// written while the server is closing Connection: close.
type recorder struct {
	http.ResponseWriter
	status  int
	closing *atomic.Bool
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if w.closing.Load() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap is the middleware of every route: it answers errors, recovers panics
// (a 500, counted and logged with its stack), counts the request by status
// and writes its log line (debug; warn for errors; error for 500s).
func (s *Server) wrap(name string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &recorder{ResponseWriter: w, closing: &s.closing}
		x := &exchange{}
		if r.ContentLength != 0 && name != "/draft" && name != "/v1/drafts" {
			// A body on a route that reads none: answer, then close,
			// rather than wait for the body to arrive (net/http would,
			// to reuse the connection).
			dropBody(rw)
		}
		var ae *apiError
		abort := false
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic serving request", "route", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				ae = &apiError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error (a bug; see the server log)", Bug: true}
				if rw.status == 0 {
					s.writeError(rw, *ae)
				}
			}
			status := rw.status
			if ae != nil && ae.Status == StatusClientClosed {
				status = StatusClientClosed
			}
			if status == 0 {
				status = http.StatusOK
			}
			d := time.Since(start)
			s.met.request(name, status, d)
			if ae != nil && ae.Bug {
				s.met.panics.Inc()
			}
			s.logRequest(r, name, status, d, x, ae)
			if abort {
				// The client is gone and nothing was written: close the
				// connection rather than let net/http send an empty 200.
				panic(http.ErrAbortHandler)
			}
		}()
		if err := h(rw, r, x); err != nil {
			e := apiErrorFor(err)
			ae = &e
			switch {
			case rw.status != 0:
			case e.Status == StatusClientClosed:
				abort = true
			default:
				if !x.bodyRead && r.ContentLength != 0 {
					dropBody(rw) // refused before (or while) its body arrived
				}
				s.writeError(rw, e)
			}
			if e.Bug {
				x.add(slog.String("cause", err.Error()))
			}
		}
	})
}

func (s *Server) logRequest(r *http.Request, route string, status int, d time.Duration, x *exchange, ae *apiError) {
	// Errors at warn, bugs at error; the rest (a 503 from GET /health while
	// loading, a client that hung up) at debug.
	level := slog.LevelDebug
	switch {
	case ae != nil && ae.Bug:
		level = slog.LevelError
	case ae != nil && ae.Status != StatusClientClosed:
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := append([]slog.Attr{
		slog.String("method", clip(r.Method)), slog.String("path", clip(r.URL.Path)), slog.String("route", route),
		slog.Int("status", status), slog.Duration("dur", d), slog.String("remote", r.RemoteAddr),
	}, x.attrs...)
	if ae != nil {
		attrs = append(attrs, slog.String("code", ae.Code), slog.String("error", ae.Message))
	}
	s.log.LogAttrs(ctx, level, "request", attrs...)
}

// dropBody makes the answer the connection's last and ends every read of
// the rest of the request body at once: net/http would otherwise wait for
// that rest (up to 256 KiB) before answering, to keep the connection, and a
// client that stalls would get no answer at all.
func dropBody(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	http.NewResponseController(w).SetReadDeadline(time.Now())
}

// writeError writes the JSON error body {"error":{"code","message"}}.
func (s *Server) writeError(w http.ResponseWriter, e apiError) {
	h := w.Header()
	if e.RetryAfter > 0 {
		h.Set("Retry-After", itoa(int64(e.RetryAfter)))
	}
	body := fmt.Appendf(nil, `{"error":{"code":%q,"message":%s}}`+"\n", e.Code, jsonString(e.Message))
	writeJSON(w, e.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}
