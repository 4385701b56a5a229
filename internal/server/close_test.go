// Tests over raw sockets of what a client's connection is promised
// (docs/protocol.md, docs/operations.md): a stalled body is answered 408
// and its connection closed.

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
