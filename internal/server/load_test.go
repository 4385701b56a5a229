// Load and life-cycle tests on a real server (issue 3, "Bad input and
// load"): overload answers only 200 or 503 + Retry-After, a disconnecting
// client cancels its work, shutdown finishes in-flight requests, and a soak
// replay at concurrency 32 has no failures and flat memory. The soak is a
// few seconds by default; DRAFTD_SOAK=1 runs it for a minute (or for
// DRAFTD_SOAK_DURATION).

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/eval"
	"github.com/draftd/draftd/internal/model"
)

// hookBackend runs before ahead of every Draft of the wrapped backend.
type hookBackend struct {
	Backend
	before func(ctx context.Context, tokens []int) error
}

func (h *hookBackend) Draft(ctx context.Context, tokens []int, n int) (engine.Result, error) {
	if err := h.before(ctx, tokens); err != nil {
		return engine.Result{}, err
	}
	return h.Backend.Draft(ctx, tokens, n)
}

// hook opens the tiny model with a default engine, wrapped by before.
func hook(before func(ctx context.Context, tokens []int) error) func(context.Context, engine.Observer) (Backend, error) {
	return tinyOpen(engine.Options{}, func(b Backend) Backend { return &hookBackend{Backend: b, before: before} })
}

// raceEnabled (set under -race) shrinks the soak and overload workloads,
// which run ~10× slower there.
var raceEnabled bool

// marker starts the contexts that test hooks act on (the warm-up never does).
const marker = 500

func TestOverload(t *testing.T) {
	for _, c := range []struct {
		name string
		slow bool // hold every request 20 ms before the engine: overload is certain
	}{{"engine", false}, {"slow", true}} {
		t.Run(c.name, func(t *testing.T) {
			var wrap func(Backend) Backend
			if c.slow {
				wrap = func(b Backend) Backend {
					return &hookBackend{Backend: b, before: func(ctx context.Context, tokens []int) error {
						time.Sleep(20 * time.Millisecond)
						return nil
					}}
				}
			}
			cfg := Config{Open: tinyOpen(engine.Options{MaxBatch: 2, MaxQueue: 2}, wrap)}
			ts := startHealthy(t, cfg)
			clients, each := 64, 3
			if raceEnabled {
				clients, each = 12, 2
			}
			var (
				mu     sync.Mutex
				counts = map[int]int{}
				start  = make(chan struct{})
				wg     sync.WaitGroup
			)
			for i := range clients {
				wg.Go(func() {
					<-start
					for k := range each {
						ctx := seq(i*each+k, 100)
						body, _ := json.Marshal(map[string]any{"tokens": ctx, "n": 64})
						st, h, b := ts.do("POST", "/draft", string(body))
						switch st {
						case http.StatusOK:
							if d := decodeDraft(t, b); len(d) != 64 {
								t.Errorf("200 with %d draft tokens; want 64", len(d))
							}
						case http.StatusServiceUnavailable:
							checkError(t, st, h, b, st, CodeQueueFull, "queue is full")
						default:
							t.Errorf("status %d: %s", st, b)
						}
						mu.Lock()
						counts[st]++
						mu.Unlock()
					}
				})
			}
			close(start)
			wg.Wait()
			t.Logf("statuses: %v", counts)
			if counts[200] == 0 {
				t.Errorf("no request succeeded")
			}
			if c.slow && counts[503] == 0 {
				t.Errorf("no 503 with %d clients against a queue of 2", clients)
			}
			ts.waitHealthy()
			ts.draft([]int{1, 2, 3}, 4)
			if v, _ := value(scrape(t, ts), "draftd_internal_errors_total"); v != 0 {
				t.Errorf("draftd_internal_errors_total = %v; want 0", v)
			}
		})
	}
}

// rawPost opens a TCP connection to ts and writes a complete POST /draft
// with body.
func rawPost(t testing.TB, ts *testServer, body string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /draft HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return c.(*net.TCPConn)
}

// TestDisconnectCancels: a client whose connection is reset while its
// draft runs cancels the work, and the request counts as 499.
func TestDisconnectCancels(t *testing.T) {
	entered := make(chan struct{}, 1)
	saw := make(chan error, 1)
	ts := startHealthy(t, Config{Open: hook(func(ctx context.Context, tokens []int) error {
		if tokens[0] != marker {
			return nil
		}
		entered <- struct{}{}
		select {
		case <-ctx.Done():
			saw <- ctx.Err()
			return ctx.Err()
		case <-time.After(10 * time.Second):
			saw <- nil
			return nil
		}
	})})

	c := rawPost(t, ts, `{"tokens":[500,1,2],"n":8}`)
	<-entered
	c.SetLinger(0) // close with a reset
	c.Close()
	select {
	case err := <-saw:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("engine call context: have %v; want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reset did not cancel the engine call")
	}
	// The request is logged and counted as 499, and nothing else changed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, _ := value(scrape(t, ts), "draftd_http_requests_total", "route", "/draft", "code", "499")
		if v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests with code 499: %v; want 1", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ts.draft([]int{1, 2, 3}, 4)
}

// TestHalfCloseIsClose: a client that shuts down its write side while its
// draft runs is a client that closed (TCP cannot tell the two apart before
// the server writes): its work is cancelled, the request counts as 499, and
// the connection is closed with no answer — never an empty 200.
func TestHalfCloseIsClose(t *testing.T) {
	g := newGate()
	ts := startHealthy(t, Config{Open: g.open(engine.Options{})})
	g.armed.Store(true)
	t.Cleanup(g.release)
	c := rawPost(t, ts, `{"tokens":[1,2,3],"n":64}`)
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not start the draft")
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	waitGauge(t, ts, "draftd_http_requests_total", 1, "the half-closed request counts as 499", "route", "/draft", "code", "499")
	g.release()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Errorf("half-closed request: read %q (%v); want the connection closed with no answer", b, err)
	}
}

// TestStopWhileLoading: a stop while the backend is still loading (a disk
// that does not answer) returns at once, and a backend that arrives later
// is closed.
func TestStopWhileLoading(t *testing.T) {
	release := make(chan struct{})
	opened := make(chan struct{})
	closed := make(chan struct{})
	open := tinyOpen(engine.Options{}, func(b Backend) Backend { return &closeSpy{Backend: b, closed: closed} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, ln, Config{Logger: slog.New(slog.DiscardHandler), Open: func(ctx context.Context, obs engine.Observer) (Backend, error) {
			close(opened)
			<-release
			return open(ctx, obs)
		}})
	}()
	<-opened
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v; want nil for a stop while loading", err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Run did not return within 10 s of a stop while loading")
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend that arrived after the stop was not closed")
	}
}

type closeSpy struct {
	Backend
	closed chan struct{}
}

func (c *closeSpy) Close(ctx context.Context) error {
	err := c.Backend.Close(ctx)
	close(c.closed)
	return err
}

func TestGracefulShutdown(t *testing.T) {
	const inflight = 6
	gate := make(chan struct{})
	entered := make(chan struct{}, inflight)
	ts := startHealthy(t, Config{Open: hook(func(ctx context.Context, tokens []int) error {
		if tokens[0] == marker {
			entered <- struct{}{}
			<-gate
		}
		return nil
	})})
	m := loadModel(t)

	type answer struct {
		st   int
		b    []byte
		want []int
	}
	answers := make(chan answer, inflight)
	for i := range inflight {
		ctx := append([]int{marker}, seq(i, 20+i)...)
		go func() {
			body, _ := json.Marshal(map[string]any{"tokens": ctx, "n": 10})
			st, _, b := ts.do("POST", "/draft", string(body))
			want, _ := m.Generate(ctx, 10)
			answers <- answer{st, b, want}
		}()
	}
	for range inflight {
		<-entered
	}
	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()

	// New connections are refused once the listener is closed.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := fresh.Get(ts.URL + "/health")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections 5 s after shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) before in-flight requests finished", err)
	default:
	}

	close(gate)
	for range inflight {
		a := <-answers
		if a.st != http.StatusOK {
			t.Errorf("in-flight request: status %d: %s", a.st, a.b)
			continue
		}
		if have := decodeDraft(t, a.b); !slices.Equal(have, a.want) {
			t.Errorf("in-flight request: have %v; want %v", have, a.want)
		}
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run: %v; want nil after a graceful shutdown", err)
	}
}

// soakData makes a dataset: continuations of the shipped Q4_0 twin of the
// served Q8_0 model (same seed, other rounding), so that drafts are often
// but not always accepted and every request length occurs.
func soakData(t testing.TB, samples, contLen int) []eval.Sample {
	t.Helper()
	target, err := model.Load("../../testdata/models/tiny-qwen3-q4_0.gguf", model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	r := rand.New(rand.NewPCG(7, 7))
	var out []eval.Sample
	for i := range samples {
		prompt := make([]int, 8+r.IntN(40))
		for j := range prompt {
			prompt[j] = r.IntN(tinyVocab)
		}
		cont, err := target.Generate(prompt, contLen)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, eval.Sample{ID: fmt.Sprint(i), Prompt: prompt, Continuation: cont})
	}
	return out
}

func TestSoak(t *testing.T) {
	dur := 3 * time.Second
	if os.Getenv("DRAFTD_SOAK") != "" {
		dur = time.Minute
	}
	if s := os.Getenv("DRAFTD_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("DRAFTD_SOAK_DURATION: %v", err)
		}
		dur = d
	}
	samples, contLen := 48, 64
	if testing.Short() {
		dur = time.Second
	}
	if raceEnabled {
		// One warm-up replay and one timed round of a smaller set: the
		// race detector sees the same concurrency, at a tenth of the work.
		dur, samples, contLen = time.Nanosecond, 8, 24
	}
	const budget = 4 << 20 // small enough that the prefix cache evicts
	ts := startHealthy(t, Config{Open: tinyOpen(engine.Options{KVCacheBytes: budget}, nil)})
	data := soakData(t, samples, contLen)
	hc := eval.NewHTTPClient(32)
	defer hc.CloseIdleConnections()
	client := &eval.DraftdClient{HTTP: hc, URL: ts.URL}
	replay := func() *eval.Report {
		t.Helper()
		rep, err := eval.Replay(t.Context(), client, data, eval.ReplayOptions{N: 16, Concurrency: 32, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Failures != 0 {
			t.Fatalf("replay: %d failures (%v; first: %s)", rep.Failures, rep.FailureKinds, rep.FirstError)
		}
		return rep
	}
	heap := func() (uint64, int) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse, runtime.NumGoroutine()
	}

	first := replay() // warm: caches, pools and connections reach their size
	heap0, g0 := heap()
	var rounds, requests atomic.Int64
	peak := heap0
	for start := time.Now(); time.Since(start) < dur; {
		rep := replay()
		rounds.Add(1)
		requests.Add(rep.Requests)
		if h, _ := heap(); h > peak {
			peak = h
		}
	}
	heap1, g1 := heap()
	t.Logf("τ %.2f; %d rounds, %d requests after warm-up; HeapInuse %d → %d KiB (peak %d KiB); goroutines %d → %d",
		first.Tau, rounds.Load(), requests.Load(), heap0>>10, heap1>>10, peak>>10, g0, g1)
	if first.Tau <= 1 {
		t.Errorf("τ = %.2f; the Q8_0 drafter should predict its Q4_0 twin often", first.Tau)
	}
	if limit := heap0 + max(heap0/2, 16<<20); peak > limit {
		t.Errorf("HeapInuse grew from %d to a peak of %d bytes (limit %d)", heap0, peak, limit)
	}
	if g1 > g0+8 {
		t.Errorf("goroutines grew from %d to %d", g0, g1)
	}
	fams := scrape(t, ts)
	if v, _ := value(fams, "draftd_kv_cache_bytes"); v > budget {
		t.Errorf("KV bytes in use %v over the budget %d", v, budget)
	}
	if v, _ := value(fams, "draftd_http_requests_total", "code", "500"); v != 0 {
		t.Errorf("%v answers were 500", v)
	}
}

func TestPanicAndInternalErrorAre500(t *testing.T) {
	ts := startHealthy(t, Config{Open: hook(func(ctx context.Context, tokens []int) error {
		switch {
		case tokens[0] == marker && len(tokens) == 1:
			panic("test panic")
		case tokens[0] == marker:
			return fmt.Errorf("%w: test failure", engine.ErrInternal)
		}
		return nil
	})})
	for _, body := range []string{`{"tokens":[500]}`, `{"tokens":[500,1]}`} {
		st, h, b := ts.do("POST", "/draft", body)
		checkError(t, st, h, b, http.StatusInternalServerError, CodeInternal, "internal error")
	}
	ts.draft([]int{1, 2, 3}, 4)
	fams := scrape(t, ts)
	if v, _ := value(fams, "draftd_internal_errors_total"); v != 2 {
		t.Errorf("draftd_internal_errors_total = %v; want 2", v)
	}
	if v, _ := value(fams, "draftd_http_requests_total", "code", "500"); v != 2 {
		t.Errorf("requests with code 500: %v; want 2", v)
	}
}
