// The protocols of docs/protocol.md's batched and incremental drafting on the client side of the replay: "session"
// (one /draft per step, the context sent once and then only
// "accepted"+"bonus") and "batch" (the samples in flight drafted in lockstep,
// one POST /v1/drafts per round carrying a session item per sample), and the
// wire counters (bytes sent, server-side parse time from the Server-Timing
// header) that let a report compare them with "full" (POST /draft with the
// whole context). τ does not depend on the protocol: the drafts are the same.
// It is not the replay's definition (replay.go) nor the report (report.go).

package eval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Protocols of ReplayOptions.Protocol.
const (
	ProtocolFull    = "full"
	ProtocolSession = "session"
	ProtocolBatch   = "batch"
)

// Wire counts what a DraftdClient sent and what the server said it spent
// parsing (its Server-Timing "parse" entry).
type Wire struct {
	Requests  atomic.Int64 // HTTP requests
	BytesSent atomic.Int64 // request body bytes
	ParseNS   atomic.Int64 // Σ server-side parse time
	Parsed    atomic.Int64 // answers that carried a parse time
}

func (w *Wire) count(body int, h http.Header) {
	if w == nil {
		return
	}
	w.Requests.Add(1)
	w.BytesSent.Add(int64(body))
	if v, ok := strings.CutPrefix(h.Get("Server-Timing"), "parse;dur="); ok {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			w.ParseNS.Add(int64(ms * 1e6))
			w.Parsed.Add(1)
		}
	}
}

// SessionItem is one session request: Tokens non-nil establishes the
// session's context; otherwise Accepted and Bonus extend it.
type SessionItem struct {
	Session  string
	Tokens   []int
	Accepted int
	Bonus    int
	N        int
}

func (c *DraftdClient) appendItem(b []byte, it SessionItem, conf bool) []byte {
	b = append(b, `{"session":`...)
	b = strconv.AppendQuote(b, it.Session)
	if it.Tokens != nil {
		b = append(b, `,"tokens":`...)
		b = appendInts(b, it.Tokens)
	} else {
		b = fmt.Appendf(b, `,"accepted":%d,"bonus":%d`, it.Accepted, it.Bonus)
	}
	b = fmt.Appendf(b, `,"n":%d`, it.N)
	return append(c.appendBound(b, conf), '}')
}

// SessionDraft sends one session request to POST /draft (with the
// X-Draftd-Session header, for proxies).
func (c *DraftdClient) SessionDraft(ctx context.Context, it SessionItem) ([]int, error) {
	d, _, err := c.sessionDraft(ctx, it, false)
	return d, err
}

// sessionDraft is SessionDraft, with the confidences when conf.
func (c *DraftdClient) sessionDraft(ctx context.Context, it SessionItem, conf bool) ([]int, []float64, error) {
	body := c.appendItem(make([]byte, 0, 96+8*len(it.Tokens)), it, conf)
	var out draftAnswer
	if err := c.post(ctx, "/draft", body, it.Session, &out); err != nil {
		return nil, nil, err
	}
	return out.check(conf)
}

// BatchDraft sends items in one POST /v1/drafts; errs[i] is item i's
// failure (a *StatusError carrying its code), err the call's.
func (c *DraftdClient) BatchDraft(ctx context.Context, items []SessionItem) (drafts [][]int, errs []error, err error) {
	body := append(make([]byte, 0, 64*len(items)), `{"requests":[`...)
	for i, it := range items {
		if i > 0 {
			body = append(body, ',')
		}
		body = c.appendItem(body, it, false)
	}
	body = append(body, "]}"...)
	var out struct {
		Drafts []struct {
			Draft *[]int `json:"draft"`
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"drafts"`
	}
	if err := c.post(ctx, "/v1/drafts", body, "", &out); err != nil {
		return nil, nil, err
	}
	if len(out.Drafts) != len(items) {
		return nil, nil, fmt.Errorf("%w: %d results for %d items", ErrBadResponse, len(out.Drafts), len(items))
	}
	drafts, errs = make([][]int, len(items)), make([]error, len(items))
	for i, d := range out.Drafts {
		switch {
		case d.Error != nil:
			errs[i] = &StatusError{Status: 200, Code: d.Error.Code, Message: d.Error.Message}
		case d.Draft == nil:
			errs[i] = fmt.Errorf(`%w: no "draft" in result %d`, ErrBadResponse, i)
		default:
			drafts[i] = *d.Draft
		}
	}
	return drafts, errs, nil
}

// post sends body to path, counting it in c.Wire, and decodes a 200 answer.
func (c *DraftdClient) post(ctx context.Context, path string, body []byte, session string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Draftd-Session", session)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	c.Wire.count(len(body), resp.Header)
	return decodeAnswer(resp, out)
}

// unknownSession reports a 409 unknown_session (the client resends tokens).
func unknownSession(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == "unknown_session"
}

// sessionID is the session of sample i: the prefix and the sample's index
// (sample ids may hold bytes a session id may not, such as '/').
func sessionID(prefix string, i int) string { return prefix + strconv.Itoa(i) }

// sessionState is the client side of one sample's session.
type sessionState struct {
	id          string
	established bool // the server holds the context up to the last draft
	accepted    int
	bonus       int
}

// item is the next request of the sample at context full[:L].
func (st *sessionState) item(full []int, L, n int) SessionItem {
	if !st.established {
		return SessionItem{Session: st.id, Tokens: full[:L], N: n}
	}
	return SessionItem{Session: st.id, Accepted: st.accepted, Bonus: st.bonus, N: n}
}

// sessionStep is one step of the session protocol: a 409 is answered by
// resending the whole context at once (one more request, same step).
func sessionStep(ctx context.Context, c *DraftdClient, st *sessionState, full []int, L, n int, resends *int64, conf bool) ([]int, []float64, error) {
	d, cf, err := c.sessionDraft(ctx, st.item(full, L, n), conf)
	if unknownSession(err) && st.established {
		*resends++
		st.established = false
		d, cf, err = c.sessionDraft(ctx, st.item(full, L, n), conf)
	}
	st.established = err == nil
	return d, cf, err
}

// replayBatch replays the samples in lockstep rounds: up to Concurrency
// samples in flight, one POST /v1/drafts per round with an item per sample,
// then TargetLatency (the target verifying the whole batch); a finished
// sample's slot takes the next sample. Each item's latency is its round's.
func replayBatch(ctx context.Context, c *DraftdClient, samples []Sample, opt ReplayOptions, t *tally, progress func(int)) ([]*SampleResult, error) {
	type slot struct {
		i    int // sample index
		full []int
		p    int
		st   sessionState
		s    *tally
		sent bool // its first request was sent (the one carrying the prompt)
	}
	results := make([]*SampleResult, len(samples))
	next := 0
	var active []*slot
	refill := func() {
		for len(active) < max(opt.Concurrency, 1) && next < len(samples) {
			s := samples[next]
			full := append(append(make([]int, 0, len(s.Prompt)+len(s.Continuation)), s.Prompt...), s.Continuation...)
			active = append(active, &slot{i: next, full: full, st: sessionState{id: sessionID(opt.SessionPrefix, next)}, s: newTally(opt.N)})
			next++
		}
	}
	for refill(); len(active) > 0; refill() {
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		items := make([]SessionItem, len(active))
		for k, a := range active {
			items[k] = a.st.item(a.full, len(samples[a.i].Prompt)+a.p, opt.N)
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if opt.Timeout > 0 {
			rctx, cancel = context.WithTimeout(ctx, opt.Timeout)
		}
		now := opt.clock()
		t0 := now()
		drafts, errs, err := c.BatchDraft(rctx, items)
		if err == nil {
			for k, a := range active { // a 409: resend this sample's context alone
				if unknownSession(errs[k]) && a.st.established {
					t.resends++
					a.st.established = false
					drafts[k], errs[k] = c.SessionDraft(rctx, a.st.item(a.full, len(samples[a.i].Prompt)+a.p, opt.N))
				}
			}
		}
		lat := now().Sub(t0)
		cancel()
		if err != nil && ctx.Err() != nil {
			return results, ctx.Err()
		}
		kept := active[:0]
		for k, a := range active {
			var d []int
			e := err
			if e == nil {
				d, e = drafts[k], errs[k]
			}
			a.st.established = e == nil
			cont := samples[a.i].Continuation
			acc := scoreStep(a.s, d, e, lat, !a.sent, cont, a.p, opt.N, progress)
			a.sent = true
			if a.p+acc < len(cont) {
				a.st.accepted, a.st.bonus = acc, cont[a.p+acc]
			}
			a.p += acc + 1
			if a.p < len(cont) {
				kept = append(kept, a)
				continue
			}
			a.s.tokens = int64(len(cont))
			t.merge(a.s)
			results[a.i] = &SampleResult{ID: samples[a.i].ID, Tokens: int(a.s.tokens), Steps: int(a.s.steps),
				Tau: float64(a.s.tokens) / float64(a.s.steps), Failures: a.s.fails.n}
		}
		active = kept
		if opt.TargetLatency > 0 {
			select {
			case <-time.After(opt.TargetLatency):
			case <-ctx.Done():
			}
		}
	}
	return results, nil
}
