// The handlers of GET /health, POST /draft and GET /v1/info. They read the
// request and call the engine; they return failures to the middleware
// (server.go) instead of choosing statuses, which errors.go does.

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
)

var (
	healthOK      = []byte(`{"status":"ok"}` + "\n")
	healthLoading = []byte(`{"status":"loading"}` + "\n")
	healthClosing = []byte(`{"status":"shutting_down"}` + "\n")
)

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	switch {
	case s.closing.Load():
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, healthClosing)
	case s.ready.Load() == nil:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, healthLoading)
	default:
		writeJSON(w, http.StatusOK, healthOK)
	}
	return nil
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	b, err := s.backend()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.info)
	return nil
}

// backend returns the engine, or why there is none to use.
func (s *Server) backend() (*backend, error) {
	if s.closing.Load() {
		return nil, errShuttingDown
	}
	b := s.ready.Load()
	if b == nil {
		return nil, errLoading
	}
	return b, nil
}

// bufPool holds request body buffers; ones grown past maxPooled are dropped.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooled = 1 << 20

func (s *Server) handleDraft(w http.ResponseWriter, r *http.Request, x *exchange) error {
	b, err := s.backend()
	if err != nil {
		return err
	}
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		return engine.ErrQueueFull
	}

	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return &http.MaxBytesError{Limit: limit}
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooled {
			bufPool.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		return readError(err)
	}
	req, err := parseDraftRequest(buf.Bytes(), b.lim)
	if err != nil {
		return err
	}
	x.add(slog.Int("context", len(req.Tokens)), slog.Int("n", req.N))

	var res engine.Result
	if req.Strategy == "" {
		res, err = b.d.Draft(r.Context(), req.Tokens, req.Fit)
	} else if st, ok := b.strs[req.Strategy]; ok {
		res, err = b.d.DraftWith(r.Context(), req.Tokens, req.Fit, st)
	} else {
		err = reqErr(CodeInvalidStrategy, (&draft.UnknownError{Name: req.Strategy}).Error())
	}
	if err != nil {
		return err
	}
	s.met.sources(res)
	x.add(slog.Int("draft", len(res.Draft)), slog.Int("prefill", res.PrefillTokens), slog.Int("cached", res.CachedTokens))
	s.met.draftTokens.Add(float64(len(res.Draft)))
	s.met.reqPrefill.Observe(float64(res.PrefillTokens))

	buf.Reset()
	out := appendDraft(buf.AvailableBuffer(), res.Draft)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readError classifies a failure to read the body: over the limit (kept, for
// apiErrorFor), or a client that went away mid-body.
func readError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	return reqErr(CodeInvalidJSON, "reading the request body: "+err.Error())
}

// jsonString encodes s as a JSON string.
func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
