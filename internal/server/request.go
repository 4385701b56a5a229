// The body of POST /draft (docs/protocol.md): decoding, validation against the
// model's limits, and the encoding of the answer. It reads bytes only; it
// does not read the HTTP request (handlers.go) nor run the model.
//
// Decisions the contract leaves open:
//   - A token id or n must be a JSON integer literal: 1.5, 1.0, 1e3 and "3"
//     are refused (1.0 and 1e3 are integral numbers, but no tokenizer writes
//     them, and a client that does has a bug worth seeing).
//   - `tokens` and its aliases may be given together only with equal values;
//     the same holds for `n` and `num_draft_tokens`. A null field counts as
//     absent.
//   - Unknown fields are ignored, so that clients written for other servers
//     (temperature, stream, ...) work.

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/session"
)

// tokenFields are the names of the context field, canonical first.
var tokenFields = [...]string{"tokens", "input_ids", "token_ids", "prompt_token_ids"}

// nFields are the names of the draft length field, canonical first.
var nFields = [...]string{"n", "num_draft_tokens"}

// limits are what a request is validated against: the engine's rules (the
// one definition of them) and the default n.
type limits struct {
	engine.Rules
	DraftLen int // n when absent
}

// draftRequest is a validated POST /draft body.
type draftRequest struct {
	Tokens []int // (contextLen) ids in [0, vocab), 0 < contextLen < MaxContext
	N      int   // asked draft length, 1 ≤ N ≤ MaxDraftLen
	Fit    int   // draft length that fits before the maximum context: min(N, MaxContext−contextLen)
	// Strategy names the drafting strategy ("": the field was absent or
	// null, the server's default; an empty string given is refused); the
	// handler checks the name.
	Strategy string

	// Batched and incremental drafting (docs/protocol.md). ID is the item's "id" as written in the body (a JSON
	// string, echoed as is — bytes that are not UTF-8 as U+FFFD; nil when
	// absent). Session is the session id
	// ("": none); with Incremental the request is "accepted"+"bonus"
	// instead of "tokens" (Tokens and Fit are then set by the handler from
	// the session's state).
	ID          []byte
	Session     string
	Incremental bool
	Accepted    int   // 0 ≤ Accepted; its upper bound is the session's last draft
	Bonus       int   // an id in [0, vocab)
	More        []int // ids in [0, vocab) after Bonus ("bonus" given as an array of more than one id); nil otherwise
	// Recall is set by the handler for an incremental request: the
	// session's last draft after its accepted tokens (BatchItem.Recall).
	Recall []int

	// Confidence-bounded drafts (docs/protocol.md): "min_confidence" (in
	// [0, 1]; HasMinConfidence when given) and "confidences" (true: report
	// each token's confidence).
	MinConfidence    float32
	HasMinConfidence bool
	Confidences      bool
	// Signal is "confidence_signal" (one of engine.ConfidenceSignals; "":
	// not given, the serve default).
	Signal string
}

// signal is the confidence signal of req: its own, else def (the serve
// default).
func (req *draftRequest) signal(def string) string {
	if req.Signal != "" {
		return req.Signal
	}
	return def
}

// bound is the confidence bound in force for req: its own
// "min_confidence", else def — the serve default, which applies to session
// requests and /v1/drafts items only (a plain POST /draft without the
// field returns n tokens, whatever the default).
func (req *draftRequest) bound(def float32, batch bool) float32 {
	switch {
	case req.HasMinConfidence:
		return req.MinConfidence
	case batch || req.Session != "":
		return def
	}
	return 0
}

// span is where a field's value lies in the body; end 0: absent.
type span struct{ start, end int }

func (sp span) present(body []byte) bool {
	return sp.end > 0 && string(body[sp.start:sp.end]) != "null"
}

// parseDraftRequest decodes and validates body. Errors are *RequestError.
//
// It reads the body in place: json.Valid checks the syntax, then a walk of
// the top-level object records where each known field's value lies (the
// last of duplicates wins, as in encoding/json) and skips the others, and
// the ids are parsed from the body bytes into one slice of exactly their
// number (at most the model's maximum context). Nothing else is copied, so
// a request costs its body plus its ids.
func parseDraftRequest(body []byte, lim limits) (draftRequest, error) {
	var req draftRequest
	i := skipSpace(body, 0)
	if i == len(body) {
		return req, reqErr(CodeInvalidJSON, `request body is empty; want a JSON object such as {"tokens":[1,2,3],"n":16}`)
	}
	if !json.Valid(body) {
		return req, syntaxError(body)
	}
	if body[i] != '{' {
		return req, reqErr(CodeInvalidJSON, "request body must be a JSON object, got "+kindOf(body[i:]))
	}
	var toks [len(tokenFields)]span
	var ns [len(nFields)]span
	var strat, id, sess, acc, bonus span // "strategy", "id", "session", "accepted", "bonus"
	var minConf, confs, signal span      // "min_confidence", "confidences", "confidence_signal"
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		kEnd := skipString(body, i)
		key := body[i+1 : kEnd-1]
		i = skipSpace(body, skipSpace(body, kEnd)+1) // past the ':'
		vEnd := skipValue(body, i)
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			json.Unmarshal(body[kEnd-len(key)-2:kEnd], &k) // valid JSON: cannot fail
			key = []byte(k)
		}
		for f, name := range tokenFields {
			if string(key) == name {
				toks[f] = span{i, vEnd}
			}
		}
		for f, name := range nFields {
			if string(key) == name {
				ns[f] = span{i, vEnd}
			}
		}
		switch string(key) {
		case "strategy":
			strat = span{i, vEnd}
		case "id":
			id = span{i, vEnd}
		case "session":
			sess = span{i, vEnd}
		case "accepted":
			acc = span{i, vEnd}
		case "bonus":
			bonus = span{i, vEnd}
		case "min_confidence":
			minConf = span{i, vEnd}
		case "confidences":
			confs = span{i, vEnd}
		case "confidence_signal":
			signal = span{i, vEnd}
		}
		i = skipSpace(body, vEnd)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}

	if id.present(body) {
		if body[id.start] != '"' {
			return req, reqErr(CodeInvalidRequest, `"id" must be a string, got `+kindOf(body[id.start:id.end]))
		}
		req.ID = bytes.Clone(body[id.start:id.end]) // the body is released before the answer
		if !utf8.Valid(req.ID) {
			// Echoed as encoding/json reads it: each byte that is not
			// UTF-8 becomes U+FFFD, so that the answer stays UTF-8.
			var v string
			json.Unmarshal(req.ID, &v) // valid JSON: cannot fail
			req.ID = jsonString(v)
		}
	}
	if err := parseConfidence(&req, body, minConf, confs, signal); err != nil {
		return req, err
	}
	if sess.present(body) || acc.present(body) || bonus.present(body) {
		if err := parseSession(&req, body, sess, acc, bonus, toks[:], lim); err != nil || req.Incremental {
			if err != nil {
				return req, err
			}
			return req, parseRest(&req, body, ns[:], strat, lim)
		}
	}

	// The context: every present alias must agree. The ids are checked in
	// place and copied once, into a slice of exactly their number, only when
	// the context is valid (an over-long one costs no allocation).
	first, count := -1, 0
	for f, sp := range toks {
		if !sp.present(body) {
			continue
		}
		name := tokenFields[f]
		c, err := checkIDs(name, body[sp.start:sp.end], lim)
		if err != nil {
			return req, err
		}
		if first < 0 {
			first, count = f, c
		} else if !sameIDs(body[toks[first].start:toks[first].end], body[sp.start:sp.end]) {
			return req, reqErr(CodeInvalidRequest, fmt.Sprintf("%q and %q are both given, with different values; give one", tokenFields[first], name))
		}
	}
	switch {
	case first < 0:
		return req, reqErr(CodeMissingTokens, `missing "tokens": the context as an array of token ids is required (aliases: input_ids, token_ids, prompt_token_ids)`)
	case count == 0:
		return req, reqErr(CodeMissingTokens, fmt.Sprintf("%q is empty; the context needs at least one token id", tokenFields[first]))
	case !lim.ContextOK(count):
		return req, reqErr(CodeContextTooLong, fmt.Sprintf("context of %d tokens fills the model's maximum context of %d; at most %d tokens leave room to draft",
			count, lim.MaxContext, lim.MaxContext-1))
	}
	req.Tokens = make([]int, 0, count)
	raw := body[toks[first].start:toks[first].end]
	for i, lit := nextElem(raw, 0); lit != nil; i, lit = nextElem(raw, i) {
		v, _, _ := parseInt(lit)
		req.Tokens = append(req.Tokens, int(v))
	}

	if err := parseRest(&req, body, ns[:], strat, lim); err != nil {
		return req, err
	}
	req.Fit = lim.Fit(len(req.Tokens), req.N)
	return req, nil
}

// parseRest reads the draft length and the strategy.
func parseRest(req *draftRequest, body []byte, ns []span, strat span, lim limits) error {
	req.N = lim.DraftLen
	first := -1
	for f, sp := range ns {
		if !sp.present(body) {
			continue
		}
		n, err := parseN(nFields[f], body[sp.start:sp.end], lim)
		if err != nil {
			return err
		}
		if first < 0 {
			first, req.N = f, n
		} else if n != req.N {
			return reqErr(CodeInvalidRequest, fmt.Sprintf("%q and %q are both given, with different values; give one", nFields[first], nFields[f]))
		}
	}
	if strat.present(body) {
		if err := json.Unmarshal(body[strat.start:strat.end], &req.Strategy); err != nil {
			return reqErr(CodeInvalidStrategy, `"strategy" must be a string naming a drafting strategy, got `+kindOf(body[strat.start:strat.end]))
		}
		if req.Strategy == "" {
			return reqErr(CodeInvalidStrategy, `"strategy" is an empty string, which names no drafting strategy; name one, or leave the field out for the server's default`)
		}
	}
	return nil
}

// parseConfidence reads "min_confidence" (a number in [0, 1]),
// "confidences" (a boolean) and "confidence_signal" (one of
// engine.ConfidenceSignals).
func parseConfidence(req *draftRequest, body []byte, minConf, confs, signal span) error {
	if minConf.present(body) {
		b := body[minConf.start:minConf.end]
		v, err := strconv.ParseFloat(string(b), 32)
		if !isNumByte(b[0]) || err != nil || !(v >= 0 && v <= engine.MaxConfidence) {
			got := kindOf(b)
			if isNumByte(b[0]) {
				got = clip(string(b))
			}
			return reqErr(CodeInvalidRequest, fmt.Sprintf(`"min_confidence" must be a number in [0, 1] (0: no bound), got %s`, got))
		}
		req.MinConfidence, req.HasMinConfidence = float32(v), true
	}
	if confs.present(body) {
		switch string(body[confs.start:confs.end]) {
		case "true":
			req.Confidences = true
		case "false":
		default:
			return reqErr(CodeInvalidRequest, `"confidences" must be true or false, got `+kindOf(body[confs.start:confs.end]))
		}
	}
	if signal.present(body) {
		raw := body[signal.start:signal.end]
		var v string
		if raw[0] != '"' || json.Unmarshal(raw, &v) != nil || !slices.Contains(engine.ConfidenceSignals, v) {
			return reqErr(CodeInvalidRequest, fmt.Sprintf(`"confidence_signal" must be one of %q, got %s`, engine.ConfidenceSignals, kindOfID(raw)))
		}
		req.Signal = v
	}
	return nil
}

// parseSession reads "session", "accepted" and "bonus" (docs/protocol.md, batched and incremental drafting): a
// session item has exactly one of a context (tokens or an alias) and the
// pair accepted+bonus.
func parseSession(req *draftRequest, body []byte, sess, acc, bonus span, toks []span, lim limits) error {
	if !sess.present(body) {
		return reqErr(CodeInvalidRequest, `"accepted" and "bonus" need a "session"`)
	}
	raw := body[sess.start:sess.end]
	if raw[0] != '"' || json.Unmarshal(raw, &req.Session) != nil || !session.ValidID(req.Session) {
		req.Session = ""
		return reqErr(CodeInvalidRequest, fmt.Sprintf(`"session" must be a string of 1 to %d bytes of [A-Za-z0-9._:-], got %s`, session.MaxIDLen, kindOfID(raw)))
	}
	hasTokens := false
	for _, sp := range toks {
		hasTokens = hasTokens || sp.present(body)
	}
	hasAcc, hasBonus := acc.present(body), bonus.present(body)
	switch {
	case hasTokens && (hasAcc || hasBonus):
		return reqErr(CodeInvalidRequest, `a session request gives either "tokens" or "accepted" and "bonus", not both`)
	case !hasTokens && !hasAcc && !hasBonus:
		return reqErr(CodeInvalidRequest, `a session request needs "tokens" (to establish its context) or "accepted" and "bonus" (to extend it)`)
	case hasTokens:
		return nil
	case !hasAcc || !hasBonus:
		return reqErr(CodeInvalidRequest, `"accepted" and "bonus" go together; give both`)
	}
	b := body[acc.start:acc.end]
	v, ok, why := int64(0), false, "not a number"
	if isNumByte(b[0]) {
		v, ok, why = parseInt(b)
	}
	if why != "" || !ok || v < 0 {
		return reqErr(CodeInvalidAccepted, fmt.Sprintf(`"accepted" must be an integer ≥ 0 (at most the length of the session's last draft), got %s`, clip(string(b))))
	}
	req.Accepted = int(min(v, 1<<31))
	b = body[bonus.start:bonus.end]
	if b[0] == '[' {
		// Several tokens: the target's bonus and the tokens it produced in
		// steps the client drafted nothing for.
		count, err := checkIDs("bonus", b, lim)
		if err != nil {
			return err
		}
		if count == 0 {
			return reqErr(CodeInvalidToken, `"bonus" is an empty array; give the token the target produced (an integer, or an array of at least one)`)
		}
		ids := make([]int, 0, count)
		for i, lit := nextElem(b, 0); lit != nil; i, lit = nextElem(b, i) {
			v, _, _ := parseInt(lit)
			ids = append(ids, int(v))
		}
		req.Bonus, req.Incremental = ids[0], true
		if count > 1 {
			req.More = ids[1:]
		}
		return nil
	}
	if !isNumByte(b[0]) {
		return reqErr(CodeInvalidToken, fmt.Sprintf(`"bonus" is %s; token ids must be integers (an integer, or an array of them)`, kindOf(b)))
	}
	v, ok, why = parseInt(b)
	if why != "" {
		return reqErr(CodeInvalidToken, fmt.Sprintf(`"bonus" = %s is not an integer; token ids must be integers (%s)`, clip(string(b)), why))
	}
	if !ok || !lim.TokenOK(v) {
		return reqErr(CodeTokenOutOfRange, fmt.Sprintf(`"bonus" = %s is outside the vocabulary [0, %d)`, clip(string(b)), lim.Vocab))
	}
	req.Bonus, req.Incremental = int(v), true
	return nil
}

// kindOfID describes a bad session id for an error message.
func kindOfID(raw []byte) string {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return kindOf(raw)
	}
	if s == "" {
		return "an empty string"
	}
	return strconv.Quote(clip(s))
}

// syntaxError describes the first syntax error of body (only on this error
// path: the decoder's message and offset).
func syntaxError(body []byte) error {
	var v struct{}
	err := json.Unmarshal(body, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return reqErr(CodeInvalidJSON, fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se))
	}
	return reqErr(CodeInvalidJSON, "invalid JSON")
}

// checkIDs checks the array of token ids b (a valid JSON value) of field
// name and returns its length.
func checkIDs(name string, b []byte, lim limits) (int, error) {
	if b[0] != '[' {
		return 0, reqErr(CodeInvalidRequest, fmt.Sprintf("%q must be an array of integer token ids, got %s", name, kindOf(b)))
	}
	count := 0
	for i, lit := nextElem(b, 0); lit != nil; i, lit = nextElem(b, i) {
		if !isNumByte(lit[0]) {
			return 0, reqErr(CodeInvalidToken, fmt.Sprintf("%s[%d] is %s; token ids must be integers", name, count, kindOf(lit)))
		}
		v, ok, why := parseInt(lit)
		if why != "" {
			return 0, reqErr(CodeInvalidToken, fmt.Sprintf("%s[%d] = %s is not an integer; token ids must be integers (%s)", name, count, clip(string(lit)), why))
		}
		if !ok || !lim.TokenOK(v) {
			return 0, reqErr(CodeTokenOutOfRange, fmt.Sprintf("%s[%d] = %s is outside the vocabulary [0, %d)", name, count, clip(string(lit)), lim.Vocab))
		}
		count++
	}
	return count, nil
}

// sameIDs reports whether two checked id arrays hold the same ids.
func sameIDs(a, b []byte) bool {
	i, x := nextElem(a, 0)
	j, y := nextElem(b, 0)
	for x != nil && y != nil {
		u, _, _ := parseInt(x)
		v, _, _ := parseInt(y)
		if u != v {
			return false
		}
		i, x = nextElem(a, i)
		j, y = nextElem(b, j)
	}
	return x == nil && y == nil
}

// nextElem returns the element of the valid JSON array b that starts at or
// after i (0: the first) — a number's literal, any other value whole — and
// where to look for the next one; nil at the end.
func nextElem(b []byte, i int) (next int, lit []byte) {
	if i == 0 {
		i = 1 // past the '['
	}
	i = skipSpace(b, i)
	if b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if b[i] == ']' {
		return i, nil
	}
	j := i
	if isNumByte(b[i]) {
		for j < len(b) && isNumByte(b[j]) {
			j++
		}
	} else {
		j = skipValue(b, i)
	}
	return j, b[i:j]
}

// skipString returns the index just past the JSON string that starts at
// b[i] (valid JSON).
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the JSON value that starts at b[i]
// (valid JSON).
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) && !isDelim(b[i]) {
		i++
	}
	return i
}

func isDelim(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// parseN reads the draft length raw of field name.
func parseN(name string, b []byte, lim limits) (int, error) {
	if len(b) == 0 || !isNumByte(b[0]) {
		return 0, reqErr(CodeInvalidN, fmt.Sprintf("%q must be an integer in [1, %d], got %s", name, lim.MaxDraftLen, kindOf(b)))
	}
	v, ok, err := parseInt(b)
	if err != "" {
		return 0, reqErr(CodeInvalidN, fmt.Sprintf("%q = %s is not an integer (%s)", name, clip(string(b)), err))
	}
	if !ok || !lim.NOK(v) {
		return 0, reqErr(CodeInvalidN, fmt.Sprintf("%q = %s is out of range [1, %d] (--max-draft-len)", name, clip(string(b)), lim.MaxDraftLen))
	}
	return int(v), nil
}

// parseInt reads a JSON number literal. why is non-empty when the literal is
// not an integer literal; ok is false when it is one but does not fit in
// int64 (it is then surely out of any range).
func parseInt(b []byte) (v int64, ok bool, why string) {
	if bytes.ContainsAny(b, ".eE") {
		return 0, false, "no fraction or exponent allowed"
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return 0, false, ""
		}
		return 0, false, "malformed number"
	}
	return v, true, ""
}

func isNumByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// kindOf names the JSON value that b starts with, with a short quote of
// strings.
func kindOf(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch c := b[0]; {
	case c == '"':
		var s string
		if end := skipString(b, 0); end <= 2*20+2 && json.Unmarshal(b[:end], &s) == nil && len(s) <= 20 {
			return "a string (" + strconv.Quote(s) + ")"
		}
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case isNumByte(c):
		return "a number"
	}
	return "invalid JSON"
}

// appendDraft encodes the answer {"draft":[ids]} (with the fields of a
// bounded draft when shown, see appendBound).
func appendDraft(dst []byte, ids []int, b *boundAnswer) []byte {
	dst = append(dst, `{"draft":[`...)
	dst = appendIDs(dst, ids)
	dst = append(dst, ']')
	dst = appendBound(dst, b)
	return append(dst, "}\n"...)
}

// appendIDs encodes ids separated by commas.
func appendIDs(dst []byte, ids []int) []byte {
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	return dst
}

// Stop reasons of a bounded draft (docs/protocol.md).
const (
	stopN          = "n"          // n tokens drafted
	stopConfidence = "confidence" // the next token's confidence fell below the bound (or a model-free strategy had nothing more to propose)
	stopContext    = "context"    // the model's maximum context reached
)

// boundAnswer is what an answer adds when a bound was in force or the
// confidences were asked for; nil: nothing (the answer is the plain one).
type boundAnswer struct {
	reason string
	conf   []float32 // nil: not asked
}

// boundOf is the boundAnswer of res for req with the bound in force, nil
// when neither a bound nor confidences were asked.
func boundOf(req *draftRequest, bound float32, res engine.Result) *boundAnswer {
	if bound <= 0 && !req.Confidences {
		return nil
	}
	b := &boundAnswer{reason: stopN}
	switch {
	case res.Stopped:
		b.reason = stopConfidence
	case len(res.Draft) == req.N:
	case len(res.Draft) == req.Fit:
		b.reason = stopContext
	default: // a model-free strategy found no more
		b.reason = stopConfidence
	}
	if req.Confidences {
		b.conf = res.Confidences
		if b.conf == nil {
			b.conf = []float32{}
		}
	}
	return b
}

// appendBound appends ,"stop_reason":…[,"confidences":[…]] for b (nothing
// for nil).
func appendBound(dst []byte, b *boundAnswer) []byte {
	if b == nil {
		return dst
	}
	dst = append(dst, `,"stop_reason":"`...)
	dst = append(dst, b.reason...)
	dst = append(dst, '"')
	if b.conf != nil {
		dst = append(dst, `,"confidences":[`...)
		for i, c := range b.conf {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendFloat(dst, float64(c), 'g', -1, 32)
		}
		dst = append(dst, ']')
	}
	return dst
}

// truncate is res as drafted with the bound and the signal: a pre-drafted
// answer, drafted without the bound and with every top-1 confidence, made
// equal to the on-demand one — the confidences the signal's (chain_prob:
// their running products), cut before the first token whose confidence is
// below bound.
func truncate(res engine.Result, bound float32, signal string) engine.Result {
	if len(res.Confidences) != len(res.Draft) {
		return res
	}
	if signal != engine.SignalTop1 && len(res.Confidences) > 0 {
		c := make([]float32, len(res.Confidences))
		prev := float32(1)
		for j, p := range res.Confidences {
			prev = engine.NextConfidence(signal, prev, p)
			c[j] = prev
		}
		res.Confidences = c
	}
	if bound <= 0 {
		return res
	}
	for j, c := range res.Confidences {
		if c < bound {
			res.Draft, res.Confidences, res.Stopped = res.Draft[:j], res.Confidences[:j], true
			if len(res.Alts) > j {
				res.Alts = res.Alts[:j]
			}
			break
		}
	}
	return res
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
