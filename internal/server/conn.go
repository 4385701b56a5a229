// Connection tracking for POST /draft's cancellation rule: a client that
// half-closes its connection (shuts down its write side after a complete
// request, still reading) is not a client that went away.
//
// net/http reads on after a request body ends and cancels the request's
// context on any read result — io.EOF included, which is all a half-close
// is. A half-close and a full close both arrive as EOF (TCP cannot tell
// them apart until the server writes), so draftd treats EOF as "the client
// finished sending": the draft runs to the end and is written (a client
// that had fully closed sees nothing, and its work was bounded by
// --max-draft-len). Any other read failure — a reset, the server closing
// the connection — cancels the work at once. This file wraps the listener
// so that the handler can tell which of the two ended the read.

package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// trackListener wraps every accepted connection in a trackedConn.
type trackListener struct{ net.Listener }

func (l trackListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: c}, nil
}

// trackedConn remembers how its reads ended.
type trackedConn struct {
	net.Conn
	eof atomic.Bool // a read returned io.EOF: the peer shut down its write side
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if errors.Is(err, io.EOF) {
		c.eof.Store(true)
	}
	return n, err
}

// CloseWrite keeps net/http's graceful close (it half-closes TCP
// connections before closing them) working through the wrapper.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

type connKey struct{}

// withConn is the http.Server's ConnContext: it makes the connection
// reachable from its requests.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// workContext is the context of the work for r: it ends when the handler
// returns or when the connection fails, but not when the client merely
// half-closed it (see the file comment). stop must be called.
func workContext(r *http.Request) (ctx context.Context, stop func()) {
	tc, _ := r.Context().Value(connKey{}).(*trackedConn)
	if tc == nil {
		return r.Context(), func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	unwatch := context.AfterFunc(r.Context(), func() {
		if !tc.eof.Load() {
			cancel()
		}
	})
	return ctx, func() { unwatch(); cancel() }
}
