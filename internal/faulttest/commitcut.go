// Package faulttest holds tandem's fault-injection tests: a pod's router
// and both engines over the real MariaDB and Redis, each store behind a
// proxy that delays, refuses or cuts its connections, or loses the answer
// to a COMMIT. Its one non-test part is CommitCutter, the MySQL-aware proxy
// that makes a commit ambiguous.
package faulttest

import (
	"bufio"
	"encoding/binary"
	"fmt"
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
	logf   func(format string, args ...any)
	ln     net.Listener

	mu        sync.Mutex
	armedTag  string
	delivered bool
	left      int // COMMITs still to cut
	conns     map[net.Conn]struct{}

	wg     sync.WaitGroup
	closed atomic.Bool
	cuts   atomic.Int64
}

// ListenCommitCutter starts a CommitCutter on 127.0.0.1 (a free port) in
// front of the MySQL server at target. logf, when not nil, is told of each
// cut: the answers the server sent to the cut batch and when the client was
// reset.
func ListenCommitCutter(target string, logf func(format string, args ...any)) (*CommitCutter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &CommitCutter{target: target, logf: logf, ln: ln, conns: map[net.Conn]struct{}{}}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

// Addr returns the proxy's host:port.
func (c *CommitCutter) Addr() string { return c.ln.Addr().String() }

// Arm makes the proxy cut the next COMMIT of a transaction that ran a
// statement whose tag starts with tag ("reserve" matches reserve and
// reserve_slow). With delivered, the server receives and applies the
// COMMIT and only its answer is lost: the client is reset once the server
// has answered the whole batch, so it cannot retry before the COMMIT ran;
// without, the COMMIT never reaches the server. Arm replaces an earlier arming that has not fired.
func (c *CommitCutter) Arm(tag string, delivered bool) { c.ArmTimes(tag, delivered, 1) }

// ArmTimes is Arm for the next n such COMMITs (a store that reruns a
// transaction whose connection broke sends a second one).
func (c *CommitCutter) ArmTimes(tag string, delivered bool, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armedTag, c.delivered, c.left = tag, delivered, n
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
			if c.left--; c.left <= 0 {
				c.armedTag = ""
			}
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

// MySQL protocol constants: the command byte of a text query, the
// capability of result sets ended by an OK packet, the status flag of an
// answer that more results of the same batch follow.
const (
	comQuery           = 0x03
	clientDeprecateEOF = 1 << 24
	serverMoreResults  = 0x0008
)

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
	l := &link{logf: c.logf}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.serverToClient(server, client)
	}()
	c.clientToServer(client, server, l)
	if l.swallow.Load() {
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

// link is the state of one proxied connection that both directions share.
type link struct {
	logf func(format string, args ...any)
	// deprecateEOF is the client's CLIENT_DEPRECATE_EOF capability: result
	// sets end with an OK packet rather than EOF packets. Written before
	// swallow is set, read after.
	deprecateEOF bool
	// swallow is set, before a cut COMMIT goes to the server, when the
	// answer to it must be dropped; nothing else is outstanding then, since
	// the client waits for each answer before it sends its next command.
	swallow atomic.Bool
}

func (l *link) log(format string, args ...any) {
	if l.logf != nil {
		l.logf(format, args...)
	}
}

// serverToClient forwards the server's bytes. Once swallow is set it reads
// the server's answers to the cut batch and resets the client only after
// the last one, the COMMIT's: a batch's earlier statements are answered
// first, and a client reset at their answer could retry while the server
// still runs the rest of the batch, COMMIT included. Then it drains the
// server until it hangs up.
func (l *link) serverToClient(server, client net.Conn) {
	buf := make([]byte, 32<<10)
	var ans *answer
	for {
		n, err := server.Read(buf)
		if n > 0 && ans == nil && l.swallow.Load() {
			ans = &answer{deprecateEOF: l.deprecateEOF}
			_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
		}
		switch {
		case n == 0:
		case ans == nil:
			if _, werr := client.Write(buf[:n]); werr != nil {
				server.Close()
				return
			}
		case !ans.done:
			ans.feed(buf[:n])
			if ans.done {
				l.log("commitcut: the server answered the cut batch (%d results, the last %s): client reset", ans.results, ans.last)
				reset(client)
			}
		}
		if err != nil {
			if ans != nil && !ans.done {
				l.log("commitcut: the server hung up after %d results of the cut batch: %v", ans.results, err)
			}
			client.Close()
			return
		}
	}
}

// clientToServer forwards the client's packets one by one, keeping the text
// of the statements of the current transaction. A text query may hold
// several statements (a batch ending in COMMIT); each is looked at.
func (c *CommitCutter) clientToServer(client, server net.Conn, l *link) {
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
		if header[3] == 1 && n >= 4 {
			// The handshake response: the client's capability flags.
			l.deprecateEOF = binary.LittleEndian.Uint32(packet[4:8])&clientDeprecateEOF != 0
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
						l.swallow.Store(true)
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
		if l.swallow.Load() {
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

// answer follows the server's answer to a multi-statement text query, one
// result per statement, to tell when the last one has arrived: an OK or EOF
// packet without the more-results flag, or an ERR packet (the server stops
// the batch at its first failing statement).
type answer struct {
	deprecateEOF bool

	buf     []byte
	state   int   // inResult, inColumns, inColumnsEOF or inRows
	columns int64 // column definitions still to come
	results int   // results complete so far
	done    bool  // the batch's last result is complete
	last    string
}

const (
	inResult     = iota // the first packet of a result
	inColumns           // column definitions of a result set
	inColumnsEOF        // the EOF packet after them (without CLIENT_DEPRECATE_EOF)
	inRows              // rows of a result set
)

// feed takes the next bytes of the answer.
func (a *answer) feed(b []byte) {
	a.buf = append(a.buf, b...)
	for !a.done && len(a.buf) >= 4 {
		n := int(binary.LittleEndian.Uint32(append(a.buf[:3:3], 0)))
		if len(a.buf) < 4+n {
			return
		}
		a.packet(a.buf[4 : 4+n])
		a.buf = a.buf[4+n:]
	}
}

func (a *answer) packet(p []byte) {
	if len(p) == 0 {
		return
	}
	switch a.state {
	case inResult:
		switch p[0] {
		case 0x00:
			a.end("OK", okStatus(p))
		case 0xff:
			a.end("ERR", 0)
		default:
			a.columns, _ = lenenc(p)
			a.state = inColumns
		}
	case inColumns:
		if a.columns--; a.columns > 0 {
			return
		}
		a.state = inRows
		if !a.deprecateEOF {
			a.state = inColumnsEOF
		}
	case inColumnsEOF:
		a.state = inRows
	case inRows:
		switch {
		case p[0] == 0xff:
			a.end("ERR", 0)
		case p[0] == 0xfe && len(p) < 0xffffff && a.deprecateEOF:
			a.end("result set", okStatus(p))
		case p[0] == 0xfe && len(p) < 9:
			a.end("result set", binary.LittleEndian.Uint16(p[3:5]))
		}
	}
}

// end records a complete result and whether more follow.
func (a *answer) end(kind string, status uint16) {
	a.results++
	a.state = inResult
	more := kind != "ERR" && status&serverMoreResults != 0
	a.done = !more
	a.last = fmt.Sprintf("%s, more results: %v", kind, more)
}

// okStatus returns the status flags of an OK packet (header 0x00 or 0xfe).
func okStatus(p []byte) uint16 {
	_, n := lenenc(p[1:]) // affected rows
	_, m := lenenc(p[1+n:])
	if i := 1 + n + m; len(p) >= i+2 {
		return binary.LittleEndian.Uint16(p[i : i+2])
	}
	return 0
}

// lenenc decodes a length-encoded integer: its value and its size.
func lenenc(p []byte) (int64, int) {
	if len(p) == 0 {
		return 0, 0
	}
	switch p[0] {
	case 0xfc:
		return int64(binary.LittleEndian.Uint16(p[1:3])), 3
	case 0xfd:
		return int64(uint32(p[1]) | uint32(p[2])<<8 | uint32(p[3])<<16), 4
	case 0xfe:
		return int64(binary.LittleEndian.Uint64(p[1:9])), 9
	}
	return int64(p[0]), 1
}
