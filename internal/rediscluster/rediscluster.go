// Package rediscluster starts a throwaway Redis Cluster from the installed
// redis-server and redis-cli for tests: three masters (and optionally one
// replica each) on free ports, no persistence, data in a temporary
// directory, joined with `redis-cli --cluster create` and ready when every
// node reports cluster_state:ok. A missing redis-server or redis-cli is an
// error, never a skip: `make test` and CI run the cluster tests for real.
//
// Start one cluster per test binary (TestMain) and give each test its own
// key prefix (MustClient): the cluster takes a few seconds to form.
package rediscluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/internal/scratch"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/redisres"
)

// Options shape a cluster.
type Options struct {
	// Masters is the number of masters (default 3, the fewest Redis allows).
	Masters int
	// Replicas gives each master this many replicas (0 or more).
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a node may be silent
	// before it is considered failing, hence the failover time (default 2s).
	NodeTimeout time.Duration
}

// Cluster is a running local Redis Cluster. Close stops it and removes its
// directory.
type Cluster struct {
	dir  string
	opts Options

	mu    sync.Mutex
	nodes []*node // masters first, as created
}

type node struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts and joins a cluster. It fails when redis-server or
// redis-cli is not installed.
func Start(opts Options) (*Cluster, error) {
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = 2 * time.Second
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("rediscluster: %s is required for the Redis Cluster tests (apt-get install redis-server): %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "tandem-rediscluster-")
	if err != nil {
		return nil, fmt.Errorf("rediscluster: %w", err)
	}
	c := &Cluster{dir: dir, opts: opts}
	if err := c.start(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// MustStart starts a cluster that stops when tb ends.
func MustStart(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	c, err := Start(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func (c *Cluster) start() error {
	n := c.opts.Masters * (1 + c.opts.Replicas)
	for attempt := 0; ; attempt++ {
		ports, err := freePorts(n)
		if err != nil {
			return err
		}
		err = c.startNodes(ports)
		if err == nil {
			break
		}
		c.stopNodes()
		if attempt == 3 {
			return err
		}
		// A port taken between the probe and redis-server's bind: try
		// other ports.
	}
	args := []string{"--cluster", "create"}
	for _, nd := range c.nodes {
		args = append(args, nd.addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(c.opts.Replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rediscluster: redis-cli --cluster create: %w\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		return err
	}
	return c.waitStreaming(ctx)
}

// waitStreaming waits until every master streams its writes to all its
// replicas. A replica reports its link up once it has loaded the master's
// snapshot, but the master sends it the writes that followed only after
// the replica's first REPLCONF ACK (up to a second later): a master killed
// in between loses them all, not just its last writes as a crash of a
// master in steady state does. So each master makes a write (a FLUSHALL of
// the new, empty cluster: it is always replicated and needs no key of the
// master's slots) and WAIT returns once the replicas have acknowledged it,
// which they can only do streaming.
func (c *Cluster) waitStreaming(ctx context.Context) error {
	if c.opts.Replicas == 0 {
		return nil
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		return err
	}
	for _, addr := range masters {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		for {
			var n int64
			err := rdb.FlushAll(ctx).Err()
			if err == nil {
				n, err = rdb.Wait(ctx, c.opts.Replicas, time.Second).Result()
			}
			if err == nil && n >= int64(c.opts.Replicas) {
				break
			}
			if ctx.Err() != nil {
				rdb.Close()
				return fmt.Errorf("rediscluster: the replicas of %s do not acknowledge its writes (logs in %s): %d, %v", addr, c.dir, n, err)
			}
		}
		rdb.Close()
	}
	return nil
}

// freePorts returns n ports whose cluster bus ports (+10000) look free too.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 200 {
			return nil, errors.New("rediscluster: no free ports")
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("rediscluster: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			ln.Close()
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			ln.Close()
			continue
		}
		lns = append(lns, ln, bus)
		ports = append(ports, port)
	}
	return ports, nil
}

func (c *Cluster) startNodes(ports []int) error {
	for _, port := range ports {
		p := strconv.Itoa(port)
		cmd := exec.Command("redis-server",
			"--port", p, "--bind", "127.0.0.1", "--protected-mode", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+p+".conf",
			"--cluster-node-timeout", strconv.FormatInt(c.opts.NodeTimeout.Milliseconds(), 10),
			"--save", "", "--appendonly", "no", "--dir", c.dir,
			"--logfile", filepath.Join(c.dir, "redis-"+p+".log"))
		// The servers die with the test binary, even when it is killed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("rediscluster: start redis-server: %w", err)
		}
		nd := &node{addr: "127.0.0.1:" + p, cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(nd.done) }()
		c.mu.Lock()
		c.nodes = append(c.nodes, nd)
		c.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, nd := range c.nodes {
		if err := waitPing(ctx, nd); err != nil {
			return fmt.Errorf("rediscluster: redis-server on %s (log in %s): %w", nd.addr, c.dir, err)
		}
	}
	return nil
}

func waitPing(ctx context.Context, nd *node) error {
	rdb := redis.NewClient(&redis.Options{Addr: nd.addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	for {
		select {
		case <-nd.done:
			return errors.New("exited at start")
		default:
		}
		if err := rdb.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Addrs returns every node's address (masters first as created), the seed
// list of a cluster client.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.nodes))
	for _, nd := range c.nodes {
		out = append(out, nd.addr)
	}
	return out
}

// Dir is the cluster's directory (nodes' logs and configs).
func (c *Cluster) Dir() string { return c.dir }

// NewClient returns a cluster client of this cluster with short timeouts
// that follows failovers at once, as tandem serve builds it.
func (c *Cluster) NewClient() *redis.ClusterClient {
	return redisres.FollowFailovers(redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		ClusterStateReloadInterval: 10 * time.Second,
	}))
}

// MustClient returns a client of the cluster and a fresh key prefix
// ("tt:<random>:"); every key under the prefix is deleted on every master
// when tb ends.
func (c *Cluster) MustClient(tb testing.TB) (*redis.ClusterClient, string) {
	tb.Helper()
	rdb := c.NewClient()
	prefix := testenv.RandomName("tt:") + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DeletePrefix(ctx, rdb, prefix); err != nil {
			tb.Errorf("clean cluster prefix %s: %v", prefix, err)
		}
		rdb.Close()
	})
	return rdb, prefix
}

// DeletePrefix deletes every key that starts with prefix on every master
// (SCAN only walks the node it is sent to).
func DeletePrefix(ctx context.Context, rdb *redis.ClusterClient, prefix string) error {
	return scratch.DeletePrefix(ctx, rdb, prefix)
}

// Info is what one node says about itself.
type Info struct {
	Addr   string
	ID     string
	Master bool
	// MasterID is the master's node id of a replica.
	MasterID string
	Failed   bool
}

// Nodes returns the cluster as the first node that answers sees it.
func (c *Cluster) Nodes(ctx context.Context) ([]Info, error) {
	var lastErr error
	for _, addr := range c.liveAddrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		out, err := rdb.ClusterNodes(ctx).Result()
		rdb.Close()
		if err != nil {
			lastErr = err
			continue
		}
		return parseNodes(out), nil
	}
	return nil, fmt.Errorf("rediscluster: no node answers: %w", lastErr)
}

func parseNodes(out string) []Info {
	var infos []Info
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := f[2]
		in := Info{Addr: addr, ID: f[0], Master: strings.Contains(flags, "master"),
			Failed: strings.Contains(flags, "fail") && !strings.Contains(flags, "fail?")}
		if f[3] != "-" {
			in.MasterID = f[3]
		}
		infos = append(infos, in)
	}
	return infos
}

// Masters returns the addresses of the healthy masters.
func (c *Cluster) Masters(ctx context.Context) ([]string, error) {
	infos, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, in := range infos {
		if in.Master && !in.Failed {
			out = append(out, in.Addr)
		}
	}
	return out, nil
}

// MasterOf returns the address of the master that serves key.
func (c *Cluster) MasterOf(ctx context.Context, rdb *redis.ClusterClient, key string) (string, error) {
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("rediscluster: no master serves slot %d", slot)
}

// Kill stops the node at addr with SIGKILL, as a crash would.
func (c *Cluster) Kill(addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd.addr == addr {
			_ = nd.cmd.Process.Kill()
			<-nd.done
			return nil
		}
	}
	return fmt.Errorf("rediscluster: no node %s", addr)
}

func (c *Cluster) liveAddrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, nd := range c.nodes {
		select {
		case <-nd.done:
		default:
			out = append(out, nd.addr)
		}
	}
	return out
}

// WaitHealthy waits until every live node reports cluster_state:ok and
// sees as many healthy masters as the cluster was created with (after a
// failover: the promoted replica in the dead master's place).
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for {
		err := c.healthy(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rediscluster: not healthy (logs in %s): %w", c.dir, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context) error {
	for _, addr := range c.liveAddrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		info, err := rdb.ClusterInfo(ctx).Result()
		var nodes, repl string
		if err == nil {
			nodes, err = rdb.ClusterNodes(ctx).Result()
		}
		if err == nil {
			repl, err = rdb.Info(ctx, "replication").Result()
		}
		rdb.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", addr)
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("%s: replica not in sync with its master", addr)
		}
		masters := 0
		for _, in := range parseNodes(nodes) {
			if in.Master && !in.Failed {
				masters++
			}
		}
		if masters < c.opts.Masters {
			return fmt.Errorf("%s: sees %d healthy masters, want %d", addr, masters, c.opts.Masters)
		}
	}
	return nil
}

// Close stops every node and removes the cluster's directory; safe twice.
func (c *Cluster) Close() error {
	c.stopNodes()
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
	return nil
}

func (c *Cluster) stopNodes() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	for _, nd := range nodes {
		_ = nd.cmd.Process.Kill()
		<-nd.done
	}
}

// RunMain runs a test binary's tests with one cluster started for them all
// (none under -short, when *c stays nil), closes it and exits: the TestMain
// of every package that tests on a cluster.
func RunMain(m *testing.M, c **Cluster) {
	flag.Parse()
	if !testing.Short() {
		cl, err := Start(Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		*c = cl
	}
	code := m.Run()
	if *c != nil {
		(*c).Close()
	}
	os.Exit(code)
}
