// Package server is draftd's HTTP front end: the draft protocol of DESIGN §1
// (GET /health, POST /draft, GET /metrics, GET /v1/info), request limits,
// metrics and logs, and the life cycle of a serving process (listen at once,
// load and warm up the model, serve, shut down gracefully). It does not
// batch, cache or run the model: internal/engine does, behind Drafter.
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
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/model"
)

// Drafter is the engine as the server sees it; *engine.Engine implements it.
type Drafter interface {
	Draft(ctx context.Context, tokens []int, n int) (engine.Result, error)
	Stats() engine.Stats
	Close(ctx context.Context) error
}

var _ Drafter = (*engine.Engine)(nil)

// Config configures a server. Zero fields take the defaults of Defaults.
type Config struct {
	ModelPath string // a .gguf file or an HF directory (required)
	Threads   int    // kernel workers; ≤ 0: all cores
	KVF32     bool   // keep the KV cache in f32

	DraftLen     int   // n when a request gives none
	MaxDraftLen  int   // largest n a request may ask
	MaxBatch     int   // sequences per engine step
	MaxQueue     int   // requests waiting for a batch slot before 503
	KVCacheBytes int64 // KV cache budget; 0: the engine's default
	MaxBodyBytes int64 // POST /draft body limit (413 above)

	ShutdownTimeout time.Duration // how long in-flight requests may take to finish
	Logger          *slog.Logger

	// Resolve, when set, turns ModelPath into the path to load (e.g. a Hub
	// model id prepared into a cache) while /health answers 503.
	Resolve func(ctx context.Context, model string) (string, error)

	// Test hooks.
	beforeLoad func()                // called before the model is loaded
	wrap       func(Drafter) Drafter // wraps the engine
}

// Defaults are the values zero Config fields take.
var Defaults = Config{
	DraftLen:        16,
	MaxDraftLen:     64,
	MaxBatch:        32,
	MaxQueue:        256,
	MaxBodyBytes:    2 << 20,
	ShutdownTimeout: 30 * time.Second,
}

// ErrConfig marks an unusable Config.
var ErrConfig = errors.New("bad server configuration")

func (c *Config) fill() error {
	setInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setInt(&c.DraftLen, Defaults.DraftLen)
	setInt(&c.MaxDraftLen, Defaults.MaxDraftLen)
	setInt(&c.MaxBatch, Defaults.MaxBatch)
	setInt(&c.MaxQueue, Defaults.MaxQueue)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = Defaults.MaxBodyBytes
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = Defaults.ShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.ModelPath == "":
		return fmt.Errorf("%w: no model path", ErrConfig)
	case c.MaxDraftLen < 1:
		return fmt.Errorf("%w: max draft length %d < 1", ErrConfig, c.MaxDraftLen)
	case c.DraftLen < 1 || c.DraftLen > c.MaxDraftLen:
		return fmt.Errorf("%w: draft length %d outside [1, max draft length %d]", ErrConfig, c.DraftLen, c.MaxDraftLen)
	case c.MaxBatch < 1:
		return fmt.Errorf("%w: max batch %d < 1", ErrConfig, c.MaxBatch)
	case c.MaxQueue < 0:
		return fmt.Errorf("%w: max queue %d < 0", ErrConfig, c.MaxQueue)
	case c.KVCacheBytes < 0:
		return fmt.Errorf("%w: KV cache bytes %d < 0", ErrConfig, c.KVCacheBytes)
	case c.MaxBodyBytes < 64:
		return fmt.Errorf("%w: max body bytes %d < 64", ErrConfig, c.MaxBodyBytes)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("%w: shutdown timeout %v < 0", ErrConfig, c.ShutdownTimeout)
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

	ready    atomic.Pointer[backend] // nil while loading
	closing  atomic.Bool
	inflight chan struct{} // admission: POST /draft bodies being read or drafted

	mu     sync.Mutex
	loaded *backend // what Close releases
}

// backend is the loaded model and its engine.
type backend struct {
	d    Drafter
	m    *model.Model
	lim  limits
	info []byte // GET /v1/info answer
}

// New returns a server in the loading state.
func New(cfg Config) (*Server, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	s.met = newMetrics(func() (engine.Stats, bool) {
		if b := s.ready.Load(); b != nil {
			return b.d.Stats(), true
		}
		return engine.Stats{}, false
	})
	// The engine bounds waiting requests by MaxQueue; this bound (a batch more)
	// only keeps a burst of clients from holding unbounded request bodies.
	s.inflight = make(chan struct{}, 2*cfg.MaxBatch+cfg.MaxQueue)
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
	attrs []slog.Attr
}

func (x *exchange) add(a ...slog.Attr) { x.attrs = append(x.attrs, a...) }

// route is one method and path.
type route struct {
	method, path string
	h            handlerFunc
}

func (s *Server) routes() http.Handler {
	metricsHandler := promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn), Registry: s.met.reg,
	})
	table := []route{
		{"GET", "/health", s.handleHealth},
		{"POST", "/draft", s.handleDraft},
		{"GET", "/metrics", func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
			metricsHandler.ServeHTTP(w, r)
			return nil
		}},
		{"GET", "/v1/info", s.handleInfo},
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
	// Everything else: a JSON 405 for a known path, a JSON 404 otherwise.
	mux.Handle("/", s.wrap("other", func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
		if methods, ok := allow[r.URL.Path]; ok {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			return reqErr(CodeMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(methods, ", ")))
		}
		return reqErr(CodeNotFound, fmt.Sprintf("no route %s %s; routes: %s", r.Method, r.URL.Path, routesText))
	}))
	return mux
}

// recorder remembers the status a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
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
		rw := &recorder{ResponseWriter: w}
		x := &exchange{}
		var ae *apiError
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
		}()
		if err := h(rw, r, x); err != nil {
			e := apiErrorFor(err)
			ae = &e
			if e.Status != StatusClientClosed && rw.status == 0 {
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
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", route),
		slog.Int("status", status), slog.Duration("dur", d), slog.String("remote", r.RemoteAddr),
	}, x.attrs...)
	if ae != nil {
		attrs = append(attrs, slog.String("code", ae.Code), slog.String("error", ae.Message))
	}
	s.log.LogAttrs(ctx, level, "request", attrs...)
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
