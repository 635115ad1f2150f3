// Package faultproxy is a TCP proxy on loopback for tests and benchmarks: it
// forwards connections to a real server and can add latency in each
// direction, refuse new connections, and cut (reset) the open ones, so a
// test can take a store away from tandem and give it back.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards every connection accepted on Addr() to a target address.
type Proxy struct {
	target string
	ln     net.Listener
	dial   func(network, addr string, timeout time.Duration) (net.Conn, error)

	delay   atomic.Int64 // one-way delay in nanoseconds
	refuse  atomic.Bool
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool
	Accepts atomic.Int64 // connections accepted so far

	logf atomic.Pointer[func(format string, args ...any)]
}

// SetLogf makes the proxy tell logf what becomes of each connection
// (refused, cut, its server, each direction's end), by the client's port.
func (p *Proxy) SetLogf(logf func(format string, args ...any)) { p.logf.Store(&logf) }

func (p *Proxy) log(format string, args ...any) {
	if f := p.logf.Load(); f != nil {
		(*f)(format, args...)
	}
}

func port(c net.Conn) string {
	_, port, _ := net.SplitHostPort(c.RemoteAddr().String())
	return port
}

// Listen starts a proxy on 127.0.0.1 (a free port) in front of target.
func Listen(target string) (*Proxy, error) {
	return listen(target, net.DialTimeout)
}

func listen(target string, dial func(network, addr string, timeout time.Duration) (net.Conn, error)) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of bytes by d in each direction (so a round
// trip costs 2d more), as a datacenter hop would.
func (p *Proxy) SetLatency(d time.Duration) { p.delay.Store(int64(d)) }

// Refuse makes the proxy close new connections at once (true) or accept
// them again (false).
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Cut resets every open connection, also one accepted whose dial to the
// target is still under way; with Refuse(true) first, the server is gone
// until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.log("cut %s", c.RemoteAddr())
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		c.Close()
		delete(p.conns, c) // serve sees it was cut
	}
}

// Down refuses new connections and cuts the open ones.
func (p *Proxy) Down() {
	p.Refuse(true)
	p.Cut()
}

// Restore accepts connections again.
func (p *Proxy) Restore() { p.Refuse(false) }

// Close stops the proxy and cuts every connection.
func (p *Proxy) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

// trackServer tracks server unless client was cut meanwhile.
func (p *Proxy) trackServer(client, server net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.conns[client]; !ok {
		return false
	}
	p.conns[server] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.Accepts.Add(1)
		if !p.admit(c) {
			p.log("refused %s", port(c))
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// admit tracks c unless the proxy refuses, in one step under mu: a Cut
// after it finds c (also while serve still dials the target), and a Down
// before it refuses c.
func (p *Proxy) admit(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse.Load() {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := p.dial("tcp", p.target, 5*time.Second)
	if err != nil {
		p.log("client %s: dial: %v", port(client), err)
		p.untrack(client)
		client.Close()
		return
	}
	if !p.trackServer(client, server) {
		p.log("client %s: cut while dialing", port(client))
		server.Close() // the client was cut while dialing
		return
	}
	p.log("client %s: server %s", port(client), server.LocalAddr())
	defer func() {
		p.untrack(client)
		p.untrack(server)
		client.Close()
		server.Close()
	}()
	done := make(chan struct{}, 2)
	go func() {
		p.log("client %s: to server ended: %v", port(client), p.pipe(server, client))
		done <- struct{}{}
	}()
	go func() {
		p.log("client %s: to client ended: %v", port(client), p.pipe(client, server))
		done <- struct{}{}
	}()
	<-done
	client.Close()
	server.Close()
	<-done
}

type chunk struct {
	at   time.Time
	data []byte
}

// pipe copies src to dst, holding each chunk until its delay has passed
// (to within tens of microseconds on Linux: preciseWaiter); chunks stay in
// order and the delay is pipelined, not added per chunk.
func (p *Proxy) pipe(dst, src net.Conn) error {
	queue := make(chan chunk, 1024)
	var readErr error
	go func() {
		defer close(queue)
		// One read buffer; each chunk keeps a copy of just what was read
		// (a few hundred bytes for most packets), not a buffer of its own.
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{at: time.Now().Add(time.Duration(p.delay.Load())), data: slices.Clone(buf[:n])}
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	// The first delayed chunk sets up the precise waiter (it locks this
	// goroutine's thread): a proxy without latency keeps plain goroutines.
	var wait func(time.Time)
	for c := range queue {
		if time.Until(c.at) > 0 {
			if wait == nil {
				wait = preciseWaiter()
			}
			wait(c.at)
		}
		if _, err := dst.Write(c.data); err != nil {
			src.Close()
			for range queue { // drain so the reader can exit
			}
			return fmt.Errorf("write: %w", err)
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	return fmt.Errorf("read: %w", readErr) // the queue is closed: readErr is set
}

// ErrClosed is returned by operations on a closed proxy.
var ErrClosed = errors.New("faultproxy: closed")

var _ io.Closer = (*Proxy)(nil)
