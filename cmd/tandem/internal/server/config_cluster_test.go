package server

import (
	"strings"
	"testing"
)

func TestParseConfig_RedisCluster(t *testing.T) {
	t.Run("PodAndControlOnClusters", func(t *testing.T) {
		src := strings.Replace(exampleConfig, "  redis_addr: 127.0.0.1:6379\n  redis_db: 0\n",
			"  redis_cluster: true\n  redis_addrs: [\"10.0.0.1:7000\", \"10.0.0.2:7000\"]\n", 1)
		src = strings.Replace(src, "    redis_addr: 127.0.0.1:6379\n    redis_db: 1\n",
			"    redis_cluster: true\n    redis_addrs: [\"10.0.1.1:7000\"]\n", 1)
		cfg, err := ParseConfig(strings.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		if !cfg.Control.RedisCluster || len(cfg.Control.RedisAddrs) != 2 || cfg.Control.RedisAddr != "" {
			t.Errorf("control: got cluster=%v addrs=%v addr=%q, want a cluster of two seeds and no addr",
				cfg.Control.RedisCluster, cfg.Control.RedisAddrs, cfg.Control.RedisAddr)
		}
		if p := cfg.Pods[0]; !p.RedisCluster || len(p.RedisAddrs) != 1 {
			t.Errorf("pod-a: got cluster=%v addrs=%v, want a cluster of one seed", p.RedisCluster, p.RedisAddrs)
		}
		if p := cfg.Pods[1]; p.RedisCluster || p.RedisAddr != "127.0.0.1:6379" {
			t.Errorf("pod-b: got cluster=%v addr=%q, want the single Redis", p.RedisCluster, p.RedisAddr)
		}
	})
	t.Run("ControlDefaultsToLocalRedis", func(t *testing.T) {
		src := strings.Replace(exampleConfig, "  redis_addr: 127.0.0.1:6379\n  redis_db: 0\n", "", 1)
		cfg, err := ParseConfig(strings.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := cfg.Control.RedisAddr, "127.0.0.1:6379"; got != want {
			t.Errorf("control.redis_addr: got %q, want %q", got, want)
		}
	})
	bad := []struct {
		name, old, new, wantKey, wantMsg string
	}{
		{"ClusterWithoutAddrs", "  redis_addr: 127.0.0.1:6379\n  redis_db: 0\n", "  redis_cluster: true\n",
			"control.redis_addrs", "at least one seed node"},
		{"ClusterWithAddr", "  redis_addr: 127.0.0.1:6379\n  redis_db: 0\n",
			"  redis_addr: 127.0.0.1:6379\n  redis_cluster: true\n  redis_addrs: [\"10.0.0.1:7000\"]\n",
			"control.redis_addr", "not redis_addr"},
		{"AddrsWithoutCluster", "  redis_addr: 127.0.0.1:6379\n  redis_db: 0\n", "  redis_addrs: [\"10.0.0.1:7000\"]\n",
			"control.redis_addrs", "redis_cluster: true"},
		{"PodClusterWithDB", "    redis_addr: 127.0.0.1:6379\n    redis_db: 1\n",
			"    redis_cluster: true\n    redis_addrs: [\"10.0.0.1:7000\"]\n    redis_db: 1\n",
			"pods[0].redis_db", "only database 0"},
		{"PodClusterBadSeed", "    redis_addr: 127.0.0.1:6379\n    redis_db: 1\n",
			"    redis_cluster: true\n    redis_addrs: [\"10.0.0.1:7000\", \"nowhere\"]\n",
			"pods[0].redis_addrs[1]", "host:port"},
		{"PodClusterDuplicateSeed", "    redis_addr: 127.0.0.1:6379\n    redis_db: 1\n",
			"    redis_cluster: true\n    redis_addrs: [\"10.0.0.1:7000\", \"10.0.0.1:7000\"]\n",
			"pods[0].redis_addrs[1]", "twice"},
		{"PodClusterWithoutAddrs", "    redis_addr: 127.0.0.1:6379\n    redis_db: 1\n", "    redis_cluster: true\n",
			"pods[0].redis_addrs", "seed node"},
		{"PodWithoutRedis", "    redis_addr: 127.0.0.1:6379\n    redis_db: 1\n", "",
			"pods[0].redis_addr", "host:port"},
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
			if !strings.Contains(err.Error(), tc.wantKey+":") || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("got %q, want it to name %s and say %q", err, tc.wantKey, tc.wantMsg)
			}
		})
	}
}
