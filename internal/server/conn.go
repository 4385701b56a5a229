// Connection tracking for the shutdown drain (run.go): which connections
// are busy — those with a request being answered, and those whose next
// request has begun to arrive (net/http itself reports a connection active
// only once its headers are complete, so it would close one mid-headers as
// idle).
//
// It does not decide when a client is gone: a request's context ends when
// its connection ends — reset, closed normally (end of stream) or closed by
// the server — and with it the request's queued or running work (net/http
// reads on after a request and cancels the context on any read result, EOF
// included). TCP cannot tell a half-close from a full close until the
// server writes, so a client that shuts down its write side before it has
// read its answer is treated as gone too, as net/http and nginx treat it.

package server

import (
	"context"
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

// trackedConn remembers whether it is busy.
type trackedConn struct {
	net.Conn
	set     *connSet
	busy    atomic.Bool // a request is being answered (net/http's StateActive until StateIdle)
	partial atomic.Bool // bytes of a next request arrived; net/http has not reported it active yet
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.busy.Load() {
		c.partial.Store(true)
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
