// This file holds the HTTP clients of the replay: one for draftd's
// POST /draft (docs/protocol.md) and one for llama.cpp's llama-server
// POST /completion, behind the Drafter interface. It is not the server.

package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Drafter returns up to n draft tokens that continue tokens.
// Implementations are safe for concurrent use.
type Drafter interface {
	Draft(ctx context.Context, tokens []int, n int) ([]int, error)
}

// Backend names accepted by NewDrafter.
const (
	BackendDraftd      = "draftd"
	BackendLlamaServer = "llama-server"
)

// maxResponseBytes bounds what is read of one response body.
const maxResponseBytes = 16 << 20

// StatusError is a non-200 answer from the server.
type StatusError struct {
	Status  int
	Code    string // the "code" of a draftd error body, if any
	Message string // the error message of the body, or its first bytes
}

func (e *StatusError) Error() string {
	s := "HTTP " + strconv.Itoa(e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// ErrBadResponse is wrapped by errors for a 200 answer that cannot be used.
var ErrBadResponse = errors.New("bad response")

// NewHTTPClient returns the one client shared by all workers: its transport
// keeps at least concurrency idle connections per host so that a replay at
// concurrency C reuses C connections instead of dialing per request. There is
// no client-wide timeout: each request carries its own context deadline.
func NewHTTPClient(concurrency int) *http.Client {
	if concurrency < 1 {
		concurrency = 1
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 2*concurrency + 8
	t.MaxIdleConnsPerHost = concurrency + 4
	t.IdleConnTimeout = 90 * time.Second
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Transport: t}
}

// NormalizeURL checks that raw is an http(s) base URL and returns it without
// a trailing slash.
func NormalizeURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--url %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--url %q: want http://HOST:PORT", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// NewDrafter returns the client for backend ("draftd" or "llama-server") at
// the base URL base.
func NewDrafter(backend string, hc *http.Client, base string) (Drafter, error) {
	switch backend {
	case BackendDraftd, "":
		return &DraftdClient{HTTP: hc, URL: base, Wire: &Wire{}}, nil
	case BackendLlamaServer:
		return &LlamaServerClient{HTTP: hc, URL: base}, nil
	}
	return nil, fmt.Errorf("unknown backend %q (want %s or %s)", backend, BackendDraftd, BackendLlamaServer)
}

// DraftdClient calls draftd's POST /draft: {"tokens":[...],"n":n} →
// {"draft":[...]}, with "strategy":Strategy in the body when Strategy is set
// "min_confidence":MinConfidence when it is > 0 and
// "confidence_signal":ConfidenceSignal when it is set.
type DraftdClient struct {
	HTTP     *http.Client
	URL      string // base URL, no trailing slash
	Wire     *Wire  // what was sent and parsed (nil: not counted)
	Strategy string // drafting strategy asked in every request; "" = the server's --strategy
	// MinConfidence is the confidence bound sent with every request
	// (docs/protocol.md, "min_confidence"); 0: none sent (the server's
	// --min-confidence then applies to session and batch items).
	MinConfidence float64
	// ConfidenceSignal is the confidence signal sent with every request
	// ("confidence_signal"); "": none sent (the server's default).
	ConfidenceSignal string
}

// Draft implements Drafter.
func (c *DraftdClient) Draft(ctx context.Context, tokens []int, n int) ([]int, error) {
	d, _, err := c.draft(ctx, tokens, n, false)
	return d, err
}

// draftAnswer is a /draft answer or a /v1/drafts result.
type draftAnswer struct {
	Draft       *[]int    `json:"draft"`
	Confidences []float64 `json:"confidences"`
}

// check returns the draft and, when asked (conf), its confidences.
func (a *draftAnswer) check(conf bool) ([]int, []float64, error) {
	if a.Draft == nil {
		return nil, nil, fmt.Errorf(`%w: no "draft" in the answer`, ErrBadResponse)
	}
	if conf && len(a.Confidences) != len(*a.Draft) {
		return nil, nil, fmt.Errorf(`%w: %d "confidences" for %d draft tokens`, ErrBadResponse, len(a.Confidences), len(*a.Draft))
	}
	return *a.Draft, a.Confidences, nil
}

// appendBound appends the confidence fields of c's requests (and
// "confidences":true when conf) to a body.
func (c *DraftdClient) appendBound(body []byte, conf bool) []byte {
	if c.MinConfidence > 0 {
		body = append(body, `,"min_confidence":`...)
		body = strconv.AppendFloat(body, c.MinConfidence, 'g', -1, 64)
	}
	if c.ConfidenceSignal != "" {
		body = append(body, `,"confidence_signal":`...)
		body = strconv.AppendQuote(body, c.ConfidenceSignal)
	}
	if conf {
		body = append(body, `,"confidences":true`...)
	}
	return body
}

// draft is Draft, with the confidences of the draft's tokens when conf.
func (c *DraftdClient) draft(ctx context.Context, tokens []int, n int, conf bool) ([]int, []float64, error) {
	body := make([]byte, 0, 64+8*len(tokens))
	body = append(body, `{"tokens":`...)
	body = appendInts(body, tokens)
	body = append(body, `,"n":`...)
	body = strconv.AppendInt(body, int64(n), 10)
	if c.Strategy != "" {
		body = append(body, `,"strategy":`...)
		body = strconv.AppendQuote(body, c.Strategy)
	}
	body = c.appendBound(body, conf)
	body = append(body, '}')
	var out draftAnswer
	if err := c.post(ctx, "/draft", body, "", &out); err != nil {
		return nil, nil, err
	}
	return out.check(conf)
}

// LlamaServerClient calls llama.cpp's llama-server POST /completion so that
// the same replay measures it. The request is
//
//	{"prompt":[ids], "n_predict":n, "temperature":0, "top_k":1,
//	 "repeat_penalty":1, "presence_penalty":0, "frequency_penalty":0,
//	 "dry_multiplier":0, "cache_prompt":true, "return_tokens":true,
//	 "stream":false, "chat_parser":llamaRawParser,
//	 "response_fields":["tokens","content","stop_type"]}
//
// A prompt given as an array of numbers is used as token ids with no BOS
// added; temperature 0 with top_k 1 is greedy argmax, and the penalties are
// set to their neutral values so no server default bends the argmax;
// cache_prompt reuses the KV of the common prefix with the slot's previous
// request, as draftd's prefix cache does; return_tokens puts the generated
// ids in the answer's "tokens" field, and response_fields trims the answer to
// what is read. ignore_eos is left false (it would bias the EOS logit to
// -inf and change the greedy output), so a draft that reaches an
// end-of-generation token is shorter than n: the replay scores what comes
// back. A server too old for return_tokens answers without "tokens"; that is
// a failed request with an error saying so.
//
// chat_parser: current llama-server runs every completion's text, /completion
// included, through its chat-output parser (tools/server: every result's
// update() calls common_chat_parse). With no parser configured that is
// content(rest()) + end(), and rest() fails on bytes that are not valid UTF-8
// (a lone continuation byte, or a multi-byte character cut by n_predict or
// by an end token), which llama-server answers with HTTP 500 "The model
// produced output that does not match the expected Content-only format"
// although the token ids are fine. The parser is a request field: an arena
// holding one epsilon parser matches the empty prefix of any output, so the
// parse succeeds, "content" stays empty and "tokens" carries the ids.
// Streaming does not help: a token whose text ends inside a character is
// held back from the stream and the chunk that completes it carries only the
// last id, so streamed ids can miss tokens. A server that still answers that
// 500 (one too old or too new for this parser form) is the peer's own
// failure: Draft returns a *PeerError and the report counts it apart.
type LlamaServerClient struct {
	HTTP *http.Client
	URL  string // base URL, no trailing slash
}

// Draft implements Drafter.
func (c *LlamaServerClient) Draft(ctx context.Context, tokens []int, n int) ([]int, error) {
	body := make([]byte, 0, 320+8*len(tokens))
	body = append(body, `{"prompt":`...)
	body = appendInts(body, tokens)
	body = append(body, `,"n_predict":`...)
	body = strconv.AppendInt(body, int64(n), 10)
	body = append(body, `,"temperature":0,"top_k":1,"repeat_penalty":1,"presence_penalty":0,`+
		`"frequency_penalty":0,"dry_multiplier":0,"cache_prompt":true,"return_tokens":true,`+
		`"stream":false,"chat_parser":`+llamaRawParserJSON+`,"response_fields":["tokens","content","stop_type"]}`...)
	var out struct {
		Tokens  *[]int `json:"tokens"`
		Content string `json:"content"`
	}
	if err := postJSON(ctx, c.HTTP, c.URL+"/completion", body, &out); err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusInternalServerError && strings.Contains(se.Message, llamaParserError) {
			return nil, &PeerError{Reason: ReasonLlamaChatParser, Err: err}
		}
		return nil, err
	}
	if out.Tokens == nil || (len(*out.Tokens) == 0 && out.Content != "") {
		return nil, fmt.Errorf(`%w: llama-server answered without "tokens"; it needs return_tokens support (a newer llama.cpp)`, ErrBadResponse)
	}
	return *out.Tokens, nil
}

// llamaRawParserJSON is the "chat_parser" value sent to llama-server, a JSON
// string holding a serialized PEG arena (common_peg_arena::save's form:
// parsers, rules, root) whose only parser is epsilon: it accepts any output.
const llamaRawParserJSON = `"{\"parsers\":[{\"type\":\"epsilon\"}],\"rules\":{},\"root\":0}"`

// llamaParserError is the start of the message llama-server's chat-output
// parser throws (common/chat.cpp) when the output does not parse.
const llamaParserError = "The model produced output that does not match the expected"

// ReasonLlamaChatParser is the PeerError reason for llamaParserError.
const ReasonLlamaChatParser = "llama-server chat-output parser rejected output that is not valid UTF-8 (HTTP 500)"

// PeerError is a failed request that is the measured server's own defect,
// not load, transport or a bad request: the server generated the draft but
// could not deliver it. The replay scores it as an empty draft like every
// failure and also counts it under Reason, so a side-by-side comparison can
// tell the peer's bugs from its capacity.
type PeerError struct {
	Reason string
	Err    error
}

func (e *PeerError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *PeerError) Unwrap() error { return e.Err }

// appendInts appends ids as a JSON array.
func appendInts(b []byte, ids []int) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, ']')
}

// postJSON posts body to u and decodes a 200 answer into out. Any other
// status is a *StatusError. The body is always drained so the connection
// can be reused.
func postJSON(ctx context.Context, hc *http.Client, u string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	return decodeAnswer(resp, out)
}

// getJSON gets u and decodes a 200 answer into out.
func getJSON(ctx context.Context, hc *http.Client, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	return decodeAnswer(resp, out)
}

func decodeAnswer(resp *http.Response, out any) error {
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(resp.StatusCode, data)
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("%w: answer over %d bytes", ErrBadResponse, maxResponseBytes)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	return nil
}

// statusError builds a *StatusError from an error body: draftd's
// {"error":{"code","message"}}, llama-server's {"error":{"code":503,
// "message","type"}}, or anything else (its first bytes).
func statusError(status int, data []byte) *StatusError {
	e := &StatusError{Status: status}
	var b struct {
		Error struct {
			Code    json.RawMessage `json:"code"`
			Message string          `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &b) == nil && (b.Error.Message != "" || len(b.Error.Code) > 0) {
		e.Message = b.Error.Message
		var code string
		if json.Unmarshal(b.Error.Code, &code) == nil {
			e.Code = code
		}
		return e
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	e.Message = msg
	return e
}

// CheckHealth asks GET /health once and returns an error unless it answers
// 200: a replay against a server that is down or still loading would only
// measure failures.
func CheckHealth(ctx context.Context, hc *http.Client, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out json.RawMessage
	if err := getJSON(ctx, hc, base+"/health", &out); err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusServiceUnavailable {
			return fmt.Errorf("server at %s is not ready (GET /health: %v)", base, err)
		}
		return fmt.Errorf("server at %s: GET /health: %w", base, err)
	}
	return nil
}

// ServerInfo is what the replay reads of draftd's GET /v1/info; Raw keeps the
// whole answer for the report.
type ServerInfo struct {
	VocabSize  int
	MaxContext int // 0 when the answer does not say
	Raw        json.RawMessage
}

// FetchInfo reads draftd's GET /v1/info. vocab_size is required; the maximum
// context is read from the first of max_context, max_ctx, context_length,
// n_ctx that is present.
func FetchInfo(ctx context.Context, hc *http.Client, base string) (ServerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var raw json.RawMessage
	if err := getJSON(ctx, hc, base+"/v1/info", &raw); err != nil {
		return ServerInfo{}, fmt.Errorf("GET /v1/info: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return ServerInfo{}, fmt.Errorf("GET /v1/info: %w: %v", ErrBadResponse, err)
	}
	info := ServerInfo{Raw: raw}
	if v, ok := m["vocab_size"]; !ok || json.Unmarshal(v, &info.VocabSize) != nil || info.VocabSize <= 0 {
		return ServerInfo{}, fmt.Errorf(`GET /v1/info: %w: no positive integer "vocab_size"`, ErrBadResponse)
	}
	for _, k := range []string{"max_context", "max_ctx", "context_length", "n_ctx"} {
		if v, ok := m[k]; ok && json.Unmarshal(v, &info.MaxContext) == nil && info.MaxContext > 0 {
			break
		}
		info.MaxContext = 0
	}
	return info, nil
}

// AffinityTokens is how many leading context ids choose the replica of a
// conversation, in Routed and in deploy/haproxy/haproxy.cfg alike.
const AffinityTokens = 16

// Routed spreads conversations over several drafters (replicas) the way
// the proxy does, without one: a request goes to the drafter chosen by an
// FNV-1a hash of its first AffinityTokens ids, so every request of a
// conversation reaches the same replica and its prefix cache. The set is
// fixed (modulo hashing, no health checks, no retries): for measuring
// replicas side by side, not for serving — that is deploy/haproxy's job.
type Routed []Drafter

// Draft implements Drafter.
func (r Routed) Draft(ctx context.Context, tokens []int, n int) ([]int, error) {
	h := uint64(14695981039346656037)
	for _, id := range tokens[:min(AffinityTokens, len(tokens))] {
		for v := uint64(uint32(id)); ; v >>= 8 {
			h = (h ^ (v & 0xff)) * 1099511628211
			if v < 0x100 {
				break
			}
		}
		h = (h ^ ',') * 1099511628211
	}
	return r[h%uint64(len(r))].Draft(ctx, tokens, n)
}
