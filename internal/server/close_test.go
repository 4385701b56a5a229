// Tests over raw sockets of what a client's connection is promised
// (docs/protocol.md, docs/operations.md): a stalled body is answered 408
// and its connection closed; a client that closes its connection normally
// cancels its queued or running work, counted as 499.

package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/engine"
)

// rawReq opens a connection to ts and writes one request (with
// Content-Length when body is not empty, after the extra header lines).
func rawReq(t *testing.T, ts *testServer, method, path, body string, header ...string) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	c, br := dialRaw(t, ts)
	var h strings.Builder
	for _, l := range header {
		h.WriteString(l + "\r\n")
	}
	if body != "" || method == "POST" {
		fmt.Fprintf(&h, "Content-Length: %d\r\n", len(body))
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n%s", method, path, h.String(), body)
	return c, br
}

// TestStalledBodyAnswered: a POST /draft whose Content-Length promises 100
// bytes and that sends one gets 408 body_timeout on the wire, and the
// server then closes the connection (the rest of the body is never
// awaited).
func TestStalledBodyAnswered(t *testing.T) {
	ts := startHealthy(t, Config{BodyTimeout: 200 * time.Millisecond})
	for _, path := range []string{"/draft", "/v1/drafts"} {
		c, br := dialRaw(t, ts)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{", path)
		resp, b, err := answerOf(t, c, br, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: stalled body: no answer (%v); want 408 body_timeout", path, err)
		}
		checkError(t, resp.StatusCode, resp.Header, b, http.StatusRequestTimeout, CodeBodyTimeout, "body timeout")
		if !resp.Close {
			t.Errorf("%s: 408 without Connection: close (%v)", path, resp.Header)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s: after the 408: read %v; want io.EOF (the server closes the connection)", path, err)
		}
	}
	// An error answered before the body is read (here: the server is not
	// the route's) closes the connection too, rather than wait for a body.
	c, br := dialRaw(t, ts)
	io.WriteString(c, "PUT /draft HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	resp, _, err := answerOf(t, c, br, 20*time.Second)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("PUT with a stalled body: %v %v; want 405", resp, err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("PUT with a stalled body: after the 405: read %v; want io.EOF", err)
	}
}

// TestNormalCloseCancels: a client that closes its connection normally
// (FIN, not a reset) while its draft runs or waits cancels the work: a
// running draft leaves the batch at the next step boundary (no decode step
// runs for it), a queued one leaves the queue at once, and each counts as
// 499, never as 200.
func TestNormalCloseCancels(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		g := newGate()
		ts := startHealthy(t, Config{Open: g.open(engine.Options{})})
		g.armed.Store(true)
		t.Cleanup(g.release)
		c := rawPost(t, ts, `{"tokens":[1,2,3],"n":64}`)
		select {
		case <-g.entered: // held after the draft's first (prefill) step
		case <-time.After(30 * time.Second):
			t.Fatal("the engine did not start the draft")
		}
		c.Close()
		waitGauge(t, ts, "draftd_http_requests_total", 1, "the closed request counts as 499", "route", "/draft", "code", "499")
		g.release()
		waitGauge(t, ts, "draftd_active_sequences", 0, "the cancelled draft leaves the batch")
		fams := scrape(t, ts)
		// Its first token came from the prefill step the gate held; the
		// other 63 would each need a decode step.
		if v, _ := value(fams, "draftd_decode_tokens_total"); v != 0 {
			t.Errorf("draftd_decode_tokens_total = %v after the client closed; want 0 (no step after the close)", v)
		}
		if v, _ := value(fams, "draftd_http_requests_total", "route", "/draft", "code", "200"); v != 0 {
			t.Errorf("%v closed requests counted as 200", v)
		}
	})
	t.Run("queued", func(t *testing.T) {
		g := newGate()
		ts := startHealthy(t, Config{Open: g.open(engine.Options{MaxBatch: 1})})
		held := g.busy(t, ts)
		q := rawPost(t, ts, `{"tokens":[4,5,6],"n":4}`)
		waitGauge(t, ts, "draftd_queue_depth", 1, "one request queued behind the busy one")
		q.Close()
		waitGauge(t, ts, "draftd_queue_depth", 0, "after the queued client closed")
		waitGauge(t, ts, "draftd_http_requests_total", 1, "the closed request counts as 499", "route", "/draft", "code", "499")
		g.release()
		resp, b, err := answerOf(t, held, bufio.NewReader(held), 30*time.Second)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the busy request: %v %v %s; want 200", resp, err, b)
		}
	})
}
