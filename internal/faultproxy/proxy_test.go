package faultproxy_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/faultproxy"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string) (string, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

func TestProxy(t *testing.T) {
	p, err := faultproxy.Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	t.Run("Forwards", func(t *testing.T) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for _, msg := range []string{"a", "bb", "ccc"} {
			got, err := roundTrip(c, r, msg)
			if err != nil || got != msg {
				t.Fatalf("got %q, %v, want %q", got, err, msg)
			}
		}
	})

	t.Run("Latency", func(t *testing.T) {
		p.SetLatency(20 * time.Millisecond)
		defer p.SetLatency(0)
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		start := time.Now()
		if got, err := roundTrip(c, r, "slow"); err != nil || got != "slow" {
			t.Fatalf("got %q, %v, want slow", got, err)
		}
		// A lower bound only: the delay must have been applied both ways.
		if el := time.Since(start); el < 40*time.Millisecond {
			t.Errorf("round trip took %s, want at least 40ms with 20ms each way", el)
		}
	})

	t.Run("CutAndRestore", func(t *testing.T) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		if _, err := roundTrip(c, r, "before"); err != nil {
			t.Fatal(err)
		}
		p.Down()
		if _, err := roundTrip(c, r, "during"); err == nil {
			t.Fatal("got an answer on a cut connection, want an error")
		}
		c2, err := net.Dial("tcp", p.Addr())
		if err == nil {
			r2 := bufio.NewReader(c2)
			if _, err := roundTrip(c2, r2, "refused"); err == nil {
				t.Fatal("got an answer while refusing, want an error")
			}
			c2.Close()
		}
		p.Restore()
		c3, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c3.Close()
		if got, err := roundTrip(c3, bufio.NewReader(c3), "after"); err != nil || got != "after" {
			t.Fatalf("after restore: got %q, %v, want after", got, err)
		}
	})
}

// TestDownWhileDialing: a connection accepted before Down whose dial to
// the target was still under way when Down cut the open ones is cut too,
// not served once the dial ends (a pooled client would keep it, and the
// store would answer while "down").
func TestDownWhileDialing(t *testing.T) {
	dialing, release := make(chan struct{}), make(chan struct{})
	p, err := faultproxy.ListenDialing(echoServer(t), func(network, addr string, timeout time.Duration) (net.Conn, error) {
		close(dialing)
		<-release
		return net.DialTimeout(network, addr, timeout)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-dialing // accepted, not refused, not yet connected to the target
	p.Down()
	close(release)
	if got, err := roundTrip(c, bufio.NewReader(c), "through"); err == nil {
		t.Fatalf("got %q through a connection accepted before Down, want it cut", got)
	}
}
