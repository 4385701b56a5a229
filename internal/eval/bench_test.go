package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// benchServer drafts n tokens derived from the context length and checks
// that each request of a conversation (known by its first contextLen tokens)
// extends the previous one by an accepted prefix of the previous draft plus
// one bonus token.
type benchServer struct {
	t                     *testing.T
	n, contextLen, vocab  int
	failEvery             int // every failEvery-th request answers 503; 0 = never
	mu                    sync.Mutex
	requests              int
	last                  map[string][]int // conversation → last context
	lastDraft             map[string][]int
	accepted              []int // accepted count of every follow-up request
	maxLen                int
	conversationsSeen     int
	badExtension, badToks int
}

func newBenchServer(t *testing.T, n, contextLen, vocab int) (*benchServer, *httptest.Server) {
	b := &benchServer{t: t, n: n, contextLen: contextLen, vocab: vocab, last: map[string][]int{}, lastDraft: map[string][]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"status":"ok"}`) })
	mux.HandleFunc("POST /draft", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Tokens []int `json:"tokens"`
			N      int   `json:"n"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			httpError(w, 400, "bad_json", err.Error())
			return
		}
		draft, fail := b.observe(req.Tokens, req.N)
		if fail {
			httpError(w, 503, "busy", "scripted")
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"draft": draft})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return b, srv
}

func (b *benchServer) observe(tokens []int, n int) (draft []int, fail bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests++
	b.maxLen = max(b.maxLen, len(tokens))
	for _, id := range tokens {
		if id < 0 || id >= b.vocab {
			b.badToks++
		}
	}
	if n != b.n || len(tokens) < b.contextLen {
		b.badExtension++
		return nil, true
	}
	conv := fmt.Sprint(tokens[:b.contextLen])
	if prev, ok := b.last[conv]; !ok {
		if len(tokens) != b.contextLen {
			b.badExtension++
		}
		b.conversationsSeen++
	} else {
		pd := b.lastDraft[conv]
		k := len(tokens) - len(prev) - 1
		if k < 0 || k > len(pd) || !slices.Equal(tokens[:len(prev)], prev) || !slices.Equal(tokens[len(prev):len(prev)+k], pd[:k]) {
			b.badExtension++
		} else {
			b.accepted = append(b.accepted, k)
		}
	}
	b.last[conv] = slices.Clone(tokens)
	b.lastDraft[conv] = nil
	if b.failEvery > 0 && b.requests%b.failEvery == 0 {
		return nil, true
	}
	draft = make([]int, n)
	for i := range draft {
		draft[i] = (len(tokens)*31 + i) % b.vocab
	}
	b.lastDraft[conv] = draft
	return draft, false
}

func TestBench(t *testing.T) {
	tests := []struct {
		name                  string
		opt                   BenchOptions
		failEvery             int
		wantConvs             int64 // 0 = do not check
		wantAcceptLo, wantAcc float64
	}{
		{"accept none", BenchOptions{Concurrency: 4, Requests: 40, ContextLen: 8, N: 4, AcceptMean: 0, Vocab: 50}, 0, 4, 0, 0},
		{"accept all", BenchOptions{Concurrency: 3, Requests: 31, ContextLen: 5, N: 4, AcceptMean: 1e12, Vocab: 50}, 0, 3, 4, 4},
		{"geometric mean 2", BenchOptions{Concurrency: 8, Requests: 4000, ContextLen: 4, N: 64, AcceptMean: 2, Vocab: 1000, MaxContext: 100000}, 0, 8, 1.9, 2.1},
		{"restarts at max context", BenchOptions{Concurrency: 2, Requests: 60, ContextLen: 10, N: 4, AcceptMean: 1e12, Vocab: 50, MaxContext: 30}, 0, 0, 4, 4},
		{"failures", BenchOptions{Concurrency: 1, Requests: 20, ContextLen: 3, N: 2, AcceptMean: 1e12, Vocab: 9}, 4, 1, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs, srv := newBenchServer(t, tt.opt.N, tt.opt.ContextLen, tt.opt.Vocab)
			bs.failEvery = tt.failEvery
			d, _ := NewDrafter(BackendDraftd, NewHTTPClient(tt.opt.Concurrency), srv.URL)
			tt.opt.Seed = 42
			tt.opt.Timeout = 5 * time.Second
			r, err := Bench(t.Context(), d, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			wantFails := int64(0)
			if tt.failEvery > 0 {
				wantFails = int64(tt.opt.Requests / tt.failEvery)
			}
			if r.Requests != int64(tt.opt.Requests) || bs.requests != tt.opt.Requests || r.Failures != wantFails {
				t.Errorf("requests (client, server), failures: have %d, %d, %d; want %d, %d, %d",
					r.Requests, bs.requests, r.Failures, tt.opt.Requests, tt.opt.Requests, wantFails)
			}
			if want := (int64(tt.opt.Requests) - wantFails) * int64(tt.opt.N); r.DraftTokens != want {
				t.Errorf("draft tokens: have %d; want %d", r.DraftTokens, want)
			}
			if bs.badExtension != 0 || bs.badToks != 0 {
				t.Errorf("server saw %d contexts that do not extend their conversation and %d ids out of range; want 0, 0", bs.badExtension, bs.badToks)
			}
			if r.Conversations != int64(bs.conversationsSeen) {
				t.Errorf("conversations: have %d; server saw %d", r.Conversations, bs.conversationsSeen)
			}
			if tt.wantConvs > 0 && r.Conversations != tt.wantConvs {
				t.Errorf("conversations: have %d; want %d", r.Conversations, tt.wantConvs)
			}
			if tt.opt.MaxContext > 0 && bs.maxLen+tt.opt.N > tt.opt.MaxContext {
				t.Errorf("longest context: have %d + n %d; want ≤ max context %d", bs.maxLen, tt.opt.N, tt.opt.MaxContext)
			}
			if r.AcceptedMean < tt.wantAcceptLo || r.AcceptedMean > tt.wantAcc {
				t.Errorf("accepted mean: have %v; want in [%v, %v]", r.AcceptedMean, tt.wantAcceptLo, tt.wantAcc)
			}
			if tt.failEvery == 0 {
				// The server's view of the accepted counts agrees with the client's.
				var sum int
				for _, k := range bs.accepted {
					sum += k
				}
				if srvMean := float64(sum) / float64(len(bs.accepted)); len(bs.accepted) > 0 && math.Abs(srvMean-r.AcceptedMean) > 0.2 {
					t.Errorf("accepted mean seen by the server: have %v; client says %v", srvMean, r.AcceptedMean)
				}
			}
			if r.LatencyMS.P50 <= 0 || r.RequestsPerS <= 0 || r.DraftTokensPerS < 0 {
				t.Errorf("latency, rates: have %+v, %v, %v; want positive", r.LatencyMS, r.RequestsPerS, r.DraftTokensPerS)
			}
			var buf bytes.Buffer
			if err := r.WriteText(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte("draft tokens/s")) {
				t.Errorf("WriteText: have %q, %v", buf.String(), err)
			}
		})
	}
}

// TestBenchDeterministic checks that the same seed gives the same
// conversations (at concurrency 1, where the order is fixed).
func TestBenchDeterministic(t *testing.T) {
	run := func() []int {
		bs, srv := newBenchServer(t, 4, 6, 100)
		d, _ := NewDrafter(BackendDraftd, NewHTTPClient(1), srv.URL)
		if _, err := Bench(t.Context(), d, BenchOptions{Concurrency: 1, Requests: 30, ContextLen: 6, N: 4, AcceptMean: 1.5, Vocab: 100, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		return bs.accepted
	}
	a, b := run(), run()
	if !slices.Equal(a, b) {
		t.Errorf("accepted counts: have %v and %v; want equal", a, b)
	}
}

func TestBenchOptionErrors(t *testing.T) {
	ok := BenchOptions{Concurrency: 1, Requests: 1, ContextLen: 1, N: 1, Vocab: 1}
	tests := []struct {
		name string
		edit func(*BenchOptions)
	}{
		{"n", func(o *BenchOptions) { o.N = 0 }},
		{"requests", func(o *BenchOptions) { o.Requests = 0 }},
		{"context", func(o *BenchOptions) { o.ContextLen = 0 }},
		{"vocab", func(o *BenchOptions) { o.Vocab = 0 }},
		{"accept mean", func(o *BenchOptions) { o.AcceptMean = -1 }},
		{"max context", func(o *BenchOptions) { o.ContextLen, o.MaxContext = 10, 10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.edit(&o)
			if _, err := Bench(t.Context(), nil, o); err == nil {
				t.Errorf("have nil error for %+v; want one", o)
			}
		})
	}
}

func TestFetchInfo(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    ServerInfo
		wantErr bool
	}{
		{"vocab and max_context", `{"vocab_size":151936,"max_context":40960}`, ServerInfo{VocabSize: 151936, MaxContext: 40960}, false},
		{"n_ctx", `{"vocab_size":10,"n_ctx":512,"x":"y"}`, ServerInfo{VocabSize: 10, MaxContext: 512}, false},
		{"no max context", `{"vocab_size":10}`, ServerInfo{VocabSize: 10}, false},
		{"no vocab", `{"max_context":10}`, ServerInfo{}, true},
		{"bad vocab", `{"vocab_size":"big"}`, ServerInfo{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, tt.body) }))
			defer srv.Close()
			have, err := FetchInfo(t.Context(), NewHTTPClient(1), srv.URL)
			if (err != nil) != tt.wantErr {
				t.Fatalf("have error %v; want error %v", err, tt.wantErr)
			}
			if have.VocabSize != tt.want.VocabSize || have.MaxContext != tt.want.MaxContext {
				t.Errorf("have %+v; want %+v", have, tt.want)
			}
		})
	}
}

func TestWritePlot(t *testing.T) {
	samples, script, _ := scripted()
	_, srv := newFakeServer(t, 4, script)
	d, _ := NewDrafter(BackendDraftd, NewHTTPClient(1), srv.URL)
	r, err := Replay(t.Context(), d, samples, ReplayOptions{N: 4, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tests := []struct {
		file  string
		magic string
	}{{"r.png", "\x89PNG"}, {"r.svg", "<?xml"}}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(dir, tt.file)
			if err := WritePlot(r, path); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(data, []byte(tt.magic)) {
				t.Errorf("have %q…; want a file starting %q", data[:min(len(data), 8)], tt.magic)
			}
		})
	}
	if err := WritePlot(r, filepath.Join(dir, "noext")); err == nil {
		t.Errorf("no extension: have nil error; want one")
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte("τ (micro)")) {
		t.Errorf("WriteText: have %q, %v", buf.String(), err)
	}
}
