// Tests over raw sockets of the engine's queue bounds as a client meets
// them (docs/operations.md): the unstarted items of an admitted
// /v1/drafts call count against --max-queue, and --queue-timeout holds for
// the request at the head of the queue.

package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/engine"
)

// TestBatchRestCountsAgainstQueue: with one batch slot and --max-queue 4, a
// 4-item /v1/drafts call is admitted (its first item runs, held by the
// gate) and its other 3 items wait: they count against the queue, so a
// 2-item call is refused with 503 queue_full at once, a single draft still
// fits, and the queue depth never exceeds 4.
func TestBatchRestCountsAgainstQueue(t *testing.T) {
	g := newGate()
	ts := startHealthy(t, Config{Open: g.open(engine.Options{MaxBatch: 1, MaxQueue: 4})})
	g.armed.Store(true)
	t.Cleanup(g.release)
	item := func(i int) string { return fmt.Sprintf(`{"id":"%d","tokens":[%d,2,3],"n":4}`, i, 10+i) }
	batch, batchR := rawReq(t, ts, "POST", "/v1/drafts", `{"requests":[`+item(0)+","+item(1)+","+item(2)+","+item(3)+`]}`)
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not start the batch")
	}
	waitGauge(t, ts, "draftd_queue_depth", 3, "the batch's three unstarted items")

	over, overR := rawReq(t, ts, "POST", "/v1/drafts", `{"requests":[`+item(4)+","+item(5)+`]}`)
	resp, b, err := answerOf(t, over, overR, 10*time.Second)
	if err != nil {
		v, _ := value(scrape(t, ts), "draftd_queue_depth")
		t.Fatalf("2 items beside 3 waiting with --max-queue 4: no answer (%v), queue depth %v; want 503 queue_full", err, v)
	}
	checkError(t, resp.StatusCode, resp.Header, b, http.StatusServiceUnavailable, CodeQueueFull, "queue is full")

	one, oneR := rawReq(t, ts, "POST", "/draft", `{"tokens":[7,8,9],"n":4}`)
	waitGauge(t, ts, "draftd_queue_depth", 4, "a single draft fills the queue")
	g.release()
	for _, a := range []struct {
		c  net.Conn
		br *bufio.Reader
	}{{batch, batchR}, {one, oneR}} {
		resp, b, err := answerOf(t, a.c, a.br, 30*time.Second)
		if err != nil || resp.StatusCode != http.StatusOK || strings.Contains(string(b), `"error"`) {
			t.Fatalf("after the gate opened: %v %v %s; want 200 with drafts", resp, err, b)
		}
	}
}

// stepper holds the engine after each forward step while on, announcing
// the step on stepped and waiting for next.
type stepper struct {
	engine.Observer
	on      atomic.Bool
	stepped chan struct{}
	next    chan struct{}
}

func (g *stepper) Step(batch, prefill, decode int) {
	g.Observer.Step(batch, prefill, decode)
	if g.on.Load() {
		g.stepped <- struct{}{}
		<-g.next
	}
}

// TestQueueTimeoutAtHead: with one batch slot held by a long draft that
// goes on step by step, every waiting request — the head of the queue
// included — gets 503 queue_timeout; none waits past --queue-timeout.
func TestQueueTimeoutAtHead(t *testing.T) {
	g := &stepper{stepped: make(chan struct{}), next: make(chan struct{})}
	ts := startHealthy(t, Config{Open: func(ctx context.Context, obs engine.Observer) (Backend, error) {
		g.Observer = obs
		return tinyOpen(engine.Options{MaxBatch: 1, QueueTimeout: 2 * time.Second}, nil)(ctx, g)
	}})
	g.on.Store(true)
	t.Cleanup(func() { g.on.Store(false); close(g.next) })
	long := rawPost(t, ts, `{"tokens":[1,2,3],"n":64}`)
	defer long.Close()
	<-g.stepped // the long draft's first step
	var waiting []*net.TCPConn
	for i := range 3 {
		waiting = append(waiting, rawPost(t, ts, fmt.Sprintf(`{"tokens":[%d,5,6],"n":4}`, 20+i)))
	}
	waitGauge(t, ts, "draftd_queue_depth", 3, "three requests queued behind the long draft")
	g.next <- struct{}{} // one more step: the loop looks at the queue before it
	<-g.stepped
	for i, c := range waiting {
		resp, b, err := answerOf(t, c, bufio.NewReader(c), 20*time.Second)
		if err != nil {
			t.Fatalf("waiting request %d: no answer (%v); want 503 queue_timeout", i, err)
		}
		checkError(t, resp.StatusCode, resp.Header, b, http.StatusServiceUnavailable, CodeQueueTimeout, "queue timeout")
	}
}
