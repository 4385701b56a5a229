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
//
// The same wrapper tells the shutdown drain (run.go) which connections are
// busy: those with a request being answered, and those whose next request
// has begun to arrive (net/http itself reports a connection active only once
// its headers are complete, so it would close one mid-headers as idle).

package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// trackListener wraps every accepted connection in a trackedConn of set.
// Its Close may be called more than once (Run stops accepting before
// net/http's own Close).
type trackListener struct {
	net.Listener
	set  *connSet
	once sync.Once
	err  error
}

func (l *trackListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, set: l.set}
	l.set.add(tc)
	return tc, nil
}

func (l *trackListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// trackedConn remembers how its reads ended, and whether it is busy.
type trackedConn struct {
	net.Conn
	set     *connSet
	eof     atomic.Bool // a read returned io.EOF: the peer shut down its write side
	busy    atomic.Bool // a request is being answered (net/http's StateActive until StateIdle)
	partial atomic.Bool // bytes of a next request arrived; net/http has not reported it active yet
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.busy.Load() {
		c.partial.Store(true)
	}
	if errors.Is(err, io.EOF) {
		c.eof.Store(true)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.set.remove(c)
	return err
}

// connSet is every open connection, for the drain.
type connSet struct {
	mu      sync.Mutex
	conns   map[*trackedConn]struct{}
	changed chan struct{} // closed and replaced when a connection turns idle or closes
}

func newConnSet() *connSet {
	return &connSet{conns: map[*trackedConn]struct{}{}, changed: make(chan struct{})}
}

func (s *connSet) add(c *trackedConn) {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
}

func (s *connSet) remove(c *trackedConn) {
	s.mu.Lock()
	if _, ok := s.conns[c]; ok {
		delete(s.conns, c)
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
}

// connState is the http.Server's ConnState hook: a connection is busy from
// the moment its request's headers are read until its answer is written
// (idle) or it closes.
func (s *connSet) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*trackedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateActive:
		c.busy.Store(true)
		c.partial.Store(false)
	case http.StateIdle:
		c.busy.Store(false)
		c.partial.Store(false)
		s.mu.Lock()
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		s.remove(c)
	}
}

// busy counts the connections answering a request or receiving one.
func (s *connSet) busy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busyLocked()
}

func (s *connSet) busyLocked() int {
	n := 0
	for c := range s.conns {
		if c.busy.Load() || c.partial.Load() {
			n++
		}
	}
	return n
}

// waitQuiet waits until no connection is busy (true) or ctx ends (false).
// A connection whose request had begun to arrive counts as busy until it is
// answered; one that is idle does not.
func (s *connSet) waitQuiet(ctx context.Context) bool {
	for {
		s.mu.Lock()
		n, ch := s.busyLocked(), s.changed
		s.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-ch: // every way to stop being busy (idle, closed) signals
		case <-ctx.Done():
			return false
		}
	}
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
