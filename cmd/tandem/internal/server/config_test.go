package server

import (
	"strings"
	"testing"
	"time"
)

const exampleConfig = `
listen: 127.0.0.1:8080
admin_listen: 127.0.0.1:8081
control:
  mysql_dsn: "root@tcp(127.0.0.1:3306)/tandem_control"
  redis_addr: 127.0.0.1:6379
  redis_db: 0
reservation:
  default_ttl: 10m
  reaper_interval: 1s
  pool_cap: 1000
rollout:
  gate_min_comparisons: 1000
  gate_max_divergence_rate: 0.001
  gate_window: 15m
  gate_require_audit: true
  abort_divergence_rate: 0.01
  abort_min_comparisons: 200
shadow:
  timeout: 250ms
  max_inflight: 256
pods:
  - name: pod-a
    shops: [1, 2, 3]
    mode: redis
    mysql_dsn: "root@tcp(127.0.0.1:3306)/tandem_pod_a"
    redis_addr: 127.0.0.1:6379
    redis_db: 1
    mysql_max_open_conns: 32
  - name: pod-b
    shops: ["100-199", 7]
    mysql_dsn: "root@tcp(127.0.0.1:3306)/tandem_pod_b"
    redis_addr: 127.0.0.1:6379
    redis_db: 2
`

func TestParseConfig(t *testing.T) {
	t.Run("APIExample", func(t *testing.T) {
		cfg, err := ParseConfig(strings.NewReader(exampleConfig))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := cfg.Reservation.DefaultTTL, 10*time.Minute; got != want {
			t.Errorf("default_ttl: got %s, want %s", got, want)
		}
		if got, want := cfg.Shadow.Timeout, 250*time.Millisecond; got != want {
			t.Errorf("shadow.timeout: got %s, want %s", got, want)
		}
		if got, want := cfg.Pods[1].ShopSet().String(), "7,100-199"; got != want {
			t.Errorf("pod-b shops: got %q, want %q", got, want)
		}
		if got, want := cfg.Pods[1].Mode, "redis"; got != want {
			t.Errorf("pod-b default mode: got %q, want %q", got, want)
		}
		if !cfg.Pods[0].ShopSet().Contains(2) || cfg.Pods[0].ShopSet().Contains(4) {
			t.Errorf("pod-a shops: got %s, want 1-3", cfg.Pods[0].ShopSet())
		}
	})
	t.Run("GateDefaults", func(t *testing.T) {
		cfg, err := ParseConfig(strings.NewReader(exampleConfig))
		if err != nil {
			t.Fatal(err)
		}
		ro := cfg.Rollout
		if ro.AbortWindow != time.Minute || ro.GateConsecutivePasses != 3 || ro.GateMySQLP99Max != 50*time.Millisecond ||
			ro.GateMaxP99Factor != 3 || ro.GateP99Slack != 25*time.Millisecond || ro.GateMaxMySQLErrorRate != 0.001 {
			t.Errorf("got %+v, want abort_window 1m, 3 passes, p99 at most 50ms and max(3x, +25ms), error rate 0.001", ro)
		}
	})
	t.Run("GateKeys", func(t *testing.T) {
		src := strings.Replace(exampleConfig, "abort_min_comparisons: 200", `abort_min_comparisons: 200
  abort_window: 30s
  gate_consecutive_passes: 5
  gate_mysql_p99_max: 0s
  gate_max_p99_factor: 0
  gate_p99_slack: 40ms`, 1)
		cfg, err := ParseConfig(strings.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		ro := cfg.Rollout
		if ro.AbortWindow != 30*time.Second || ro.GateConsecutivePasses != 5 || ro.GateMySQLP99Max != 0 ||
			ro.GateMaxP99Factor != 0 || ro.GateP99Slack != 40*time.Millisecond {
			t.Errorf("got %+v, want the keys as written (0 disables)", ro)
		}
	})
	bad := []struct {
		name, old, new, wantKey string
	}{
		{"UnknownKey", "  pool_cap: 1000", "  pool_cap: 1000\n  pool_size: 3", "pool_size"},
		{"BadTTL", "default_ttl: 10m", "default_ttl: 2h", "reservation.default_ttl"},
		{"BadDuration", "default_ttl: 10m", "default_ttl: soon", "line 9"},
		{"BadMode", "mode: redis\n", "mode: shadowy\n", "pods[0].mode"},
		{"OverlappingShops", `shops: ["100-199", 7]`, `shops: ["100-199", 3]`, "pods[1].shops"},
		{"BadShopRange", `shops: ["100-199", 7]`, `shops: ["199-100"]`, "pods[1].shops"},
		{"DuplicatePod", "name: pod-b", "name: pod-a", "pods[1].name"},
		{"BadDSN", `"root@tcp(127.0.0.1:3306)/tandem_pod_b"`, `"not a dsn"`, "pods[1].mysql_dsn"},
		{"BadRate", "gate_max_divergence_rate: 0.001", "gate_max_divergence_rate: 2", "rollout.gate_max_divergence_rate"},
		{"BadInflight", "max_inflight: 256", "max_inflight: 0", "shadow.max_inflight"},
		{"MySQLInflightAbovePool", "mysql_max_open_conns: 32", "mysql_max_open_conns: 32\n    mysql_max_inflight: 33", "pods[0].mysql_max_inflight"},
		{"BadListen", "listen: 127.0.0.1:8080", "listen: nowhere", "listen"},
		{"BadAbortWindow", "abort_min_comparisons: 200", "abort_min_comparisons: 200\n  abort_window: 10ms", "rollout.abort_window"},
		{"BadConsecutivePasses", "abort_min_comparisons: 200", "abort_min_comparisons: 200\n  gate_consecutive_passes: 0", "rollout.gate_consecutive_passes"},
		{"NegativeP99Budget", "abort_min_comparisons: 200", "abort_min_comparisons: 200\n  gate_mysql_p99_max: -1ms", "rollout.gate_mysql_p99_max"},
		{"NegativeP99Slack", "abort_min_comparisons: 200", "abort_min_comparisons: 200\n  gate_p99_slack: -1ms", "rollout.gate_p99_slack"},
		{"BareP99Budget", "abort_min_comparisons: 200", "abort_min_comparisons: 200\n  gate_mysql_p99_max: 50", "rollout.gate_mysql_p99_max"},
		{"NoPods", exampleConfig[strings.Index(exampleConfig, "pods:"):], "", "pods"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(exampleConfig, tc.old, tc.new, 1)
			if src == exampleConfig {
				t.Fatalf("test edit %q did not apply", tc.old)
			}
			_, err := ParseConfig(strings.NewReader(src))
			if err == nil {
				t.Fatalf("got no error, want one naming %s", tc.wantKey)
			}
			if !strings.Contains(err.Error(), tc.wantKey) {
				t.Errorf("got %q, want it to name %s", err, tc.wantKey)
			}
		})
	}
}
