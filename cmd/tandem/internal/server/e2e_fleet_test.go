package server_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/rediscluster"
	"github.com/tandemhq/tandem/internal/testenv"
)

// auditInterval is the fleet test's scheduled audit interval.
const auditInterval = 300 * time.Millisecond

// MustClusterConfig is MustConfig with the control plane's Redis and both
// pods' Redis on one Redis Cluster (pod A in shadow, pod B in redis) and
// the scheduled audit on.
func MustClusterConfig(tb testing.TB, c *rediscluster.Cluster) server.Config {
	tb.Helper()
	testenv.RequireIntegration(tb)
	_, prefix := c.MustClient(tb)
	cfg := server.DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Control.MySQLDSN = testenv.MustCreateDatabase(tb)
	cfg.Control.RedisAddr, cfg.Control.RedisCluster, cfg.Control.RedisAddrs = "", true, c.Addrs()[:2]
	cfg.Control.RedisPrefix = prefix + "control:"
	cfg.Reservation.ReaperInterval = 100 * time.Millisecond
	cfg.Rollout.AuditInterval = auditInterval
	for _, p := range []struct{ mode, shops string }{{"shadow", "1-9"}, {"redis", "10-19"}} {
		name := testenv.RandomName("p" + p.mode[:1] + "-")
		cfg.Pods = append(cfg.Pods, server.PodConfig{
			Name: name, Shops: []string{p.shops}, Mode: p.mode,
			MySQLDSN: testenv.MustCreateDatabase(tb), RedisCluster: true, RedisAddrs: c.Addrs(),
			RedisPrefix: prefix + name + ":", MySQLMaxOpenConns: 16,
		})
	}
	if err := cfg.Validate(); err != nil {
		tb.Fatalf("validate the test config: %v", err)
	}
	return cfg
}

// TestE2EFleetOnCluster runs three `tandem serve` against one control plane
// (MySQL and a Redis Cluster) with both pods' Redis on the cluster: changes
// reach every instance, the reapers of all three return each expired hold
// once, and the scheduled audit runs on one instance at a time, which
// hands over when it stops.
func TestE2EFleetOnCluster(t *testing.T) {
	testenv.RequireIntegration(t)
	c := rediscluster.MustStart(t, rediscluster.Options{})
	cfg := MustClusterConfig(t, c)
	fleet := []*Instance{MustRunMain(t, cfg), MustRunMain(t, cfg), MustRunMain(t, cfg)}
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name
	retarget := func(t *testing.T) {
		for _, in := range fleet {
			in.Admin.tb, in.Checkout.tb = t, t
		}
	}

	t.Run("KillSwitchReachesEveryInstance", func(t *testing.T) {
		retarget(t)
		for i := 0; i < 5; i++ {
			from := fleet[i%3]
			start := time.Now()
			from.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "fleet drill", "pods": []string{podA}}, http.StatusOK)
			for _, in := range fleet {
				poll(t, "every instance to see the kill switch engaged", time.Millisecond, func() bool {
					return podStatus(in.Admin, podA)["kill_switch"] == true
				})
			}
			engaged := time.Since(start)
			start = time.Now()
			from.Admin.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "fleet drill over", "pods": []string{podA}}, http.StatusOK)
			for _, in := range fleet {
				poll(t, "every instance to see the kill switch released", time.Millisecond, func() bool {
					return podStatus(in.Admin, podA)["kill_switch"] == false
				})
			}
			t.Logf("kill switch seen by all three instances after %v (engage), %v (release)", engaged, time.Since(start))
		}
	})

	t.Run("ModeChangeReachesEveryInstance", func(t *testing.T) {
		retarget(t)
		start := time.Now()
		enterShadow(fleet[1].Admin, podB, "fleet")
		for _, in := range fleet {
			eventually(t, "every instance to apply the mode change", func() bool {
				return podStatus(in.Admin, podB)["mode"] == "shadow"
			})
		}
		t.Logf("mode change seen by all three instances after %v", time.Since(start))
	})

	t.Run("ReapersReturnEachHoldOnce", func(t *testing.T) {
		retarget(t)
		const holds = 30
		before := expiredHolds(t, fleet, podB)
		for shop := int64(10); shop < 13; shop++ {
			fleet[0].Checkout.must(http.MethodPut, inventoryPath(shop, 7, 1), obj{"on_hand": 100}, http.StatusOK)
		}
		for i := 0; i < holds; i++ {
			shop := int64(10 + i%3)
			body := cart(fmt.Sprintf("fleet-%d", i), shop, line(7, 2, 1))
			body["ttl_seconds"] = 1
			fleet[i%3].Checkout.must(http.MethodPost, "/v1/reservations", body, http.StatusCreated)
		}
		for shop := int64(10); shop < 13; shop++ {
			eventually(t, "every hold returned to stock", func() bool {
				inv := fleet[2].Checkout.must(http.MethodGet, inventoryPath(shop, 7, 1), nil, http.StatusOK)
				stores, _ := inv["stores"].(obj)
				r, _ := stores["redis"].(obj)
				m, _ := stores["mysql"].(obj)
				return num(inv["available"]) == 100 && num(r["available"]) == 100 && num(m["available"]) == 100
			})
		}
		got := expiredHolds(t, fleet, podB) - before
		if got != holds {
			t.Errorf("Redis holds expired across the three instances: got %d, want %d (each once)", got, holds)
		}
	})

	t.Run("ScheduledAuditOncePerIntervalAcrossFleet", func(t *testing.T) {
		retarget(t)
		// Every scheduled audit names the instance that ran it.
		reader := fleet[0]
		auditors := func() []string {
			log := reader.Admin.must(http.MethodGet, "/admin/audit-log?limit=1000", nil, http.StatusOK)
			var out []string // oldest first
			entries := asSlice(log["entries"])
			for i := len(entries) - 1; i >= 0; i-- {
				e := entries[i].(obj)
				if e["action"] == "audit" && e["actor"] == server.ActorScheduler && e["pod"] == podA {
					out = append(out, strings.TrimPrefix(e["reason"].(string), "scheduled audit by "))
				}
			}
			return out
		}
		eventually(t, "six scheduled audits of pod A", func() bool { return len(auditors()) >= 6 })
		first := auditors()
		leader := first[0]
		for i, who := range first {
			if who != leader {
				t.Fatalf("scheduled audit %d of pod A ran on %s, want every one on the leader %s: %v", i, who, leader, first)
			}
		}
		// The other instances' gates see the leader's audit.
		for _, in := range fleet {
			if in.Main.InstanceID == leader {
				continue
			}
			eventually(t, "a follower to learn the fleet's last audit", func() bool {
				gates, _ := podStatus(in.Admin, podA)["gates"].(obj)
				return gates["last_audit_clean"] == true
			})
		}

		var next []*Instance
		for _, in := range fleet {
			if in.Main.InstanceID == leader {
				in.Main.Close()
			} else {
				next = append(next, in)
			}
		}
		if len(next) != 2 {
			t.Fatalf("leader %s is not one of the fleet", leader)
		}
		fleet, reader = next, next[0]
		eventually(t, "another instance to take the scheduled audit over", func() bool {
			all := auditors()
			return len(all) > len(first) && all[len(all)-1] != leader
		})
		// Let the new leader run a few; the one left must stay a follower.
		n := len(auditors())
		eventually(t, "three more scheduled audits", func() bool { return len(auditors()) >= n+3 })
		all := auditors()
		after := all[len(first):]
		for len(after) > 0 && after[0] == leader {
			after = after[1:] // the old leader's last audit, logged as it stopped
		}
		for i, who := range after {
			if who != after[0] || who == leader {
				t.Fatalf("scheduled audit %d after the handover ran on %s, want every one on %s: %v", i, who, after[0], after)
			}
		}
		t.Logf("scheduled audits of pod A: %d by %s, then %d by %s", len(first), leader, len(after), after[0])
	})
}

var expiredLine = regexp.MustCompile(`(?m)^tandem_redis_holds_expired_total\{pod="([^"]+)"\} ([0-9.e+]+)$`)

// expiredHolds sums the holds the instances' Redis reapers expired in pod.
func expiredHolds(t *testing.T, fleet []*Instance, pod string) int64 {
	t.Helper()
	var n int64
	for _, in := range fleet {
		status, text := in.Admin.getText("/metrics")
		if status != http.StatusOK {
			t.Fatalf("GET /metrics: got %d", status)
		}
		for _, m := range expiredLine.FindAllStringSubmatch(text, -1) {
			if m[1] == pod {
				v, _ := strconv.ParseFloat(m[2], 64)
				n += int64(v)
			}
		}
	}
	return n
}
