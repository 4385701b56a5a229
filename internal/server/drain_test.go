// Tests of issue 20 over raw sockets: a client that resets while queued
// leaves the queue at once; a request whose own KV need exceeds the budget
// is refused before admission; and the drain on shutdown — what arrives on
// open connections is answered 503 shutting_down with Connection: close,
// and a drain that does not finish in time makes Run fail.

package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/model"
)

// gateObserver holds the engine goroutine inside its next forward step once
// armed, until gate is closed: the batch is busy for as long as a test
// needs, with no sleeps.
type gateObserver struct {
	engine.Observer
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (g *gateObserver) release() { g.once.Do(func() { close(g.gate) }) }

func newGate() *gateObserver {
	return &gateObserver{entered: make(chan struct{}, 1), gate: make(chan struct{})}
}

func (g *gateObserver) Step(batch, prefill, decode int) {
	g.Observer.Step(batch, prefill, decode)
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.gate
	}
}

// open is tinyOpen(opt) with the engine's observer wrapped by g.
func (g *gateObserver) open(opt engine.Options) func(context.Context, engine.Observer) (Backend, error) {
	return func(ctx context.Context, obs engine.Observer) (Backend, error) {
		g.Observer = obs
		return tinyOpen(opt, nil)(ctx, g)
	}
}

// busy arms the gate and sends a request that occupies the batch; it
// returns once the engine is held inside that request's forward step.
func (g *gateObserver) busy(t *testing.T, ts *testServer) *net.TCPConn {
	t.Helper()
	g.armed.Store(true)
	t.Cleanup(g.release) // before the server's stop, even when the test fails
	c := rawPost(t, ts, `{"tokens":[1,2,3],"n":4}`)
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not start the busy request")
	}
	return c
}

// waitGauge polls /metrics until the gauge name equals want.
func waitGauge(t *testing.T, ts *testServer, name string, want float64, what string, match ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, _ := value(scrape(t, ts), name, match...)
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s%v = %v 5 s on; want %v", what, name, match, v, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// answerOf reads one answer from c within d; ok is false when none came.
func answerOf(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) (resp *http.Response, body []byte, err error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, err
}

// TestResetLeavesQueue: with one batch slot held and a queue of 4, four
// queued clients that reset their connections leave the queue at once (its
// depth drops to 0, each counts as 499), and the next request is queued,
// not refused with 503 queue_full.
func TestResetLeavesQueue(t *testing.T) {
	g := newGate()
	ts := startHealthy(t, Config{Open: g.open(engine.Options{MaxBatch: 1, MaxQueue: 4})})
	held := g.busy(t, ts)
	var queued []*net.TCPConn
	for i := range 4 {
		queued = append(queued, rawPost(t, ts, fmt.Sprintf(`{"tokens":[%d,5,6],"n":4}`, 10+i)))
	}
	waitGauge(t, ts, "draftd_queue_depth", 4, "four requests queued behind the busy one")
	for _, c := range queued {
		c.SetLinger(0) // close with a reset
		c.Close()
	}
	waitGauge(t, ts, "draftd_queue_depth", 0, "after the four queued clients reset")
	waitGauge(t, ts, "draftd_http_requests_total", 4, "the resets are counted", "route", "/draft", "code", "499")

	next := rawPost(t, ts, `{"tokens":[7,8,9],"n":4}`)
	waitGauge(t, ts, "draftd_queue_depth", 1, "the next request is queued")
	g.release()
	for _, c := range []*net.TCPConn{held, next} {
		resp, b, err := answerOf(t, c, bufio.NewReader(c), 30*time.Second)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("after the gate opened: %v %v %s; want 200", resp, err, b)
		}
	}
}

// TestKVBudgetBeforeAdmission: a request whose own context and draft need
// more KV blocks than the whole budget holds is answered 400
// context_over_kv_budget at once, also while the batch is busy (it would
// otherwise queue, and time out with a retryable 503).
func TestKVBudgetBeforeAdmission(t *testing.T) {
	m, err := model.Load(tinyModel, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	block := int64(m.BlockBytes())
	m.Close()
	const blocks = 4 // the budget: 4 blocks of model.BlockSize positions
	g := newGate()
	ts := startHealthy(t, Config{Open: g.open(engine.Options{MaxBatch: 1, KVCacheBytes: blocks * block})})
	held := g.busy(t, ts)
	over := seq(3, blocks*model.BlockSize) // with n = 4: more positions than the budget's blocks hold
	c := rawPost(t, ts, `{"tokens":`+idsJSON(over)+`,"n":4}`)
	resp, b, err := answerOf(t, c, bufio.NewReader(c), 10*time.Second)
	if err != nil {
		t.Fatalf("no answer within 10 s while the batch was busy (%v); want 400 context_over_kv_budget at once", err)
	}
	checkError(t, resp.StatusCode, resp.Header, b, http.StatusBadRequest, CodeContextOverKV, "budget")
	// One that fits is still served once the batch frees.
	fits := rawPost(t, ts, `{"tokens":`+idsJSON(seq(3, 2*model.BlockSize))+`,"n":4}`)
	g.release()
	for _, c := range []*net.TCPConn{held, fits} {
		resp, b, err := answerOf(t, c, bufio.NewReader(c), 30*time.Second)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("after the gate opened: %v %v %s; want 200", resp, err, b)
		}
	}
}

// notify is a slog handler that closes ch on the first record whose
// message is msg.
type notify struct {
	slog.Handler
	msg  string
	ch   chan struct{}
	once *sync.Once
}

func (n notify) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == n.msg {
		n.once.Do(func() { close(n.ch) })
	}
	return n.Handler.Handle(ctx, r)
}

func (n notify) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || n.Handler.Enabled(ctx, l)
}

func (n notify) WithAttrs(a []slog.Attr) slog.Handler {
	n.Handler = n.Handler.WithAttrs(a)
	return n
}

// drainServer runs a server whose drafts starting with marker wait in a
// hook until gate closes; draining is closed when shutdown begins.
func drainServer(t *testing.T, cfg Config, gate chan struct{}, entered chan struct{}) (ts *testServer, draining chan struct{}) {
	draining = make(chan struct{})
	cfg.Logger = slog.New(notify{Handler: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}),
		msg: "shutting down", ch: draining, once: &sync.Once{}})
	cfg.Open = hook(func(ctx context.Context, tokens []int) error {
		if tokens[0] != marker {
			return nil
		}
		entered <- struct{}{}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return startHealthy(t, cfg), draining
}

func dialRaw(t *testing.T, ts *testServer) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn), bufio.NewReader(c)
}

func postText(body string) string {
	return fmt.Sprintf("POST /draft HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// checkDrainAnswer: a 503 shutting_down with Retry-After and
// Connection: close, after which the server closes the connection.
func checkDrainAnswer(t *testing.T, what string, c net.Conn, br *bufio.Reader) {
	t.Helper()
	resp, b, err := answerOf(t, c, br, 10*time.Second)
	if err != nil {
		t.Errorf("%s: no answer during the drain: %v; want 503 shutting_down", what, err)
		return
	}
	checkError(t, resp.StatusCode, resp.Header, b, http.StatusServiceUnavailable, CodeShuttingDown, "shutting down")
	if !resp.Close { // http.ReadResponse turns Connection: close into Close
		t.Errorf("%s: answer without Connection: close (%v)", what, resp.Header)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("%s: connection still open after Connection: close (%v)", what, err)
	}
}

// TestDrain: during the drain of a graceful shutdown — while a request is
// in flight — a request on a keep-alive connection that was idle at the
// signal, and one whose headers were still arriving, are answered 503
// shutting_down with Connection: close; the in-flight request gets its draft
// (with Connection: close: a request pipelined behind it is not read, as the
// header tells the client); Run returns nil.
func TestDrain(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	ts, draining := drainServer(t, Config{}, gate, entered)

	idle, idleR := dialRaw(t, ts)
	io.WriteString(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _, err := answerOf(t, idle, idleR, 10*time.Second); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("health on the keep-alive connection: %v %v", resp, err)
	}
	partial, partialR := dialRaw(t, ts)
	io.WriteString(partial, "POST /draft HTTP/1.1\r\nHost: x\r\n")
	inflight, inflightR := dialRaw(t, ts)
	io.WriteString(inflight, postText(`{"tokens":[500,1,2],"n":4}`)+"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	<-draining

	io.WriteString(idle, postText(`{"tokens":[1,2,3],"n":4}`))
	checkDrainAnswer(t, "request on a connection idle at the signal", idle, idleR)
	body := `{"tokens":[1,2,3],"n":4}`
	fmt.Fprintf(partial, "Content-Length: %d\r\n\r\n%s", len(body), body)
	checkDrainAnswer(t, "request whose headers were arriving at the signal", partial, partialR)
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a request was in flight", err)
	default:
	}

	close(gate)
	resp, b, err := answerOf(t, inflight, inflightR, 30*time.Second)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("in-flight request: %v %v %s; want 200", resp, err, b)
	}
	if d := decodeDraft(t, b); len(d) != 4 {
		t.Errorf("in-flight draft %v; want 4 tokens", d)
	}
	if !resp.Close {
		t.Errorf("in-flight answer during the drain without Connection: close")
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run: %v; want nil after a drain that finished", err)
	}
}

// TestDrainTimeout: a request still in flight when --shutdown-timeout ends
// is cut off, and Run reports the incomplete drain (draftd serve exits 1).
func TestDrainTimeout(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	defer close(gate)
	ts, draining := drainServer(t, Config{ShutdownTimeout: 200 * time.Millisecond}, gate, entered)
	c, br := dialRaw(t, ts)
	io.WriteString(c, postText(`{"tokens":[500,1,2],"n":4}`))
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	<-draining
	err := <-stopped
	if !errors.Is(err, ErrShutdownIncomplete) {
		t.Errorf("Run: %v; want ErrShutdownIncomplete", err)
	}
	ts.err = nil // seen; the cleanup's stop returns it again
	if resp, _, err := answerOf(t, c, br, 10*time.Second); err == nil && resp.StatusCode == http.StatusOK {
		t.Errorf("the cut-off request got 200")
	}
}
