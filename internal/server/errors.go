// Errors of the HTTP API and their one mapping to status codes (docs/protocol.md).
// Every handler returns an error; apiErrorFor below is the only place that
// decides which status, code and Retry-After a failure answers with. This
// file does not detect any error itself.

package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/draftd/draftd/internal/engine"
)

// Error codes, the "code" of an error body.
const (
	CodeInvalidJSON      = "invalid_json"             // not JSON, or not one JSON object
	CodeInvalidRequest   = "invalid_request"          // a field of the wrong type, conflicting aliases
	CodeMissingTokens    = engine.CodeMissingTokens   // no tokens, or an empty array
	CodeInvalidToken     = "invalid_token"            // a token id that is not an integer
	CodeTokenOutOfRange  = engine.CodeTokenOutOfRange // a token id < 0 or ≥ vocab
	CodeInvalidN         = engine.CodeInvalidN        // n not an integer, or outside [1, max-draft-len]
	CodeContextTooLong   = engine.CodeContextTooLong  // the context fills the model's maximum
	CodeContextOverKV    = engine.CodeContextOverKV   // context + draft need more KV than the budget
	CodeInvalidStrategy  = "invalid_strategy"         // "strategy" is not a string naming a drafting strategy
	CodeInvalidInput     = "invalid_input"            // input the engine refused without a code
	CodeBodyTooLarge     = "body_too_large"           // body over --max-body-bytes
	CodeBodyTimeout      = "body_timeout"             // body not received within --body-timeout
	CodeNotFound         = "not_found"                // unknown route
	CodeMethodNotAllowed = "method_not_allowed"       // known route, other method
	CodeLoading          = "loading"                  // model not loaded or warmed up yet
	CodeQueueFull        = "queue_full"               // the engine's queue is full
	CodeQueueTimeout     = "queue_timeout"            // waited --queue-timeout for a batch slot
	CodeBusy             = "busy"                     // request bodies in flight at --max-inflight-body-bytes
	CodeShuttingDown     = "shutting_down"            // the server is stopping
	CodeTimeout          = "timeout"                  // the work hit a deadline
	CodeClientClosed     = "client_closed"            // the client went away; nobody reads this
	CodeInternal         = "internal"                 // a bug
	// Batched and incremental drafting (docs/protocol.md).
	CodeUnknownSession  = "unknown_session"  // no such session (never made, deleted, evicted, expired, or another replica's): resend tokens
	CodeInvalidAccepted = "invalid_accepted" // "accepted" not an integer in [0, length of the session's last draft]
	CodeTooManyItems    = "too_many_items"   // a /v1/drafts call over --max-batch-items
)

// StatusClientClosed is the status recorded (in logs and metrics, never seen
// by anyone) for a request whose client disconnected: nginx's 499.
const StatusClientClosed = 499

// RequestError is a problem with a request found by the server's own
// validation; Code is one of the Code constants.
type RequestError struct {
	Code    string
	Message string
}

func (e *RequestError) Error() string { return e.Code + ": " + e.Message }

func reqErr(code, msg string) *RequestError { return &RequestError{Code: code, Message: msg} }

// Server states that refuse work; apiErrorFor maps them.
var (
	errLoading      = errors.New("the model is still loading; retry shortly")
	errShuttingDown = errors.New("the server is shutting down")
)

// ErrShutdownIncomplete: Run's drain did not finish within
// Config.ShutdownTimeout; what was still in flight was cut off.
var ErrShutdownIncomplete = errors.New("shutdown incomplete: in-flight requests did not finish within the shutdown timeout")

// apiError is what an error answers: status, body and Retry-After seconds
// (0: no header).
type apiError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter int
	Bug        bool // a 500: log with the error, count it
}

// codeStatus is the status of each RequestError code.
var codeStatus = map[string]int{
	CodeInvalidJSON:      http.StatusBadRequest,
	CodeInvalidRequest:   http.StatusBadRequest,
	CodeMissingTokens:    http.StatusBadRequest,
	CodeInvalidToken:     http.StatusBadRequest,
	CodeTokenOutOfRange:  http.StatusBadRequest,
	CodeInvalidN:         http.StatusBadRequest,
	CodeContextTooLong:   http.StatusBadRequest,
	CodeContextOverKV:    http.StatusBadRequest,
	CodeInvalidStrategy:  http.StatusBadRequest,
	CodeInvalidInput:     http.StatusBadRequest,
	CodeBodyTooLarge:     http.StatusRequestEntityTooLarge,
	CodeNotFound:         http.StatusNotFound,
	CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	CodeUnknownSession:   http.StatusConflict,
	CodeInvalidAccepted:  http.StatusBadRequest,
	CodeTooManyItems:     http.StatusBadRequest,
}

// apiErrorFor maps any error a handler returns to its answer. It is the only
// place where errors become statuses.
func apiErrorFor(err error) apiError {
	var (
		re  *RequestError
		mbe *http.MaxBytesError
		ie  *engine.InputError
	)
	switch {
	case errors.As(err, &re):
		if st, ok := codeStatus[re.Code]; ok {
			return apiError{Status: st, Code: re.Code, Message: re.Message}
		}
		return apiError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "unmapped request error " + re.Code, Bug: true}
	case errors.As(err, &mbe):
		return apiError{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
			Message: "request body is larger than the limit of " + itoa(mbe.Limit) + " bytes (--max-body-bytes)"}
	case errors.As(err, &ie):
		code := ie.Code
		if code == "" {
			code = CodeInvalidInput
		}
		return apiError{Status: http.StatusBadRequest, Code: code, Message: ie.Msg}
	case errors.Is(err, engine.ErrInput):
		return apiError{Status: http.StatusBadRequest, Code: CodeInvalidInput, Message: err.Error()}
	case errors.Is(err, errBodyTimeout):
		return apiError{Status: http.StatusRequestTimeout, Code: CodeBodyTimeout,
			Message: "the request body did not arrive within the server's body timeout (--body-timeout)"}
	case errors.Is(err, errBodyBudget):
		return apiError{Status: http.StatusServiceUnavailable, Code: CodeBusy,
			Message: "the server holds its limit of request bodies in flight (--max-inflight-body-bytes); retry shortly", RetryAfter: 1}
	case errors.Is(err, engine.ErrQueueTimeout):
		return apiError{Status: http.StatusServiceUnavailable, Code: CodeQueueTimeout,
			Message: "the request waited the server's queue timeout (--queue-timeout) for a place in a batch; retry shortly", RetryAfter: 1}
	case errors.Is(err, errLoading):
		return apiError{Status: http.StatusServiceUnavailable, Code: CodeLoading, Message: err.Error(), RetryAfter: 1}
	case errors.Is(err, engine.ErrQueueFull):
		return apiError{Status: http.StatusServiceUnavailable, Code: CodeQueueFull, Message: "the draft queue is full; retry shortly", RetryAfter: 1}
	case errors.Is(err, errShuttingDown), errors.Is(err, engine.ErrClosed):
		return apiError{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown, Message: errShuttingDown.Error(), RetryAfter: 1}
	case errors.Is(err, context.Canceled):
		return apiError{Status: StatusClientClosed, Code: CodeClientClosed, Message: "the client closed the request"}
	case errors.Is(err, context.DeadlineExceeded):
		return apiError{Status: http.StatusServiceUnavailable, Code: CodeTimeout, Message: "the request timed out in the server", RetryAfter: 1}
	}
	return apiError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error: " + err.Error(), Bug: true}
}
