// The handlers of GET /health, POST /draft and GET /v1/info. They read the
// request and call the engine; they return failures to the middleware
// (server.go) instead of choosing statuses, which errors.go does.

package server

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

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

func (s *Server) handleDraft(w http.ResponseWriter, r *http.Request, x *exchange) error {
	b, err := s.backend()
	if err != nil {
		return err
	}
	var req draftRequest
	err = s.parseBody(w, r, x, "/draft", func(body []byte) (err error) {
		req, err = parseDraftRequest(body, b.lim)
		return err
	})
	if err != nil {
		return err
	}
	if err := checkSessionHeader(r, []draftRequest{req}); err != nil {
		return err
	}
	ctx := r.Context() // ends when the client goes: the work stops with it
	var res engine.Result
	bound := req.bound(s.cfg.MinConfidence, false)
	switch {
	case req.Session != "":
		reqs, errs := []draftRequest{req}, []error{nil}
		var all []engine.Result
		if all, errs, err = s.draftItems(ctx, b, reqs, errs); err == nil {
			res, err = all[0], errs[0]
		}
		req = reqs[0]
	case req.Strategy != "" && !slices.Contains(b.strs, req.Strategy):
		err = reqErr(CodeInvalidStrategy, (&draft.UnknownError{Name: req.Strategy}).Error())
	case bound > 0 || req.Confidences:
		var all []engine.Result
		var errs []error
		all, errs, err = b.d.DraftBatch(ctx, []BatchItem{{Tokens: req.Tokens, N: req.Fit, Strategy: req.Strategy,
			MinConfidence: bound, Confidences: req.Confidences, ConfidenceSignal: req.signal(s.cfg.ConfidenceSignal)}})
		if err == nil {
			res, err = all[0], errs[0]
		}
	case req.Strategy == "":
		res, err = b.d.Draft(ctx, req.Tokens, req.Fit)
	default:
		res, err = b.d.DraftStrategy(ctx, req.Tokens, req.Fit, req.Strategy)
	}
	x.add(slog.Int("context", len(req.Tokens)), slog.Int("n", req.N))
	if req.Session != "" {
		x.add(slog.String("session", req.Session))
	}
	if err != nil {
		return err
	}
	if req.Session == "" { // a session's tokens were counted by draftItems
		b.traffic.sawContext(req.Tokens)
	}
	s.served(res, x)
	writeJSON(w, http.StatusOK, appendDraft(make([]byte, 0, 48+20*len(res.Draft)), res.Draft, boundOf(&req, bound, res)))
	return nil
}

// served counts one draft in the metrics and the log line.
func (s *Server) served(res engine.Result, x *exchange) {
	s.met.sources(res)
	if x != nil {
		x.add(slog.Int("draft", len(res.Draft)), slog.Int("prefill", res.PrefillTokens), slog.Int("cached", res.CachedTokens))
	}
	s.met.draftTokens.Add(float64(len(res.Draft)))
	s.met.reqPrefill.Observe(float64(res.PrefillTokens))
}

// parseBody reads r's body and hands it to parse, timing the parse (the
// Server-Timing header of the answer and the route's parse histogram). The
// body is read and parsed before anything is asked of the engine: a slow
// upload holds its bytes (bounded by MaxInflightBodyBytes) and its own
// deadline, never a place in the queue. The body is released when parse
// returns: parse must not keep it.
//
// A body that cannot be read whole (too slow, too large, cut off) is
// answered at once and the connection closed after the answer (the
// middleware's dropBody): the rest of it is never awaited.
func (s *Server) parseBody(w http.ResponseWriter, r *http.Request, x *exchange, route string, parse func([]byte) error) error {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	body, held, err := s.readBody(w, r)
	defer s.releaseBody(held)
	if err != nil {
		return err
	}
	x.bodyRead = true
	// No deadline after the body: net/http's read of the idle connection
	// would hit it while the draft waits for the engine, and cancel it.
	rc.SetReadDeadline(time.Time{})
	t0 := time.Now()
	err = parse(body)
	d := time.Since(t0)
	s.met.parse.WithLabelValues(route).Observe(d.Seconds())
	w.Header().Set("Server-Timing", "parse;dur="+strconv.FormatFloat(float64(d.Nanoseconds())/1e6, 'f', 3, 64))
	return err
}

// errBodyBudget: the bodies being read already hold MaxInflightBodyBytes.
var errBodyBudget = errors.New("request bodies in flight are at their byte limit")

// acquireBody reserves n bytes of the in-flight body budget.
func (s *Server) acquireBody(n int64) bool {
	if s.bodyBytes.Add(n) > s.cfg.MaxInflightBodyBytes {
		s.bodyBytes.Add(-n)
		return false
	}
	return true
}

func (s *Server) releaseBody(n int64) { s.bodyBytes.Add(-n) }

// readBody reads the body of r, at most MaxBodyBytes, into one buffer whose
// capacity is reserved in the in-flight budget; held is what to release.
// With a Content-Length the buffer is exactly that long; a chunked body
// grows it (and the reservation) as it arrives.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, held int64, err error) {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, 0, &http.MaxBytesError{Limit: limit}
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n >= 0 {
		if !s.acquireBody(n) {
			return nil, 0, errBodyBudget
		}
		body = make([]byte, n)
		if _, err := io.ReadFull(rd, body); err != nil {
			return nil, n, readError(err)
		}
		return body, n, nil
	}
	const first = 4 << 10
	if !s.acquireBody(first) {
		return nil, 0, errBodyBudget
	}
	held = first
	body = make([]byte, 0, first)
	for {
		if len(body) == cap(body) {
			grow := min(int64(cap(body)), limit+1-int64(cap(body)))
			if grow <= 0 {
				grow = 1 // at the limit: one more byte makes MaxBytesReader fail
			}
			if !s.acquireBody(grow) {
				return nil, held, errBodyBudget
			}
			held += grow
			body = slices.Grow(body, int(grow))
		}
		n, err := rd.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			return body, held, nil
		}
		if err != nil {
			return nil, held, readError(err)
		}
	}
}

// readError classifies a failure to read the body: over the limit (kept, for
// apiErrorFor), too slow, or a client that went away mid-body.
func readError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errBodyTimeout
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return reqErr(CodeInvalidJSON, "the request body ended before its Content-Length")
	}
	return reqErr(CodeInvalidJSON, "reading the request body: "+clip(err.Error()))
}

// errBodyTimeout: the body did not arrive within BodyTimeout.
var errBodyTimeout = errors.New("the request body did not arrive in time")

// jsonString encodes s as a JSON string.
func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// clipLen is how much of a client's input an error message or log line
// quotes.
const clipLen = 64

// clip shortens s to clipLen bytes (on a UTF-8 boundary) plus "…" and its
// full length, so that no error echoes unbounded input.
func clip(s string) string {
	if len(s) <= clipLen {
		return s
	}
	i := clipLen
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "… (" + itoa(int64(len(s))) + " bytes)"
}
