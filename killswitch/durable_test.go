package killswitch_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/killswitch"
)

var errDown = errors.New("connection refused")

// steppingClock moves past killswitch.RestoreGrace at every reading, so
// that each poll sees earlier engagements as settled, in order.
type steppingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(killswitch.RestoreGrace + time.Millisecond)
	return c.t
}

var clk = &steppingClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}

// openDual opens a Switch over a Redis-like channel and a MySQL-like
// durable record that polls only when a test calls Reload, configured
// further by configure.
func openDual(t *testing.T, redis, mysql *memChannel, configure ...func(*killswitch.Config)) *killswitch.Switch {
	t.Helper()
	cfg := killswitch.Config{Pods: pods, Channel: redis, Durable: mysql, PollInterval: time.Hour, Now: clk.Now}
	for _, f := range configure {
		f(&cfg)
	}
	s := killswitch.New(cfg)
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// reload polls s once; failures of a record that is down are expected.
func reload(s *killswitch.Switch) { _ = s.Reload(context.Background()) }

func TestSwitch_TwoRecords(t *testing.T) {
	ctx := context.Background()

	t.Run("EngageWritesBoth", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql)
		if _, err := a.Engage(ctx, []string{"pod-a"}, change); err != nil {
			t.Fatal(err)
		}
		if !redis.has("pod-a") || !mysql.has("pod-a") {
			t.Errorf("got redis %v mysql %v, want pod-a in both records", redis.has("pod-a"), mysql.has("pod-a"))
		}
	})

	t.Run("RedisWipedIsWrittenBackWithoutAGap", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql)
		b := openDual(t, redis, mysql)
		a.Engage(ctx, []string{"pod-a"}, change)
		reload(b)
		redis.wipe() // FLUSHDB, or a restart without persistence
		reload(b)
		if !b.Engaged("pod-a") {
			t.Fatal("got pod-a disengaged after Redis lost its data, want it engaged (MySQL holds it)")
		}
		if !redis.has("pod-a") {
			t.Error("got pod-a not written back into Redis")
		}
		reload(a)
		if !a.Engaged("pod-a") {
			t.Error("got pod-a disengaged on the other instance")
		}
	})

	t.Run("StartWithRedisEmpty", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql)
		a.Engage(ctx, []string{"pod-b"}, change)
		redis.wipe()
		c := openDual(t, redis, mysql) // a new instance, Redis empty
		if !c.Engaged("pod-b") {
			t.Fatal("got pod-b disengaged on an instance started while Redis was empty")
		}
		if !redis.has("pod-b") {
			t.Error("got pod-b not written back into Redis at start")
		}
	})

	t.Run("RedisDownEngagesThroughMySQL", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql)
		b := openDual(t, redis, mysql)
		redis.setErr(errDown)
		if _, err := a.Engage(ctx, []string{"pod-c"}, change); err != nil {
			t.Fatalf("got %v, want engaged through MySQL alone", err)
		}
		reload(b)
		if !a.Engaged("pod-c") || !b.Engaged("pod-c") {
			t.Fatalf("got engaged %v/%v, want pod-c engaged on both instances", a.Engaged("pod-c"), b.Engaged("pod-c"))
		}
		redis.setErr(nil)
		reload(b)
		if !redis.has("pod-c") {
			t.Error("got pod-c not written into Redis once it answered")
		}
	})

	t.Run("MySQLDownEngagesThroughRedisAndWritesBack", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql)
		b := openDual(t, redis, mysql)
		mysql.setErr(errDown)
		if _, err := a.Engage(ctx, []string{"pod-a"}, change); err != nil {
			t.Fatalf("got %v, want engaged through Redis alone", err)
		}
		reload(b)
		if !b.Engaged("pod-a") {
			t.Fatal("got pod-a disengaged on the other instance with MySQL down")
		}
		mysql.setErr(nil)
		reload(b)
		if !mysql.has("pod-a") {
			t.Error("got pod-a not written into MySQL once it answered")
		}
	})

	t.Run("BothDownKeepsTheLastState", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql)
		b := openDual(t, redis, mysql)
		a.Engage(ctx, []string{"pod-a"}, change)
		reload(b)
		redis.setErr(errDown)
		mysql.setErr(errDown)
		if err := b.Reload(ctx); err == nil {
			t.Error("got no error reading two records that are down")
		}
		if !b.Engaged("pod-a") || b.Engaged("pod-b") {
			t.Fatalf("got pod-a %v pod-b %v, want the last state kept", b.Engaged("pod-a"), b.Engaged("pod-b"))
		}
		if _, err := b.Engage(ctx, []string{"pod-b"}, change); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Errorf("engage with both down: got %v, want %s", err, tandem.EUNAVAILABLE)
		}
		if _, err := b.Disengage(ctx, []string{"pod-a"}, change); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Errorf("disengage with both down: got %v, want %s", err, tandem.EUNAVAILABLE)
		}
		if !b.Engaged("pod-a") {
			t.Fatal("got pod-a disengaged while both records were down")
		}
		// Redis comes back empty (restarted without its data) while MySQL
		// is still down: what it lost is kept and written back.
		redis.wipe()
		redis.setErr(nil)
		reload(b)
		if !b.Engaged("pod-a") {
			t.Fatal("got pod-a disengaged when Redis came back empty, want it kept")
		}
		if !redis.has("pod-a") {
			t.Error("got pod-a not written back into Redis")
		}
	})

	t.Run("DisengageNeedsBothRecords", func(t *testing.T) {
		for _, down := range []string{"redis", "mysql"} {
			t.Run(down, func(t *testing.T) {
				redis, mysql := newMemChannel(), newMemChannel()
				a := openDual(t, redis, mysql)
				b := openDual(t, redis, mysql)
				a.Engage(ctx, []string{"pod-a"}, change)
				rec := map[string]*memChannel{"redis": redis, "mysql": mysql}[down]
				rec.setErr(errDown)
				if _, err := a.Disengage(ctx, []string{"pod-a"}, change); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
					t.Fatalf("got %v, want %s", err, tandem.EUNAVAILABLE)
				}
				reload(a)
				reload(b)
				if !a.Engaged("pod-a") || !b.Engaged("pod-a") {
					t.Fatalf("got engaged %v/%v with the %s down, want still engaged on both", a.Engaged("pod-a"), b.Engaged("pod-a"), down)
				}
				rec.setErr(nil)
				reload(b)
				if _, err := a.Disengage(ctx, []string{"pod-a"}, change); err != nil {
					t.Fatal(err)
				}
				reload(b)
				if a.Engaged("pod-a") || b.Engaged("pod-a") || redis.has("pod-a") || mysql.has("pod-a") {
					t.Errorf("got pod-a still engaged after disengaging with both records up")
				}
			})
		}
	})

	t.Run("MySQLFailingAfterRedisPutsRedisBack", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql)
		b := openDual(t, redis, mysql)
		mysql.setErr(errDown)
		a.Engage(ctx, []string{"pod-a"}, change) // in Redis only
		mysql.setErr(nil)
		mysql.mu.Lock()
		mysql.disengageErr = errDown
		mysql.mu.Unlock()
		if _, err := a.Disengage(ctx, []string{"pod-a"}, change); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Fatalf("got %v, want %s", err, tandem.EUNAVAILABLE)
		}
		reload(b)
		if !a.Engaged("pod-a") || !b.Engaged("pod-a") || !redis.has("pod-a") {
			t.Errorf("got engaged %v/%v, in Redis %v, want pod-a still engaged everywhere", a.Engaged("pod-a"), b.Engaged("pod-a"), redis.has("pod-a"))
		}
	})

	t.Run("DisengageIsNeverWrittenBack", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql)
		b := openDual(t, redis, mysql)
		a.Engage(ctx, []string{"pod-a", "pod-b"}, change)
		reload(b)
		// A reload racing the engage may write it into a record that has
		// not got it yet; that is harmless. Count only what follows.
		redis.mu.Lock()
		redis.restores = 0
		redis.mu.Unlock()
		mysql.mu.Lock()
		mysql.restores = 0
		mysql.mu.Unlock()
		if _, err := a.Disengage(ctx, []string{"pod-a"}, change); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			reload(a)
			reload(b)
		}
		if b.Engaged("pod-a") || redis.has("pod-a") || mysql.has("pod-a") {
			t.Errorf("got pod-a engaged again after its disengage")
		}
		if !b.Engaged("pod-b") {
			t.Error("got pod-b disengaged, want it kept")
		}
		redis.mu.Lock()
		mysql.mu.Lock()
		n := redis.restores + mysql.restores
		mysql.mu.Unlock()
		redis.mu.Unlock()
		if n != 0 {
			t.Errorf("got %d write-backs of pod-a after its disengage, want none", n)
		}
	})

	t.Run("ClearMarkAfterEveryEngagement", func(t *testing.T) {
		// The instance that engaged runs a clock ahead of the one that
		// disengages: the clear mark still follows the engagement.
		redis, mysql := newMemChannel(), newMemChannel()
		a := openDual(t, redis, mysql, func(c *killswitch.Config) {
			c.Now = func() time.Time { return clk.Now().Add(time.Hour) }
		})
		b := openDual(t, redis, mysql)
		a.Engage(ctx, []string{"pod-a"}, change)
		engaged, _, _ := redis.Load(ctx)
		reload(b)
		if _, err := b.Disengage(ctx, []string{"pod-a"}, change); err != nil {
			t.Fatal(err)
		}
		// A stale copy of the engagement is refused by both records.
		stale := engaged
		redis.Restore(ctx, stale)
		mysql.Restore(ctx, stale)
		if redis.has("pod-a") || mysql.has("pod-a") {
			t.Error("got a stale engagement written back over a later disengage")
		}
	})

	t.Run("OpenNeedsBothRecords", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		mysql.setErr(errDown)
		s := killswitch.New(killswitch.Config{Pods: pods, Channel: redis, Durable: mysql})
		if err := s.Open(ctx); err == nil {
			t.Error("got nil, want an error when the MySQL record cannot be read at start")
		}
		s.Close()
	})

	t.Run("StateListsEitherRecord", func(t *testing.T) {
		redis, mysql := newMemChannel(), newMemChannel()
		redis.Engage(ctx, []tandem.AuditLogEntry{{Pod: "pod-a", At: clk.Now(), Reason: "r"}})
		mysql.Engage(ctx, []tandem.AuditLogEntry{{Pod: "pod-c", At: clk.Now(), Reason: "m"}})
		s := openDual(t, redis, mysql)
		if got := s.State().Pods; !slices.Equal(got, []string{"pod-a", "pod-c"}) {
			t.Errorf("got %v, want the pods of both records", got)
		}
	})
}

func TestSwitch_OnChange(t *testing.T) {
	ctx := context.Background()
	var got []tandem.AuditLogEntry
	s := openDual(t, newMemChannel(), newMemChannel(), func(c *killswitch.Config) {
		c.OnChange = func(e tandem.AuditLogEntry) { got = append(got, e) }
	})
	s.Engage(ctx, []string{"pod-a", "pod-b"}, change)
	s.Disengage(ctx, []string{"pod-a"}, tandem.Change{Actor: "bob", Reason: "over"})
	want := []struct{ action, pod, actor, before, after string }{
		{killswitch.ActionEngage, "pod-a", "alice", "disengaged", "engaged"},
		{killswitch.ActionEngage, "pod-b", "alice", "disengaged", "engaged"},
		{killswitch.ActionDisengage, "pod-a", "bob", "engaged", "disengaged"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d changes told, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Action != w.action || g.Pod != w.pod || g.Actor != w.actor || g.Before != w.before || g.After != w.after || g.Reason == "" {
			t.Errorf("change %d: got %+v, want %+v", i, g, w)
		}
	}
}
