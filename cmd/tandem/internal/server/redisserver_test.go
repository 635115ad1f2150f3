package server_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a throwaway redis-server of one test, on a free port,
// without persistence, so that the test may FLUSHDB it, stop it and start
// it again empty without touching the Redis other tests share.
type redisServer struct {
	tb   testing.TB
	port int
	cmd  *exec.Cmd
	// Client talks to it directly (not through any proxy of the test).
	Client *redis.Client
}

// mustRedisServer starts a redis-server on a free port and stops it when
// tb ends.
func mustRedisServer(tb testing.TB) *redisServer {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server is required for this test (apt-get install redis-server): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &redisServer{tb: tb, port: ln.Addr().(*net.TCPAddr).Port}
	ln.Close()
	s.Client = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	tb.Cleanup(func() {
		s.Stop()
		s.Client.Close()
	})
	s.Start()
	return s
}

// Addr returns host:port.
func (s *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server (empty) and waits until it answers.
func (s *redisServer) Start() {
	s.tb.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.Client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server on %s never answered: %v", s.Addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server; its data is gone.
func (s *redisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// FlushDB empties database 0.
func (s *redisServer) FlushDB() {
	s.tb.Helper()
	if err := s.Client.FlushDB(context.Background()).Err(); err != nil {
		s.tb.Fatalf("FLUSHDB of the throwaway Redis: %v", err)
	}
}

func (s *redisServer) String() string { return fmt.Sprintf("redis-server on %s", s.Addr()) }
