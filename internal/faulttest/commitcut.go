// Package faulttest holds tandem's fault-injection tests: a pod's router
// and both engines over the real MariaDB and Redis, each store behind a
// proxy that delays, refuses or cuts its connections, or loses the answer
// to a COMMIT. Its one non-test part is CommitCutter, the MySQL-aware proxy
// that makes a commit ambiguous.
package faulttest

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CommitCutter is a TCP proxy in front of a MySQL server that forwards every
// byte both ways until it is armed. Armed with a caller tag, it watches the
// client's COM_QUERY packets and, at the COMMIT of the next transaction that
// ran a statement carrying /* conn_tag='TAG...' */, either lets the COMMIT reach
// the server and drops the server's answer (the transaction is durable but
// the client cannot know), or drops the COMMIT itself (the server rolls the
// transaction back when the connection goes); then it resets both sides.
type CommitCutter struct {
	target string
	ln     net.Listener

	mu        sync.Mutex
	armedTag  string
	delivered bool
	conns     map[net.Conn]struct{}

	wg     sync.WaitGroup
	closed atomic.Bool
	cuts   atomic.Int64
}

// ListenCommitCutter starts a CommitCutter on 127.0.0.1 (a free port) in
// front of the MySQL server at target.
func ListenCommitCutter(target string) (*CommitCutter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &CommitCutter{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

// Addr returns the proxy's host:port.
func (c *CommitCutter) Addr() string { return c.ln.Addr().String() }

// Arm makes the proxy cut the next COMMIT of a transaction that ran a
// statement whose tag starts with tag ("reserve" matches reserve and
// reserve_slow). With delivered, the server receives and applies the
// COMMIT and only its answer is lost; without, the COMMIT never reaches the
// server. Arm replaces an earlier arming that has not fired.
func (c *CommitCutter) Arm(tag string, delivered bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armedTag, c.delivered = tag, delivered
}

// Armed reports whether an arming is still waiting for its COMMIT.
func (c *CommitCutter) Armed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armedTag != ""
}

// Cuts returns how many COMMITs the proxy has cut.
func (c *CommitCutter) Cuts() int64 { return c.cuts.Load() }

// Close stops the proxy, resets every connection and waits for its
// goroutines. Safe to call twice.
func (c *CommitCutter) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	err := c.ln.Close()
	c.mu.Lock()
	for conn := range c.conns {
		reset(conn)
	}
	c.mu.Unlock()
	c.wg.Wait()
	return err
}

// fire consumes the arming when the finished transaction ran a statement
// with the armed tag; it says whether to cut and whether the COMMIT goes on.
func (c *CommitCutter) fire(txText []string) (cut, delivered bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armedTag == "" {
		return false, false
	}
	marker := "conn_tag='" + c.armedTag
	for _, q := range txText {
		if strings.Contains(q, marker) {
			c.armedTag = ""
			c.cuts.Add(1)
			return true, c.delivered
		}
	}
	return false, false
}

func (c *CommitCutter) track(conn net.Conn, on bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		if c.closed.Load() {
			return false
		}
		c.conns[conn] = struct{}{}
	} else {
		delete(c.conns, conn)
	}
	return true
}

func (c *CommitCutter) accept() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.wg.Add(1)
		go c.serve(conn)
	}
}

// reset closes conn with an RST rather than a FIN, as a dying peer would.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}

// comQuery is the MySQL protocol's command byte of a text query.
const comQuery = 0x03

func (c *CommitCutter) serve(client net.Conn) {
	defer c.wg.Done()
	server, err := net.DialTimeout("tcp", c.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !c.track(client, true) || !c.track(server, true) {
		reset(client)
		reset(server)
		return
	}
	defer func() {
		c.track(client, false)
		c.track(server, false)
		client.Close()
		server.Close()
	}()
	// swallow is set, before a cut COMMIT goes to the server, when the
	// answer to it must be dropped; nothing else is outstanding then, since
	// the client waits for each answer before it sends its next command.
	var swallow atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		serverToClient(server, client, &swallow)
	}()
	c.clientToServer(client, server, &swallow)
	if swallow.Load() {
		// Let the server finish the command, COMMIT included: it reads
		// EOF only after it, and its answer is drained, never delivered.
		if tc, ok := server.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	} else {
		server.Close()
	}
	<-done
}

// serverToClient forwards the server's bytes; once swallow is set it resets
// the client and drains the server's answer until the server hangs up.
func serverToClient(server, client net.Conn, swallow *atomic.Bool) {
	buf := make([]byte, 32<<10)
	cut := false
	for {
		n, err := server.Read(buf)
		if n > 0 && !cut && swallow.Load() {
			cut = true
			reset(client)
			_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
		}
		if n > 0 && !cut {
			if _, werr := client.Write(buf[:n]); werr != nil {
				server.Close()
				return
			}
		}
		if err != nil {
			client.Close()
			return
		}
	}
}

// clientToServer forwards the client's packets one by one, keeping the text
// of the statements of the current transaction. A text query may hold
// several statements (a batch ending in COMMIT); each is looked at.
func (c *CommitCutter) clientToServer(client, server net.Conn, swallow *atomic.Bool) {
	r := bufio.NewReaderSize(client, 64<<10)
	var txText []string
	header := make([]byte, 4)
	for {
		if _, err := io.ReadFull(r, header); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(append(header[:3:3], 0)))
		packet := make([]byte, 4+n)
		copy(packet, header)
		if _, err := io.ReadFull(r, packet[4:]); err != nil {
			return
		}
		if n > 0 && packet[4] == comQuery {
		statements:
			for _, st := range strings.Split(string(packet[5:]), ";") {
				if len(st) > 256 {
					st = st[:256]
				}
				switch body := strings.ToUpper(stripComments(st)); {
				case body == "":
				case strings.HasPrefix(body, "START TRANSACTION"), strings.HasPrefix(body, "BEGIN"):
					txText = append(txText[:0], st)
				case body == "ROLLBACK":
					txText = txText[:0]
				case body == "COMMIT":
					cut, delivered := c.fire(append(txText, st))
					txText = txText[:0]
					if cut && !delivered {
						reset(client)
						reset(server)
						return
					}
					if cut {
						swallow.Store(true)
						break statements
					}
				default:
					txText = append(txText, st)
				}
			}
		}
		if _, err := server.Write(packet); err != nil {
			client.Close()
			return
		}
		if swallow.Load() {
			return
		}
	}
}

// stripComments drops /* ... */ comments and surrounding space.
func stripComments(st string) string {
	for {
		i := strings.Index(st, "/*")
		if i < 0 {
			break
		}
		j := strings.Index(st[i:], "*/")
		if j < 0 {
			break
		}
		st = st[:i] + st[i+j+2:]
	}
	return strings.TrimSpace(st)
}
