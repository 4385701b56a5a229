// Batched and incremental drafting (docs/protocol.md, batched and incremental drafting): POST /v1/drafts, the
// session forms of a draft item ("session" with "tokens", or with
// "accepted" and "bonus") in /draft and /v1/drafts, and
// DELETE /v1/sessions/ID. The items of a call are resolved against the
// session store (internal/session), drafted by the engine together, and
// the sessions that got a draft are updated. It does not map errors to
// statuses (errors.go) nor parse item bodies (request.go).

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/session"
)

// SessionHeader is the request header a proxy routes sessions on; when
// present it must equal the session of every item that names one.
const SessionHeader = "X-Draftd-Session"

func (s *Server) handleDrafts(w http.ResponseWriter, r *http.Request, x *exchange) error {
	b, err := s.backend()
	if err != nil {
		return err
	}
	var reqs []draftRequest
	var errs []error
	err = s.parseBody(w, r, x, "/v1/drafts", func(body []byte) (err error) {
		reqs, errs, err = parseBatch(body, b.lim, b.maxItems)
		return err
	})
	if err != nil {
		return err
	}
	if err := checkSessionHeader(r, reqs); err != nil {
		return err
	}
	x.add(slog.Int("items", len(reqs)))
	s.met.batchItems.Observe(float64(len(reqs)))
	ctx := r.Context() // ends when the client goes: the work stops with it
	res, errs, err := s.draftItems(ctx, b, reqs, errs)
	if err != nil {
		return err
	}
	size := 16
	for i := range reqs {
		size += 32 + len(reqs[i].ID) + 8*len(res[i].Draft)
	}
	out := append(make([]byte, 0, size), `{"drafts":[`...)
	for i := range reqs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"id":`...)
		if reqs[i].ID != nil {
			out = append(out, reqs[i].ID...)
		} else {
			out = append(out, "null"...)
		}
		if errs[i] != nil {
			e := apiErrorFor(errs[i])
			if e.Bug {
				s.met.panics.Inc()
				s.log.Error("batch item failed", "item", i, "err", errs[i])
			}
			out = fmt.Appendf(out, `,"error":{"code":%q,"message":%s}}`, e.Code, jsonString(e.Message))
			continue
		}
		s.served(res[i], nil)
		out = append(out, `,"draft":[`...)
		out = appendIDs(out, res[i].Draft)
		out = append(out, ']')
		out = appendBound(out, boundOf(&reqs[i], reqs[i].bound(s.cfg.MinConfidence, true), res[i]))
		out = append(out, '}')
	}
	out = append(out, "]}\n"...)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleDeleteSession(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	id := r.PathValue("id")
	if !session.ValidID(id) {
		return reqErr(CodeInvalidRequest, fmt.Sprintf("session id %q must be 1 to %d bytes of [A-Za-z0-9._:-]", clip(id), session.MaxIDLen))
	}
	if h, ok := r.Header[http.CanonicalHeaderKey(SessionHeader)]; ok {
		if len(h) != 1 {
			return reqErr(CodeInvalidRequest, fmt.Sprintf("header %s is given %d times; give it once", SessionHeader, len(h)))
		}
		if h[0] != id {
			return reqErr(CodeInvalidRequest, fmt.Sprintf("header %s %q differs from the session %q of the path", SessionHeader, clip(h[0]), id))
		}
	}
	s.sessions.Delete(id)
	if s.pre != nil {
		s.pre.drop(id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkSessionHeader: a request's X-Draftd-Session, when present, must
// equal the session of every item that names one (proxies route on it).
func checkSessionHeader(r *http.Request, reqs []draftRequest) error {
	h, ok := r.Header[http.CanonicalHeaderKey(SessionHeader)]
	if !ok {
		return nil
	}
	if len(h) != 1 {
		return reqErr(CodeInvalidRequest, fmt.Sprintf("header %s is given %d times; give it once", SessionHeader, len(h)))
	}
	for i := range reqs {
		if id := reqs[i].Session; id != "" && id != h[0] {
			return reqErr(CodeInvalidRequest, fmt.Sprintf("header %s %q differs from the body's session %q; they must be equal (proxies route on the header)", SessionHeader, clip(h[0]), id))
		}
	}
	return nil
}

// draftItems drafts reqs (errs[i] non-nil: item i already failed) in one
// Backend.DraftBatch call. Session items are resolved first: their sessions
// are locked (in sorted order, so that calls sharing sessions cannot
// deadlock), an "accepted"+"bonus" item gets its context from the store,
// and every session item that got a draft makes it the session's state. The
// returned err is the call's (then there are no results); reqs' Tokens and
// Fit are filled in for incremental items.
func (s *Server) draftItems(ctx context.Context, b *backend, reqs []draftRequest, errs []error) ([]engine.Result, []error, error) {
	var ids []string
	first := map[string]int{}
	for i := range reqs {
		id := reqs[i].Session
		if errs[i] != nil || id == "" {
			continue
		}
		if j, dup := first[id]; dup {
			errs[i] = reqErr(CodeInvalidRequest, fmt.Sprintf("session %q is also in item %d; a call may carry one request per session", id, j))
			continue
		}
		first[id] = i
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		unlock, err := s.sessions.Lock(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		defer unlock()
	}
	t0 := time.Now()
	res := make([]engine.Result, len(reqs))
	outcome := make([]string, len(reqs)) // pre-drafting's, for incremental items it applies to
	var partial []*branch                // by request index, for partial hits
	for i := range reqs {
		q := &reqs[i]
		if errs[i] != nil || q.Session == "" || first[q.Session] != i {
			continue
		}
		if !q.Incremental {
			if s.pre != nil {
				s.pre.drop(q.Session) // a new context: its branches guess another one
			}
			continue
		}
		full, err := s.sessions.Extend(q.Session, q.Accepted, q.Bonus, q.More...)
		var ae *session.AcceptedError
		switch {
		case errors.Is(err, session.ErrUnknown):
			errs[i] = reqErr(CodeUnknownSession, fmt.Sprintf("session %q is unknown here (never established, deleted, idle past --session-ttl, evicted by --max-sessions or --max-session-tokens, or established at another replica); resend its whole context as \"tokens\"", q.Session))
			s.met.sessionReqs.WithLabelValues("accepted", "unknown_session").Inc()
			if s.pre != nil {
				s.pre.drop(q.Session)
			}
			continue
		case errors.As(err, &ae):
			errs[i] = reqErr(CodeInvalidAccepted, ae.Error())
		case err != nil:
			errs[i] = err
		case !b.lim.ContextOK(len(full)):
			errs[i] = reqErr(CodeContextTooLong, fmt.Sprintf("session context of %d tokens (after accepted %d and the bonus) fills the model's maximum context of %d; at most %d tokens leave room to draft",
				len(full), q.Accepted, b.lim.MaxContext, b.lim.MaxContext-1))
		default:
			q.Tokens, q.Fit = full, b.lim.Fit(len(full), q.N)
			q.Recall = s.sessions.Recall(q.Session, q.Accepted)
		}
		if s.pre == nil {
			continue
		}
		if errs[i] != nil || !s.predraftable(b, q) || len(q.More) > 0 {
			s.pre.drop(q.Session) // (a branch guesses one bonus token, never more)
			continue
		}
		br, out := s.pre.take(q.Session, q.Accepted, q.Bonus, q.N, q.Strategy)
		switch {
		case br == nil:
		case br.fit != q.Fit:
			// Cannot happen (the branch was drafted for this context and n);
			// never answer from it if it does.
			s.log.Error("pre-drafted branch of another length; drafting on demand", "session", q.Session, "branch_fit", br.fit, "fit", q.Fit)
			br, out = nil, predraftMiss
		case out == predraftHit:
			res[i] = truncate(br.res, q.bound(s.cfg.MinConfidence, true), q.signal(s.cfg.ConfidenceSignal))
			s.pre.since(out, t0)
		default:
			if partial == nil {
				partial = make([]*branch, len(reqs))
			}
			partial[i] = br
		}
		outcome[i] = out
	}
	var items []BatchItem
	var slot []int // request index of each item
	for i := range reqs {
		q := &reqs[i]
		if errs[i] != nil || outcome[i] == predraftHit || partial != nil && partial[i] != nil {
			continue
		}
		if q.Strategy != "" && !slices.Contains(b.strs, q.Strategy) {
			errs[i] = reqErr(CodeInvalidStrategy, (&draft.UnknownError{Name: q.Strategy}).Error())
			continue
		}
		items = append(items, BatchItem{Tokens: q.Tokens, N: q.Fit, Strategy: q.Strategy,
			Alts:          s.pre != nil && q.Session != "" && s.predraftable(b, q) && s.pre.wanted(),
			MinConfidence: q.bound(s.cfg.MinConfidence, true), Confidences: q.Confidences, ConfidenceSignal: q.signal(s.cfg.ConfidenceSignal), Recall: q.Recall})
		slot = append(slot, i)
	}
	if len(items) > 0 {
		r, e, err := b.d.DraftBatch(ctx, items)
		if err != nil {
			return nil, nil, err
		}
		for k, i := range slot {
			res[i], errs[i] = r[k], e[k]
			if outcome[i] != "" {
				s.pre.since(outcome[i], t0)
			}
		}
	}
	for i, br := range partial {
		if br == nil {
			continue
		}
		select {
		case <-br.done:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		if br.err == nil && len(br.res.Draft) == reqs[i].Fit {
			res[i] = truncate(br.res, reqs[i].bound(s.cfg.MinConfidence, true), reqs[i].signal(s.cfg.ConfidenceSignal))
			s.pre.since(predraftPartial, t0)
			continue
		}
		// The promoted branch failed (the engine closing, or evicted just
		// before the promotion): draft on demand.
		outcome[i] = predraftMiss
		q := &reqs[i]
		r, e, err := b.d.DraftBatch(ctx, []BatchItem{{Tokens: q.Tokens, N: q.Fit, Strategy: q.Strategy, Alts: true,
			MinConfidence: q.bound(s.cfg.MinConfidence, true), Confidences: q.Confidences, ConfidenceSignal: q.signal(s.cfg.ConfidenceSignal), Recall: q.Recall}})
		if err == nil {
			err = e[0]
		}
		if err == nil {
			res[i] = r[0]
		}
		errs[i] = err
		s.pre.since(predraftMiss, t0)
	}
	for i := range reqs {
		q := &reqs[i]
		switch {
		case errs[i] != nil:
		case q.Incremental: // the accepted draft tokens and the bonus: the target's output
			b.traffic.sawAccepted(q.Tokens[len(q.Tokens)-q.Accepted-1:])
		default:
			b.traffic.sawContext(q.Tokens)
		}
		if q.Session == "" || first[q.Session] != i {
			continue
		}
		if outcome[i] != "" {
			s.met.predraftReqs.WithLabelValues(outcome[i]).Inc()
		}
		form := "tokens"
		if q.Incremental {
			form = "accepted"
		}
		switch {
		case errs[i] == nil:
			if s.sessions.Put(q.Session, q.Tokens, res[i].Draft) && s.pre != nil && s.predraftable(b, q) && len(res[i].Alts) == len(res[i].Draft) {
				s.pre.launch(b, q.Session, q.Tokens, res[i].Draft, res[i].Alts, q.N, q.Strategy)
			}
			s.met.sessionReqs.WithLabelValues(form, "ok").Inc()
		case !errors.As(errs[i], new(*RequestError)) || errs[i].(*RequestError).Code != CodeUnknownSession:
			s.met.sessionReqs.WithLabelValues(form, "error").Inc()
		}
	}
	return res, errs, nil
}

// predraftable reports whether q's drafts can be pre-drafted: the model
// strategy (by name, or as the backend's default), the one whose runner-ups
// the engine reports.
func (s *Server) predraftable(b *backend, q *draftRequest) bool {
	return q.Strategy == draft.NameModel || q.Strategy == "" && b.strategy == draft.NameModel
}

// parseBatch decodes the envelope {"requests":[ITEM, …]} of POST /v1/drafts
// and each item as a /draft body (with "id"). A malformed envelope is the
// call's error; errs[i] is item i's.
func parseBatch(body []byte, lim limits, maxItems int) ([]draftRequest, []error, error) {
	i := skipSpace(body, 0)
	if i == len(body) {
		return nil, nil, reqErr(CodeInvalidJSON, `request body is empty; want {"requests":[{"tokens":[1,2,3],"n":16}, …]}`)
	}
	if !json.Valid(body) {
		return nil, nil, syntaxError(body)
	}
	if body[i] != '{' {
		return nil, nil, reqErr(CodeInvalidJSON, "request body must be a JSON object, got "+kindOf(body[i:]))
	}
	var list span
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		kEnd := skipString(body, i)
		var key string
		json.Unmarshal(body[i:kEnd], &key) // valid JSON: cannot fail
		i = skipSpace(body, skipSpace(body, kEnd)+1)
		vEnd := skipValue(body, i)
		if key == "requests" {
			list = span{i, vEnd}
		}
		i = skipSpace(body, vEnd)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	if !list.present(body) {
		return nil, nil, reqErr(CodeInvalidRequest, `missing "requests": want {"requests":[ITEM, …]}, each ITEM a /draft body with an optional "id"`)
	}
	raw := body[list.start:list.end]
	if raw[0] != '[' {
		return nil, nil, reqErr(CodeInvalidRequest, `"requests" must be an array of draft requests, got `+kindOf(raw))
	}
	count := 0
	for j, el := nextElem(raw, 0); el != nil; j, el = nextElem(raw, j) {
		count++
	}
	switch {
	case count == 0:
		return nil, nil, reqErr(CodeInvalidRequest, `"requests" is empty; give at least one draft request`)
	case count > maxItems:
		return nil, nil, reqErr(CodeTooManyItems, fmt.Sprintf(`"requests" has %d items, more than the limit of %d (--max-batch-items)`, count, maxItems))
	}
	reqs, errs := make([]draftRequest, count), make([]error, count)
	k := 0
	for j, el := nextElem(raw, 0); el != nil; j, el = nextElem(raw, j) {
		if el[0] != '{' {
			errs[k] = reqErr(CodeInvalidRequest, fmt.Sprintf("requests[%d] must be an object (a /draft body), got %s", k, kindOf(el)))
		} else {
			reqs[k], errs[k] = parseDraftRequest(el, lim)
		}
		k++
	}
	return reqs, errs, nil
}
