// Tests of the draft protocol (docs/protocol.md) against a real server on a free
// loopback port serving the shipped tiny model: health, every bad input,
// aliases, defaults, drafts near the maximum context, exactness against
// model.Generate, and /metrics. Load tests are in load_test.go.

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/model"
)

const (
	tinyModel = "../../testdata/models/tiny-qwen3-q8_0.gguf"
	tinyVocab = 512
	tinyMax   = 256
)

// testServer is a server started by Run on 127.0.0.1:0.
type testServer struct {
	t      testing.TB
	URL    string
	hc     *http.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// engineBackend is the backend cmd/draftd builds (a model and its engine),
// rebuilt here because tests cannot import a main package.
type engineBackend struct {
	*engine.Engine
	m    *model.Model
	info BackendInfo
}

func (b *engineBackend) Info() BackendInfo { return b.info }

func (b *engineBackend) DraftStrategy(ctx context.Context, tokens []int, n int, name string) (engine.Result, error) {
	st, err := draft.New(name, draft.DefaultOptions())
	if err != nil {
		return engine.Result{}, err
	}
	return b.Engine.DraftWith(ctx, tokens, n, st)
}

func (b *engineBackend) DraftBatch(ctx context.Context, items []BatchItem) ([]engine.Result, []error, error) {
	ei := make([]engine.Item, len(items))
	for i, it := range items {
		var st draft.Strategy
		if it.Strategy != "" {
			var err error
			if st, err = draft.New(it.Strategy, draft.DefaultOptions()); err != nil {
				return nil, nil, err
			}
		}
		ei[i] = it.EngineItem(st)
	}
	return b.Engine.DraftBatch(ctx, ei)
}

func (b *engineBackend) Close(ctx context.Context) error {
	err := b.Engine.Close(ctx)
	return errors.Join(err, b.m.Close())
}

// tinyOpen opens the shipped tiny model with an engine of opt (a 32 MiB KV
// budget and no practical queue timeout unless given), wrapped by wrap when
// not nil.
func tinyOpen(opt engine.Options, wrap func(Backend) Backend) func(context.Context, engine.Observer) (Backend, error) {
	return func(ctx context.Context, obs engine.Observer) (Backend, error) {
		m, err := model.Load(tinyModel, model.Options{Threads: 2})
		if err != nil {
			return nil, err
		}
		if opt.KVCacheBytes == 0 {
			opt.KVCacheBytes = 32 << 20
		}
		if opt.QueueTimeout == 0 {
			// Tests not about the queue timeout must not meet it on a slow
			// (shared, -race) machine.
			opt.QueueTimeout = engine.MaxQueueTimeout
		}
		opt.Observer = obs
		e, err := engine.New(m, opt)
		if err != nil {
			m.Close()
			return nil, err
		}
		o := e.Options()
		var b Backend = &engineBackend{Engine: e, m: m, info: BackendInfo{
			Rules: e.Rules(), BOS: m.BOS, Architecture: m.Arch, Parameters: m.Params, WeightBytes: m.WeightBytes,
			WeightTypes: m.TypeCounts, VocabSize: m.Vocab, MaxContext: m.MaxContext, Model: "tiny",
			MaxDraftLen: o.MaxDraftLen, Strategy: o.Strategy.Name(), Strategies: draft.Names, Kernels: "test", Threads: m.Threads(),
			MaxBatch: o.MaxBatch, MaxQueue: o.MaxQueue,
		}}
		if wrap != nil {
			b = wrap(b)
		}
		return b, nil
	}
}

// startServer runs a server with cfg (the tiny model unless cfg.Open is
// set) and stops it when the test ends. It does not wait for health.
func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	if cfg.Open == nil {
		cfg.Open = tinyOpen(engine.Options{}, nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{t: t, URL: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 128
	ts.hc = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	go func() { ts.done <- Run(ctx, ln, cfg) }()
	t.Cleanup(func() {
		// Close idle connections first: Shutdown waits up to 5 s for a
		// connection the transport dialled but never sent a request on.
		tr.CloseIdleConnections()
		if err := ts.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ts
}

// stop cancels the server and waits for Run to return.
func (ts *testServer) stop() error {
	ts.once.Do(func() {
		ts.cancel()
		select {
		case ts.err = <-ts.done:
		case <-time.After(60 * time.Second):
			ts.err = fmt.Errorf("server did not stop within 60 s")
		}
	})
	return ts.err
}

func startHealthy(t testing.TB, cfg Config) *testServer {
	ts := startServer(t, cfg)
	ts.waitHealthy()
	return ts
}

func (ts *testServer) waitHealthy() {
	ts.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _, _ := ts.do("GET", "/health", "")
		if st == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("server not healthy after 30 s (last status %d)", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// do sends one request; status 0 means it failed.
func (ts *testServer) do(method, path, body string) (int, http.Header, []byte) {
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	return ts.send(req)
}

func (ts *testServer) send(req *http.Request) (int, http.Header, []byte) {
	resp, err := ts.hc.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// draft asks POST /draft and fails the test unless it answers 200.
func (ts *testServer) draft(tokens []int, n int) []int {
	ts.t.Helper()
	body, _ := json.Marshal(map[string]any{"tokens": tokens, "n": n})
	st, _, b := ts.do("POST", "/draft", string(body))
	if st != http.StatusOK {
		ts.t.Fatalf("POST /draft: status %d: %s", st, b)
	}
	return decodeDraft(ts.t, b)
}

func decodeDraft(t testing.TB, b []byte) []int {
	t.Helper()
	var out struct {
		Draft *[]int `json:"draft"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Draft == nil {
		t.Fatalf("bad draft answer %q: %v", b, err)
	}
	return *out.Draft
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// checkError checks that an answer is the JSON error of docs/protocol.md.
func checkError(t testing.TB, status int, h http.Header, b []byte, wantStatus int, wantCode, wantMsg string) {
	t.Helper()
	if status != wantStatus {
		t.Errorf("status: have %d; want %d (body %s)", status, wantStatus, b)
		return
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type: have %q; want application/json", ct)
	}
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Errorf("error body %q is not JSON: %v", b, err)
		return
	}
	if e.Error.Code != wantCode {
		t.Errorf("code: have %q; want %q (message %q)", e.Error.Code, wantCode, e.Error.Message)
	}
	if e.Error.Message == "" || !strings.Contains(e.Error.Message, wantMsg) {
		t.Errorf("message: have %q; want it to contain %q", e.Error.Message, wantMsg)
	}
	if status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
}

func loadModel(t testing.TB) *model.Model {
	t.Helper()
	m, err := model.Load(tinyModel, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func seq(start, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = (start + 7*i) % tinyVocab
	}
	return s
}

func idsJSON(ids []int) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

func TestHealthLoadingThenOK(t *testing.T) {
	release := make(chan struct{})
	open := tinyOpen(engine.Options{}, nil)
	ts := startServer(t, Config{Open: func(ctx context.Context, obs engine.Observer) (Backend, error) {
		<-release // a slow disk
		return open(ctx, obs)
	}})

	st, h, b := ts.do("GET", "/health", "")
	if st != http.StatusServiceUnavailable || string(bytes.TrimSpace(b)) != `{"status":"loading"}` {
		t.Fatalf("GET /health while loading: have %d %s; want 503 {\"status\":\"loading\"}", st, b)
	}
	if h.Get("Retry-After") == "" || h.Get("Content-Type") != "application/json" {
		t.Errorf("GET /health while loading: headers %v", h)
	}
	st, h, b = ts.do("POST", "/draft", `{"tokens":[1,2,3]}`)
	checkError(t, st, h, b, http.StatusServiceUnavailable, CodeLoading, "loading")
	st, h, b = ts.do("GET", "/v1/info", "")
	checkError(t, st, h, b, http.StatusServiceUnavailable, CodeLoading, "loading")
	if st, _, _ := ts.do("GET", "/metrics", ""); st != http.StatusOK {
		t.Errorf("GET /metrics while loading: have %d; want 200", st)
	}

	close(release)
	ts.waitHealthy()
	st, _, b = ts.do("GET", "/health", "")
	if st != http.StatusOK || string(bytes.TrimSpace(b)) != `{"status":"ok"}` {
		t.Fatalf("GET /health: have %d %s; want 200 {\"status\":\"ok\"}", st, b)
	}
	if d := ts.draft([]int{1, 2, 3}, 4); len(d) != 4 {
		t.Errorf("draft: have %d tokens; want 4", len(d))
	}
}

func TestBadInput(t *testing.T) {
	ts := startHealthy(t, Config{MaxBodyBytes: 4096})
	long := idsJSON(seq(1, tinyMax))
	tooLong := idsJSON(seq(1, tinyMax+40))
	big := `{"tokens":[` + strings.Repeat("1,", 3000) + `1]}`
	cases := []struct {
		name, method, path, body string
		status                   int
		code, msg                string
	}{
		{"invalid JSON", "POST", "/draft", `{"tokens":[1,2`, 400, CodeInvalidJSON, "invalid JSON"},
		{"not JSON", "POST", "/draft", `tokens=1,2`, 400, CodeInvalidJSON, "invalid JSON"},
		{"empty body", "POST", "/draft", ``, 400, CodeInvalidJSON, "empty"},
		{"trailing data", "POST", "/draft", `{"tokens":[1]} x`, 400, CodeInvalidJSON, "invalid JSON"},
		{"two objects", "POST", "/draft", `{"tokens":[1]}{"tokens":[2]}`, 400, CodeInvalidJSON, "invalid JSON"},
		{"array body", "POST", "/draft", `[1,2,3]`, 400, CodeInvalidJSON, "must be a JSON object, got an array"},
		{"null body", "POST", "/draft", `null`, 400, CodeInvalidJSON, "got null"},
		{"string body", "POST", "/draft", `"hi"`, 400, CodeInvalidJSON, "got a string"},
		{"tokens string", "POST", "/draft", `{"tokens":"1 2 3"}`, 400, CodeInvalidRequest, `"tokens" must be an array`},
		{"tokens object", "POST", "/draft", `{"tokens":{"0":1}}`, 400, CodeInvalidRequest, "got an object"},
		{"tokens number", "POST", "/draft", `{"input_ids":5}`, 400, CodeInvalidRequest, `"input_ids" must be an array`},
		{"missing tokens", "POST", "/draft", `{"n":4}`, 400, CodeMissingTokens, `missing "tokens"`},
		{"empty object", "POST", "/draft", `{}`, 400, CodeMissingTokens, `missing "tokens"`},
		{"null tokens", "POST", "/draft", `{"tokens":null}`, 400, CodeMissingTokens, `missing "tokens"`},
		{"misspelt tokens", "POST", "/draft", `{"token":[1,2]}`, 400, CodeMissingTokens, `missing "tokens"`},
		{"empty tokens", "POST", "/draft", `{"tokens":[]}`, 400, CodeMissingTokens, `"tokens" is empty`},
		{"empty alias", "POST", "/draft", `{"prompt_token_ids":[ ]}`, 400, CodeMissingTokens, `"prompt_token_ids" is empty`},
		{"negative id", "POST", "/draft", `{"tokens":[1,-2,3]}`, 400, CodeTokenOutOfRange, "tokens[1] = -2 is outside the vocabulary [0, 512)"},
		{"id = vocab", "POST", "/draft", `{"tokens":[1,2,512]}`, 400, CodeTokenOutOfRange, "tokens[2] = 512 is outside"},
		{"huge id", "POST", "/draft", `{"tokens":[123456789012345678901234567890]}`, 400, CodeTokenOutOfRange, "tokens[0] = 123456789012345678901234567890"},
		{"fractional id", "POST", "/draft", `{"tokens":[1,1.5]}`, 400, CodeInvalidToken, "tokens[1] = 1.5 is not an integer"},
		{"integral float id", "POST", "/draft", `{"tokens":[1.0]}`, 400, CodeInvalidToken, "tokens[0] = 1.0 is not an integer"},
		{"exponent id", "POST", "/draft", `{"tokens":[1e3]}`, 400, CodeInvalidToken, "tokens[0] = 1e3 is not an integer"},
		{"string id", "POST", "/draft", `{"tokens":[1,"3"]}`, 400, CodeInvalidToken, `tokens[1] is a string ("3")`},
		{"bool id", "POST", "/draft", `{"token_ids":[true]}`, 400, CodeInvalidToken, "token_ids[0] is a boolean"},
		{"null id", "POST", "/draft", `{"tokens":[1,null]}`, 400, CodeInvalidToken, "tokens[1] is null"},
		{"nested id", "POST", "/draft", `{"tokens":[[1]]}`, 400, CodeInvalidToken, "tokens[0] is an array"},
		{"n zero", "POST", "/draft", `{"tokens":[1],"n":0}`, 400, CodeInvalidN, `"n" = 0 is out of range [1, 64]`},
		{"n negative", "POST", "/draft", `{"tokens":[1],"n":-3}`, 400, CodeInvalidN, "out of range"},
		{"n too big", "POST", "/draft", `{"tokens":[1],"n":65}`, 400, CodeInvalidN, `"n" = 65 is out of range [1, 64]`},
		{"n huge", "POST", "/draft", `{"tokens":[1],"n":99999999999999999999}`, 400, CodeInvalidN, "out of range"},
		{"n fractional", "POST", "/draft", `{"tokens":[1],"n":2.5}`, 400, CodeInvalidN, "not an integer"},
		{"n string", "POST", "/draft", `{"tokens":[1],"n":"4"}`, 400, CodeInvalidN, "got a string"},
		{"n bool", "POST", "/draft", `{"tokens":[1],"num_draft_tokens":true}`, 400, CodeInvalidN, `"num_draft_tokens" must be an integer`},
		{"conflicting tokens", "POST", "/draft", `{"tokens":[1,2],"input_ids":[1,3]}`, 400, CodeInvalidRequest, `"tokens" and "input_ids" are both given, with different values`},
		{"conflicting n", "POST", "/draft", `{"tokens":[1],"n":3,"num_draft_tokens":4}`, 400, CodeInvalidRequest, `"n" and "num_draft_tokens"`},
		{"context fills max", "POST", "/draft", `{"tokens":` + long + `}`, 400, CodeContextTooLong, "context of 256 tokens fills the model's maximum context of 256"},
		{"context over max", "POST", "/draft", `{"tokens":` + tooLong + `}`, 400, CodeContextTooLong, "context of 296 tokens"},
		{"body too large", "POST", "/draft", big, 413, CodeBodyTooLarge, "larger than the limit of 4096 bytes"},
		{"unknown route", "GET", "/nope", ``, 404, CodeNotFound, "no route GET /nope"},
		{"unknown v1 route", "POST", "/v1/draft", `{}`, 404, CodeNotFound, "no route POST /v1/draft"},
		{"GET /draft", "GET", "/draft", ``, 405, CodeMethodNotAllowed, "method GET is not allowed on /draft"},
		{"POST /health", "POST", "/health", `{}`, 405, CodeMethodNotAllowed, "allowed: GET, HEAD"},
		{"DELETE /metrics", "DELETE", "/metrics", ``, 405, CodeMethodNotAllowed, "DELETE"},
		{"PUT /v1/info", "PUT", "/v1/info", ``, 405, CodeMethodNotAllowed, "PUT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, h, b := ts.do(c.method, c.path, c.body)
			checkError(t, st, h, b, c.status, c.code, c.msg)
			if c.status == 405 && h.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
		})
	}
	t.Run("body too large, chunked", func(t *testing.T) {
		req, _ := http.NewRequest("POST", ts.URL+"/draft", io.MultiReader(strings.NewReader(big))) // unknown length: chunked
		st, h, b := ts.send(req)
		checkError(t, st, h, b, 413, CodeBodyTooLarge, "larger than the limit")
	})

	// Still healthy and exact afterwards, and nothing was a 500.
	ts.waitHealthy()
	if d := ts.draft([]int{5, 6, 7}, 3); len(d) != 3 {
		t.Errorf("draft after bad input: %v", d)
	}
	if v := scrape(t, ts)["draftd_internal_errors_total"].GetMetric()[0].GetCounter().GetValue(); v != 0 {
		t.Errorf("draftd_internal_errors_total = %v; want 0", v)
	}
}

func TestAliasesAndDefaults(t *testing.T) {
	ts := startHealthy(t, Config{DraftLen: 16, Open: tinyOpen(engine.Options{MaxDraftLen: 64}, nil)})
	ctx := seq(3, 20)
	want := ts.draft(ctx, 8)
	for _, body := range []string{
		`{"tokens":%s,"n":8}`,
		`{"input_ids":%s,"n":8}`,
		`{"token_ids":%s,"num_draft_tokens":8}`,
		`{"prompt_token_ids":%s,"n":8,"num_draft_tokens":8}`,
		`{"tokens":%[1]s,"input_ids":%[1]s,"n":8,"temperature":0,"stream":false}`,
		`{"tokens":null,"input_ids":%s,"n":8,"num_draft_tokens":null}`,
		` { "n" : 8 , "tokens" : %s } `,
	} {
		body = fmt.Sprintf(body, idsJSON(ctx))
		st, _, b := ts.do("POST", "/draft", body)
		if st != http.StatusOK {
			t.Errorf("%s: status %d: %s", body, st, b)
			continue
		}
		if have := decodeDraft(t, b); !slices.Equal(have, want) {
			t.Errorf("%s: have %v; want %v", body, have, want)
		}
	}
	st, _, b := ts.do("POST", "/draft", `{"tokens":`+idsJSON(ctx)+`}`)
	if st != http.StatusOK {
		t.Fatalf("default n: status %d: %s", st, b)
	}
	if have := decodeDraft(t, b); len(have) != 16 || !slices.Equal(have[:8], want) {
		t.Errorf("default n: have %v; want 16 tokens starting with %v", have, want)
	}
}

func TestDraftsEqualGenerate(t *testing.T) {
	ts := startHealthy(t, Config{})
	m := loadModel(t)
	r := rand.New(rand.NewPCG(1, 2))
	type job struct {
		ctx []int
		n   int
	}
	var jobs []job
	for range 24 {
		ctx := make([]int, 1+r.IntN(120))
		for i := range ctx {
			ctx[i] = r.IntN(tinyVocab)
		}
		jobs = append(jobs, job{ctx, 1 + r.IntN(32)})
	}
	// Conversations that share prefixes, as a speculative decoder sends them.
	base := seq(11, 40)
	for k := range 8 {
		jobs = append(jobs, job{append(slices.Clone(base), seq(k, k*3)...), 16})
	}
	// Near the maximum context the draft is shortened to what fits.
	for _, l := range []int{tinyMax - 16, tinyMax - 5, tinyMax - 1} {
		jobs = append(jobs, job{seq(2, l), 16})
	}
	have := make([][]int, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"tokens": j.ctx, "n": j.n})
			st, _, b := ts.do("POST", "/draft", string(body))
			if st != http.StatusOK {
				t.Errorf("job %d: status %d: %s", i, st, b)
				return
			}
			have[i] = decodeDraft(t, b)
		})
	}
	wg.Wait()
	for i, j := range jobs {
		want, err := m.Generate(j.ctx, j.n)
		if err != nil {
			t.Fatal(err)
		}
		if wantLen := min(j.n, tinyMax-len(j.ctx)); len(want) != wantLen {
			t.Fatalf("job %d: Generate gave %d tokens; want %d", i, len(want), wantLen)
		}
		if !slices.Equal(have[i], want) {
			t.Errorf("job %d (context %d, n %d): have %v; want %v", i, len(j.ctx), j.n, have[i], want)
		}
	}
}

func TestInfo(t *testing.T) {
	ts := startHealthy(t, Config{DraftLen: 12, MaxBatchItems: 3, Open: tinyOpen(engine.Options{MaxDraftLen: 40}, nil)})
	st, h, b := ts.do("GET", "/v1/info", "")
	if st != http.StatusOK || h.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/info: %d %v %s", st, h, b)
	}
	var in map[string]any
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"architecture": "qwen3", "vocab_size": 512.0, "max_context": 256.0, "draft_len": 12.0,
		"max_draft_len": 40.0, "strategy": "model", "max_batch_items": 3.0,
	} {
		if in[k] != want {
			t.Errorf("%s: have %v; want %v", k, in[k], want)
		}
	}
	for _, k := range []string{"parameters", "weight_types", "kernels", "version", "build"} {
		if in[k] == nil || in[k] == "" || in[k] == 0.0 {
			t.Errorf("%s missing or empty: %v", k, in[k])
		}
	}
}

// scrape reads /metrics with the Prometheus text parser.
func scrape(t testing.TB, ts *testServer) map[string]*dto.MetricFamily {
	t.Helper()
	st, h, b := ts.do("GET", "/metrics", "")
	if st != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", st, b)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET /metrics Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value sums the samples of one family whose labels match the name/value
// pairs of match; a histogram's sample count, or with name's "_sum" suffix
// its sample sum ("_count" is the same as no suffix).
func value(fams map[string]*dto.MetricFamily, name string, match ...string) (float64, bool) {
	f, ok := fams[name]
	hsum := false
	if base, cut := strings.CutSuffix(name, "_sum"); !ok && cut {
		f, ok, hsum = fams[base], fams[base] != nil, true
	} else if base, cut := strings.CutSuffix(name, "_count"); !ok && cut {
		f, ok = fams[base]
	}
	if !ok {
		return 0, false
	}
	var sum float64
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(match); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == match[i] && l.GetValue() == match[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil && hsum:
			sum += m.GetHistogram().GetSampleSum()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, true
}

func TestMetrics(t *testing.T) {
	ts := startHealthy(t, Config{})
	// One conversation: each request extends the previous context by the
	// accepted draft plus a bonus token, so the prefix cache hits.
	ctx := seq(9, 30)
	for range 5 {
		d := ts.draft(ctx, 8)
		ctx = append(append(ctx, d[:4]...), (d[4]+1)%tinyVocab)
	}
	ts.do("POST", "/draft", `{"tokens":[]}`)
	ts.do("GET", "/nope", "")

	fams := scrape(t, ts)
	for _, c := range []struct {
		name  string
		match []string
		min   float64
	}{
		{"draftd_http_requests_total", []string{"route", "/draft", "code", "200"}, 5},
		{"draftd_http_requests_total", []string{"route", "/draft", "code", "400"}, 1},
		{"draftd_http_requests_total", []string{"code", "404"}, 1},
		{"draftd_http_request_duration_seconds", []string{"route", "/draft"}, 6},
		{"draftd_draft_tokens_served_total", nil, 40},
		{"draftd_prefill_tokens_total", nil, 30},
		{"draftd_decode_tokens_total", nil, 5 * 7},
		{"draftd_prefix_cache_hit_tokens_total", nil, 4 * 30},
		{"draftd_batch_size", nil, 5},
		{"draftd_request_prefill_tokens", nil, 5},
		{"draftd_kv_cache_bytes", nil, 1},
		{"draftd_kv_cache_budget_bytes", nil, 32 << 20},
		{"draftd_queue_depth", nil, 0},
		{"draftd_active_sequences", nil, 0},
		{"draftd_internal_errors_total", nil, 0},
		{"draftd_startup_seconds", nil, 1e-9},
		{"go_goroutines", nil, 1},
		{"process_resident_memory_bytes", nil, 1},
	} {
		v, ok := value(fams, c.name, c.match...)
		if !ok {
			t.Errorf("%s missing", c.name)
			continue
		}
		if v < c.min {
			t.Errorf("%s%v = %v; want ≥ %v", c.name, c.match, v, c.min)
		}
	}
	// Every step held a request (no pre-drafting here): one request-step
	// time per step the batch-size histogram counted, no background step,
	// no request that waited for one.
	steps, _ := value(fams, "draftd_batch_size")
	if v, _ := value(fams, "draftd_step_seconds", "kind", "request"); v != steps {
		t.Errorf("request step times %g; steps %g", v, steps)
	}
	if v, _ := value(fams, "draftd_step_seconds_sum", "kind", "request"); !(v > 0) {
		t.Errorf("request step time sum %g; want > 0", v)
	}
	if v, ok := value(fams, "draftd_step_seconds", "kind", "background"); !ok || v != 0 {
		t.Errorf("background steps %g (present %v); want 0", v, ok)
	}
	if v, ok := value(fams, "draftd_predraft_request_wait_seconds"); !ok || v != 0 {
		t.Errorf("requests that waited for a pre-draft step %g (present %v); want 0", v, ok)
	}
}
