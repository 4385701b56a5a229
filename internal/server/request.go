// The body of POST /draft (DESIGN §1): decoding, validation against the
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
)

// tokenFields are the names of the context field, canonical first.
var tokenFields = [...]string{"tokens", "input_ids", "token_ids", "prompt_token_ids"}

// nFields are the names of the draft length field, canonical first.
var nFields = [...]string{"n", "num_draft_tokens"}

// limits are what a request is validated against.
type limits struct {
	Vocab       int // ids in [0, Vocab)
	MaxContext  int // contexts shorter than this
	DraftLen    int // n when absent
	MaxDraftLen int // n ≤ MaxDraftLen
}

// draftRequest is a validated POST /draft body.
type draftRequest struct {
	Tokens []int // (contextLen) ids in [0, vocab), 0 < contextLen < MaxContext
	N      int   // asked draft length, 1 ≤ N ≤ MaxDraftLen
	Fit    int   // draft length that fits before the maximum context: min(N, MaxContext−contextLen)
	// Strategy names the drafting strategy ("": the server's); the handler
	// checks the name.
	Strategy string
}

// parseDraftRequest decodes and validates body. Errors are *RequestError.
func parseDraftRequest(body []byte, lim limits) (draftRequest, error) {
	var req draftRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return req, reqErr(CodeInvalidJSON, `request body is empty; want a JSON object such as {"tokens":[1,2,3],"n":16}`)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return req, reqErr(CodeInvalidJSON, fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se))
		case errors.As(err, &te):
			return req, reqErr(CodeInvalidJSON, "request body must be a JSON object, got "+kindOf(bytes.TrimSpace(body)))
		}
		return req, reqErr(CodeInvalidJSON, "invalid JSON: "+err.Error())
	}
	if fields == nil { // the body is null
		return req, reqErr(CodeInvalidJSON, "request body must be a JSON object, got null")
	}

	// The context: every present alias must agree.
	var first string
	for _, name := range tokenFields {
		raw, ok := fields[name]
		if !ok || isNull(raw) {
			continue
		}
		ids, err := parseIDs(name, raw, lim)
		if err != nil {
			return req, err
		}
		if first == "" {
			first, req.Tokens = name, ids
		} else if !slices.Equal(ids, req.Tokens) {
			return req, reqErr(CodeInvalidRequest, fmt.Sprintf("%q and %q are both given, with different values; give one", first, name))
		}
	}
	switch {
	case first == "":
		return req, reqErr(CodeMissingTokens, `missing "tokens": the context as an array of token ids is required (aliases: input_ids, token_ids, prompt_token_ids)`)
	case len(req.Tokens) == 0:
		return req, reqErr(CodeMissingTokens, fmt.Sprintf("%q is empty; the context needs at least one token id", first))
	case len(req.Tokens) >= lim.MaxContext:
		return req, reqErr(CodeContextTooLong, fmt.Sprintf("context of %d tokens fills the model's maximum context of %d; at most %d tokens leave room to draft",
			len(req.Tokens), lim.MaxContext, lim.MaxContext-1))
	}

	// The draft length.
	req.N = lim.DraftLen
	first = ""
	for _, name := range nFields {
		raw, ok := fields[name]
		if !ok || isNull(raw) {
			continue
		}
		n, err := parseN(name, raw, lim)
		if err != nil {
			return req, err
		}
		if first == "" {
			first, req.N = name, n
		} else if n != req.N {
			return req, reqErr(CodeInvalidRequest, fmt.Sprintf("%q and %q are both given, with different values; give one", first, name))
		}
	}
	req.Fit = min(req.N, lim.MaxContext-len(req.Tokens))
	if raw, ok := fields["strategy"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &req.Strategy); err != nil {
			return req, reqErr(CodeInvalidStrategy, `"strategy" must be a string naming a drafting strategy, got `+kindOf(bytes.TrimSpace(raw)))
		}
	}
	return req, nil
}

// parseIDs reads the array of token ids raw (a valid JSON value) of field
// name.
func parseIDs(name string, raw json.RawMessage, lim limits) ([]int, error) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || b[0] != '[' {
		return nil, reqErr(CodeInvalidRequest, fmt.Sprintf("%q must be an array of integer token ids, got %s", name, kindOf(b)))
	}
	ids := make([]int, 0, len(b)/4)
	i := skipSpace(b, 1)
	if b[i] == ']' {
		return ids, nil
	}
	for {
		// b[i] starts an element; the JSON is valid, so an element that is not
		// a number is reported by its first byte and never scanned.
		j := i
		for j < len(b) && isNumByte(b[j]) {
			j++
		}
		if j == i {
			return nil, reqErr(CodeInvalidToken, fmt.Sprintf("%s[%d] is %s; token ids must be integers", name, len(ids), kindOf(b[i:])))
		}
		v, ok, err := parseInt(b[i:j])
		if err != "" {
			return nil, reqErr(CodeInvalidToken, fmt.Sprintf("%s[%d] = %s is not an integer; token ids must be integers (%s)", name, len(ids), b[i:j], err))
		}
		if !ok || v < 0 || v >= int64(lim.Vocab) {
			return nil, reqErr(CodeTokenOutOfRange, fmt.Sprintf("%s[%d] = %s is outside the vocabulary [0, %d)", name, len(ids), b[i:j], lim.Vocab))
		}
		ids = append(ids, int(v))
		i = skipSpace(b, j)
		if b[i] == ']' {
			return ids, nil
		}
		i = skipSpace(b, i+1) // the ','
	}
}

// parseN reads the draft length raw of field name.
func parseN(name string, raw json.RawMessage, lim limits) (int, error) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || !isNumByte(b[0]) {
		return 0, reqErr(CodeInvalidN, fmt.Sprintf("%q must be an integer in [1, %d], got %s", name, lim.MaxDraftLen, kindOf(b)))
	}
	v, ok, err := parseInt(b)
	if err != "" {
		return 0, reqErr(CodeInvalidN, fmt.Sprintf("%q = %s is not an integer (%s)", name, b, err))
	}
	if !ok || v < 1 || v > int64(lim.MaxDraftLen) {
		return 0, reqErr(CodeInvalidN, fmt.Sprintf("%q = %s is out of range [1, %d] (--max-draft-len)", name, b, lim.MaxDraftLen))
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

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// kindOf names the JSON value that b starts with, with a short quote of
// strings.
func kindOf(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch c := b[0]; {
	case c == '"':
		var s string
		if json.NewDecoder(bytes.NewReader(b)).Decode(&s) == nil && len(s) <= 20 {
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

// appendDraft encodes the answer {"draft":[ids]}.
func appendDraft(dst []byte, ids []int) []byte {
	dst = append(dst, `{"draft":[`...)
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	return append(dst, "]}\n"...)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
