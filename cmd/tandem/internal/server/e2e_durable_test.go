package server_test

import (
	"context"
	"database/sql"
	"net/http"
	"slices"
	"sort"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/faultproxy"
)

// durableEnv is two instances whose control Redis is a throwaway
// redis-server and whose control MySQL and Redis are each reached through
// a fault proxy, so that a test can flush, cut and restart them.
type durableEnv struct {
	cfg        server.Config
	one, two   *Instance
	redis      *redisServer
	redisProxy *faultproxy.Proxy
	mysqlProxy *faultproxy.Proxy
	control    *sql.DB // the control database, directly
	podA, podB string
	ksKey      string
}

func mustDurableEnv(t *testing.T) *durableEnv {
	t.Helper()
	cfg, _ := MustConfig(t)
	e := &durableEnv{cfg: cfg, redis: mustRedisServer(t), podA: cfg.Pods[0].Name, podB: cfg.Pods[1].Name}
	var err error
	if e.redisProxy, err = faultproxy.Listen(e.redis.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.redisProxy.Close() })
	dsn, err := mysql.ParseDSN(cfg.Control.MySQLDSN)
	if err != nil {
		t.Fatal(err)
	}
	if e.control, err = sql.Open("mysql", dsn.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.control.Close() })
	if e.mysqlProxy, err = faultproxy.Listen(dsn.Addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.mysqlProxy.Close() })
	dsn.Addr = e.mysqlProxy.Addr()
	e.cfg.Control.MySQLDSN = dsn.FormatDSN()
	e.cfg.Control.RedisAddr = e.redisProxy.Addr()
	e.ksKey = e.cfg.Control.RedisPrefix + "killswitch"
	e.one, e.two = MustRunMain(t, e.cfg), MustRunMain(t, e.cfg)
	return e
}

// inRedis returns the pods the control Redis holds engaged.
func (e *durableEnv) inRedis(t *testing.T) []string {
	t.Helper()
	m, err := e.redis.Client.HGetAll(context.Background(), e.ksKey).Result()
	if err != nil {
		t.Fatalf("read the control Redis: %v", err)
	}
	var pods []string
	for f := range m {
		if !slices.Contains([]string{e.podA, e.podB}, f) {
			continue // clear marks
		}
		pods = append(pods, f)
	}
	sort.Strings(pods)
	return pods
}

// inMySQL returns the pods the control MySQL holds engaged.
func (e *durableEnv) inMySQL(t *testing.T) []string {
	t.Helper()
	rows, err := e.control.Query("SELECT pod FROM killswitch WHERE engaged = 1 ORDER BY pod")
	if err != nil {
		t.Fatalf("read the control MySQL: %v", err)
	}
	defer rows.Close()
	var pods []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	return pods
}

// killed returns the engaged pods as in's admin API shows them.
func killed(in *Instance) []string {
	got := strs(in.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)["pods"])
	sort.Strings(got)
	return got
}

// TestE2EKillSwitchDurable: the kill switch lives in the control Redis and
// the control MySQL; either record keeps a pod killed, a record that lost
// it gets it back, it engages with either one down, disengaging needs both,
// and an instance never disengages silently.
func TestE2EKillSwitchDurable(t *testing.T) {
	e := mustDurableEnv(t)
	one, two := e.one, e.two
	podA, podB := e.podA, e.podB
	both := []string{podA, podB}
	if podB < podA {
		both = []string{podB, podA}
	}
	engage := func(t *testing.T, in *Instance, pods ...string) {
		in.Admin.tb = t
		in.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "durable", "pods": pods}, http.StatusOK)
	}

	t.Run("EngageWritesBothRecords", func(t *testing.T) {
		one.Admin.tb = t
		one.Admin.must(http.MethodPut, "/admin/pods/"+podA+"/mode", obj{"mode": "mysql", "reason": "on mysql", "force": true}, http.StatusOK)
		engage(t, one, podA)
		two.Admin.tb = t
		eventually(t, "the other instance to see pod A in mysql", func() bool { return podStatus(two.Admin, podA)["mode"] == "mysql" })
		// The next subtests check that pod A stays killed throughout on the
		// other instance: it must have seen the kill first.
		eventually(t, "the other instance to see pod A killed", func() bool { return slices.Equal(killed(two), []string{podA}) })
		if got := e.inRedis(t); !slices.Equal(got, []string{podA}) {
			t.Errorf("got %v in the control Redis, want [%s]", got, podA)
		}
		if got := e.inMySQL(t); !slices.Equal(got, []string{podA}) {
			t.Errorf("got %v in the control MySQL, want [%s]", got, podA)
		}
	})

	t.Run("FlushDBOfControlRedis", func(t *testing.T) {
		two.Admin.tb = t
		e.redis.FlushDB()
		// Every observation, until Redis holds it again, shows pod A killed.
		eventually(t, "the kill switch written back into the control Redis", func() bool {
			if got := killed(two); !slices.Equal(got, []string{podA}) {
				t.Fatalf("got %v on the other instance after FLUSHDB, want [%s] throughout", got, podA)
			}
			return slices.Equal(e.inRedis(t), []string{podA})
		})
		if st := podStatus(two.Admin, podA); st["mode"] != "mysql" || st["source_of_truth"] != "redis" {
			t.Errorf("got %v, want pod A in mysql answered by redis", st)
		}
	})

	t.Run("ControlRedisDown", func(t *testing.T) {
		one.Admin.tb, two.Admin.tb = t, t
		e.redisProxy.Down()
		engage(t, two, podB) // through the control MySQL alone
		eventually(t, "the other instance to see pod B killed through MySQL", func() bool { return slices.Equal(killed(one), both) })
		if got := killed(two); !slices.Equal(got, both) {
			t.Errorf("got %v, want both pods killed", got)
		}
		one.Admin.mustErr(http.MethodDelete, "/admin/killswitch", obj{"reason": "not yet", "pods": []string{podA}}, http.StatusServiceUnavailable, "unavailable")
		if got := killed(one); !slices.Equal(got, both) {
			t.Errorf("got %v after a refused disengage, want both pods killed", got)
		}
		e.redisProxy.Restore()
		eventually(t, "pod B written into the control Redis once it answers", func() bool {
			return slices.Equal(e.inRedis(t), both)
		})
	})

	t.Run("ControlRedisRestartsEmpty", func(t *testing.T) {
		one.Admin.tb, two.Admin.tb = t, t
		e.redis.Stop()
		e.redis.Start() // no persistence: the kill switch is gone from Redis
		eventually(t, "both pods written back into the restarted control Redis", func() bool {
			if got := killed(one); !slices.Equal(got, both) {
				t.Fatalf("got %v after the Redis restart, want both pods killed throughout", got)
			}
			return slices.Equal(e.inRedis(t), both)
		})
	})

	t.Run("InstanceStartedWhileRedisIsEmpty", func(t *testing.T) {
		e.redis.FlushDB()
		three := MustRunMain(t, e.cfg)
		three.Admin.tb = t
		if got := killed(three); !slices.Equal(got, both) {
			t.Errorf("got %v on an instance started with the control Redis empty, want both pods killed", got)
		}
		if got := podStatus(three.Admin, podA); got["kill_switch"] != true || got["source_of_truth"] != "redis" {
			t.Errorf("got %v, want pod A killed, answered by redis", got)
		}
		eventually(t, "the control Redis written back", func() bool { return slices.Equal(e.inRedis(t), both) })
	})

	t.Run("ControlMySQLDown", func(t *testing.T) {
		one.Admin.tb, two.Admin.tb = t, t
		one.Admin.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "reset"}, http.StatusOK)
		eventually(t, "the other instance to see it off", func() bool { return len(killed(two)) == 0 })
		if got := e.inMySQL(t); len(got) != 0 {
			t.Fatalf("got %v in the control MySQL after disengaging, want none", got)
		}
		e.mysqlProxy.Down()
		engage(t, one, podA) // through the control Redis alone
		eventually(t, "the other instance to see pod A killed", func() bool { return slices.Equal(killed(two), []string{podA}) })
		two.Admin.mustErr(http.MethodDelete, "/admin/killswitch", obj{"reason": "not yet"}, http.StatusServiceUnavailable, "unavailable")
		if got := killed(two); !slices.Equal(got, []string{podA}) {
			t.Errorf("got %v after a refused disengage, want pod A killed", got)
		}
		e.mysqlProxy.Restore()
		eventually(t, "pod A written into the control MySQL once it answers", func() bool {
			return slices.Equal(e.inMySQL(t), []string{podA})
		})
		if got := killed(two); !slices.Equal(got, []string{podA}) {
			t.Errorf("got %v after MySQL came back, want pod A still killed (its disengage was refused)", got)
		}
	})

	t.Run("BothDownKeepTheLastState", func(t *testing.T) {
		one.Admin.tb, two.Admin.tb = t, t
		e.redisProxy.Down()
		e.mysqlProxy.Down()
		// A failure here must not leave both down for the next subtest.
		defer e.redisProxy.Restore()
		defer e.mysqlProxy.Restore()
		// Several polls pass while both are down: the state stays.
		for range 20 {
			for _, in := range []*Instance{one, two} {
				if got := killed(in); !slices.Equal(got, []string{podA}) {
					t.Fatalf("got %v with both records down, want [%s] kept", got, podA)
				}
			}
		}
		one.Admin.mustErr(http.MethodPost, "/admin/killswitch", obj{"reason": "more", "pods": []string{podB}}, http.StatusServiceUnavailable, "unavailable")
		one.Admin.mustErr(http.MethodDelete, "/admin/killswitch", obj{"reason": "off"}, http.StatusServiceUnavailable, "unavailable")
		// Redis comes back empty while MySQL is still down.
		e.redis.Stop()
		e.redis.Start()
		e.redisProxy.Restore()
		eventually(t, "pod A written back into the control Redis", func() bool {
			if got := killed(two); !slices.Equal(got, []string{podA}) {
				t.Fatalf("got %v when Redis came back empty, want [%s] kept", got, podA)
			}
			return slices.Equal(e.inRedis(t), []string{podA})
		})
		e.mysqlProxy.Restore()
	})

	t.Run("DisengageNeedsBothAndReachesEveryone", func(t *testing.T) {
		one.Admin.tb, two.Admin.tb = t, t
		eventually(t, "the control MySQL to answer again", func() bool {
			st, _ := two.Admin.call(http.MethodDelete, "/admin/killswitch", obj{"reason": "all clear"})
			return st == http.StatusOK
		})
		eventually(t, "both instances to see the kill switch off", func() bool {
			return len(killed(one)) == 0 && len(killed(two)) == 0
		})
		if r, m := e.inRedis(t), e.inMySQL(t); len(r) != 0 || len(m) != 0 {
			t.Errorf("got Redis %v MySQL %v after disengaging, want both cleared", r, m)
		}
		// No instance writes a cleared pod back.
		for range 10 {
			if got := killed(one); len(got) != 0 {
				t.Fatalf("got %v after the disengage, want none", got)
			}
		}
		if r := e.inRedis(t); len(r) != 0 {
			t.Errorf("got %v written back into Redis after a disengage, want none", r)
		}
	})
}
