// This file is the test double of a drafter: an httptest server that answers
// draftd's POST /draft and llama-server's POST /completion from a script
// keyed by the exact context, so tests know every draft in advance.

package eval

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// reply is the scripted answer to one context.
type reply struct {
	draft  []int
	status int  // 0 = 200
	hang   bool // block until the client gives up
	null   bool // answer a JSON null instead of the draft
	// peerBug answers as llama-server does when its chat-output parser
	// rejects the generated text: HTTP 500 with its error body.
	peerBug bool
}

// body is the draft as the answer carries it.
func (r reply) body() any {
	if r.null {
		return nil
	}
	if r.draft == nil {
		return []int{}
	}
	return r.draft
}

// fakeServer answers from script; a context not in the script is a 500
// naming it, so a replay that sends the wrong context shows up as failures.
type fakeServer struct {
	t      *testing.T
	script map[string]reply
	n      int // the n every request must carry
	// upToN accepts any n in [1, n] (a replay with ClipN) and records it in asked.
	upToN bool

	// hung receives the context of every request that hangs, once it is
	// hanging (buffered; a full channel drops the notice).
	hung chan string

	mu    sync.Mutex
	seen  map[string]int // requests per context
	asked map[string]int // the n of each context's last /draft request
}

func key(tokens []int) string { return fmt.Sprint(tokens) }

func newFakeServer(t *testing.T, n int, script map[string]reply) (*fakeServer, *httptest.Server) {
	f := &fakeServer{t: t, script: script, n: n, seen: map[string]int{}, asked: map[string]int{}, hung: make(chan string, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"vocab_size":1000,"max_context":4096}`)
	})
	mux.HandleFunc("POST /draft", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Tokens []int `json:"tokens"`
			N      int   `json:"n"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			httpError(w, 400, "bad_json", err.Error())
			return
		}
		if req.N != f.n && !(f.upToN && req.N >= 1 && req.N <= f.n) {
			httpError(w, 400, "bad_n", fmt.Sprintf("have n %d; want %d", req.N, f.n))
			return
		}
		f.mu.Lock()
		f.asked[key(req.Tokens)] = req.N
		f.mu.Unlock()
		rep, ok := f.lookup(req.Tokens)
		if !f.answer(w, r, rep, ok, req.Tokens) {
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"draft": rep.body()})
	})
	mux.HandleFunc("POST /completion", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt       []int    `json:"prompt"`
			NPredict     int      `json:"n_predict"`
			Temperature  *float64 `json:"temperature"`
			TopK         *int     `json:"top_k"`
			CachePrompt  *bool    `json:"cache_prompt"`
			ReturnTokens *bool    `json:"return_tokens"`
			Stream       *bool    `json:"stream"`
			ChatParser   *string  `json:"chat_parser"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			httpError(w, 400, "bad_json", err.Error())
			return
		}
		switch {
		case req.NPredict != f.n:
			httpError(w, 400, "", fmt.Sprintf("have n_predict %d; want %d", req.NPredict, f.n))
			return
		case req.Temperature == nil || *req.Temperature != 0 || req.TopK == nil || *req.TopK != 1:
			httpError(w, 400, "", "not greedy: want temperature 0 and top_k 1")
			return
		case req.CachePrompt == nil || !*req.CachePrompt || req.ReturnTokens == nil || !*req.ReturnTokens:
			httpError(w, 400, "", "want cache_prompt and return_tokens true")
			return
		case req.Stream == nil || *req.Stream:
			httpError(w, 400, "", "want stream false")
			return
		case req.ChatParser == nil || !isEpsilonArena(*req.ChatParser):
			httpError(w, 400, "", "want chat_parser: a serialized PEG arena whose root is one epsilon parser")
			return
		}
		rep, ok := f.lookup(req.Prompt)
		if !f.answer(w, r, rep, ok, req.Prompt) {
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"content": "text", "tokens": rep.body(), "stop_type": "limit"})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeServer) lookup(tokens []int) (reply, bool) {
	k := key(tokens)
	f.mu.Lock()
	f.seen[k]++
	f.mu.Unlock()
	rep, ok := f.script[k]
	return rep, ok
}

// answer handles the non-200 replies; it reports whether to send the draft.
func (f *fakeServer) answer(w http.ResponseWriter, r *http.Request, rep reply, ok bool, tokens []int) bool {
	switch {
	case !ok:
		httpError(w, 500, "unscripted", "no reply scripted for "+key(tokens))
	case rep.hang:
		select {
		case f.hung <- key(tokens):
		default:
		}
		<-r.Context().Done()
	case rep.peerBug:
		// llama-server's body for an exception in a completion (format_error_response).
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"code":500,"message":"The model produced output that does not match the expected Content-only format","type":"server_error"}}`)
	case rep.status != 0:
		httpError(w, rep.status, "scripted", "scripted failure")
	default:
		return true
	}
	return false
}

// isEpsilonArena reports whether s is common_peg_arena's JSON form
// ({"parsers":[...],"rules":{},"root":i}) with parsers[root] of type
// "epsilon", the parser that accepts any output.
func isEpsilonArena(s string) bool {
	var a struct {
		Parsers []struct {
			Type string `json:"type"`
		} `json:"parsers"`
		Rules map[string]int `json:"rules"`
		Root  *int           `json:"root"`
	}
	if json.Unmarshal([]byte(s), &a) != nil || a.Rules == nil || a.Root == nil {
		return false
	}
	return *a.Root >= 0 && *a.Root < len(a.Parsers) && a.Parsers[*a.Root].Type == "epsilon"
}

func httpError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

// ctxOf is prompt + continuation[:p], the context of step p.
func ctxOf(s Sample, p int) []int {
	return append(append([]int{}, s.Prompt...), s.Continuation[:p]...)
}
