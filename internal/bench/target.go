package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/scratch"
)

// ServeSpec is the one-pod fleet an in-process `tandem serve` runs for a
// bench, on scratch stores.
type ServeSpec struct {
	// ControlDSN is the control database; Redis the control plane's and
	// the pod's Redis, ControlPrefix the control plane's key prefix.
	ControlDSN    string
	Redis         Redis
	ControlPrefix string
	// Pod lists Shop alone (or Shops), starts in Mode (when its mode was never
	// persisted) and keeps its stores in PodDSN and under PodPrefix.
	Pod  string
	Shop int64
	// Shops, when above 0, makes the pod list shops 1..Shops instead.
	Shops     int
	Mode      tandem.Mode
	PodDSN    string
	PodPrefix string
	// AdminToken is the admin API's token; InstanceID names the instance.
	AdminToken string
	InstanceID string
	// Log receives the server's warnings and errors.
	Log io.Writer
}

// Server is a running in-process `tandem serve`.
type Server interface {
	// CheckoutAddr and AdminAddr are the bound host:port addresses.
	CheckoutAddr() string
	AdminAddr() string
	// KillSwitchEngaged reports whether this instance's router sees pod's
	// kill switch engaged.
	KillSwitchEngaged(pod string) bool
	// Metrics gathers the instance's metrics, its stores' included.
	Metrics() prometheus.Gatherer
	Close() error
}

// StartFunc starts an in-process server; cmd/tandem/internal/benchcmd
// passes its own, so that the bench holds no wiring of the service.
type StartFunc func(ctx context.Context, spec ServeSpec) (Server, error)

// Remote is a running server the HTTP bench drives (--config).
type Remote struct {
	// Listen and AdminListen are the config's listen addresses.
	Listen      string
	AdminListen string
	// AdminToken sets modes; APIToken, when the server wants one, is sent
	// with checkout requests.
	AdminToken string
	APIToken   string
	Pods       []RemotePod
}

// RemotePod is a pod of the running server's config.
type RemotePod struct {
	Name  string
	Shops tandem.ShopSet
}

// target is the server a bench drives: its addresses and tokens, and for
// an in-process server how to restart it between cells.
type target struct {
	checkout   string // host:port
	admin      string // host:port
	adminToken string
	apiToken   string
	pod        string
	// restart, when set, replaces the in-process server by a fresh one on
	// fresh, empty stores and updates the addresses.
	restart func(ctx context.Context) error
	// metrics, when set, gathers the in-process server's metrics.
	metrics func() prometheus.Gatherer
	// meter, when set, samples the in-process server's MySQL and Redis.
	meter *serverMeter
	close func()
}

// remoteTarget reads the running server's addresses and resolves the pod.
func remoteTarget(r *Remote, pod string, shop int64) (*target, error) {
	t := &target{checkout: dialAddr(r.Listen), admin: dialAddr(r.AdminListen),
		adminToken: r.AdminToken, apiToken: r.APIToken, close: func() {}}
	if t.adminToken == "" {
		return nil, errors.New("bench http --config: TANDEM_ADMIN_TOKEN is required (modes are set through the admin API)")
	}
	var err error
	if t.pod, err = podOf(r.Pods, pod, shop); err != nil {
		return nil, err
	}
	return t, nil
}

// podOf returns pod, or the pod that lists shop.
func podOf(pods []RemotePod, pod string, shop int64) (string, error) {
	for _, p := range pods {
		if pod == "" && p.Shops.Contains(shop) || pod != "" && p.Name == pod {
			if !p.Shops.Contains(shop) {
				return "", fmt.Errorf("bench http: pod %s does not list shop %d", p.Name, shop)
			}
			return p.Name, nil
		}
	}
	if pod != "" {
		return "", fmt.Errorf("bench http: no pod %q in the config", pod)
	}
	return "", fmt.Errorf("bench http: no pod lists shop %d", shop)
}

// dialAddr turns a listen address into one to dial.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// servers are scratch databases and a Redis prefix for a one-pod fleet of
// in-process servers.
type servers struct {
	env   *env
	start StartFunc
	spec  ServeSpec
	// stores counts the sets of stores of fresh; drop drops the current
	// set (nil for the first, the env's own, dropped with the env).
	stores int
	drop   func()
}

// fresh moves the fleet to new, empty stores: a control database, a pod
// database and key prefixes of their own, the previous set dropped. A cell
// on the stores of the cells before it would measure their leftovers: in
// shadow mode the sweep converges every hold that an earlier redis cell
// left in Redis alone (thousands of carts copied during the measured load),
// and the holds of every earlier cell weigh on each listing.
func (s *servers) fresh(ctx context.Context) error {
	n := s.stores + 1
	control, err := s.env.db.Sibling(ctx, fmt.Sprintf("_control%d", n))
	if err != nil {
		return err
	}
	pod, err := s.env.db.Sibling(ctx, fmt.Sprintf("_pod%d", n))
	if err != nil {
		control.Drop(context.Background())
		return err
	}
	if s.drop != nil {
		s.drop()
	} else {
		// The env's own set: its keys go now, its databases with the env.
		scratch.DeletePrefix(ctx, s.env.rdb, s.spec.ControlPrefix)
		scratch.DeletePrefix(ctx, s.env.rdb, s.spec.PodPrefix)
	}
	controlPrefix := fmt.Sprintf("%scontrol%d:", s.env.prefix, n)
	podPrefix := fmt.Sprintf("%sbench%d:", s.env.prefix, n)
	s.drop = func() {
		control.Drop(context.Background())
		pod.Drop(context.Background())
		scratch.DeletePrefix(context.Background(), s.env.rdb, controlPrefix)
		scratch.DeletePrefix(context.Background(), s.env.rdb, podPrefix)
	}
	s.stores = n
	s.spec.ControlDSN, s.spec.PodDSN = control.DSN, pod.DSN
	s.spec.ControlPrefix, s.spec.PodPrefix = controlPrefix, podPrefix
	return nil
}

func newServers(ctx context.Context, start StartFunc, mysqlDSN string, rt Redis, shop int64, mode tandem.Mode) (*servers, error) {
	if start == nil {
		return nil, errors.New("bench: no in-process server to start (StartFunc is nil)")
	}
	e, err := newEnv(ctx, mysqlDSN, 0, rt)
	if err != nil {
		return nil, err
	}
	control, err := e.database(ctx, "_control")
	if err != nil {
		e.close()
		return nil, err
	}
	spec := ServeSpec{ControlDSN: control.DSN, Redis: rt, ControlPrefix: e.prefix + "control:",
		Pod: "bench", Shop: shop, Mode: mode, PodDSN: e.dsn, PodPrefix: e.prefix + "bench:"}
	return &servers{env: e, start: start, spec: spec}, nil
}

// run starts one in-process server; its warnings and errors go to w.
func (s *servers) run(ctx context.Context, adminToken string, w io.Writer) (Server, error) {
	spec := s.spec
	spec.AdminToken, spec.InstanceID, spec.Log = adminToken, "bench-"+randomHex(4), w
	return s.start(ctx, spec)
}

func (s *servers) close() {
	if s.drop != nil {
		s.drop()
	}
	s.env.close()
}

// localTarget starts an in-process server on scratch stores.
func localTarget(ctx context.Context, start StartFunc, mysqlDSN string, rt Redis, shop int64, progress io.Writer) (*target, error) {
	srv, err := newServers(ctx, start, mysqlDSN, rt, shop, tandem.ModeRedis)
	if err != nil {
		return nil, err
	}
	t := &target{adminToken: randomHex(16), pod: srv.spec.Pod, meter: srv.env.meter}
	var m Server
	t.restart = func(ctx context.Context) error {
		if m != nil {
			m.Close()
			m = nil
			if err := srv.fresh(ctx); err != nil {
				return fmt.Errorf("fresh stores: %w", err)
			}
		}
		var err error
		if m, err = srv.run(ctx, t.adminToken, progress); err != nil {
			return fmt.Errorf("in-process server: %w", err)
		}
		t.checkout, t.admin = m.CheckoutAddr(), m.AdminAddr()
		return nil
	}
	t.metrics = func() prometheus.Gatherer { return m.Metrics() }
	t.close = func() {
		if m != nil {
			m.Close()
		}
		srv.close()
	}
	if err := t.restart(ctx); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
