package redisres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/killswitch"
	"github.com/tandemhq/tandem/redisres"
)

var _ killswitch.Channel = (*redisres.KillSwitchChannel)(nil)

// deaf is a channel whose notifications never arrive, as if every pub/sub
// message were missed.
type deaf struct{ *redisres.KillSwitchChannel }

func (deaf) Watch(ctx context.Context) <-chan struct{} { return nil }

type modes map[string]tandem.Mode

func (m modes) Mode(pod string) tandem.Mode { return m[pod] }

var ksPods = []string{"pod-a", "pod-b", "pod-c"}

// MustOpenSwitch opens a kill switch on ch, closed when tb ends.
func MustOpenSwitch(tb testing.TB, ch killswitch.Channel, m killswitch.ModeSource) *killswitch.Switch {
	tb.Helper()
	s := killswitch.New(killswitch.Config{Pods: ksPods, Channel: ch, Modes: m})
	if err := s.Open(context.Background()); err != nil {
		tb.Fatalf("open kill switch: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not observed", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var ksChange = tandem.Change{Actor: "oncall", Reason: "mysql p99 spike"}

func TestKillSwitchChannel(t *testing.T) {
	ctx := context.Background()

	t.Run("OtherInstanceFollows", func(t *testing.T) {
		rdb, prefix := testenv.MustRedis(t)
		a := MustOpenSwitch(t, redisres.NewKillSwitchChannel(rdb, prefix), nil)
		b := MustOpenSwitch(t, redisres.NewKillSwitchChannel(rdb, prefix), nil)
		st, err := a.Engage(ctx, []string{"pod-a", "pod-b"}, ksChange)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Pods, []string{"pod-a", "pod-b"}) {
			t.Fatalf("got %v, want [pod-a pod-b]", st.Pods)
		}
		waitUntil(t, "engage seen by b", func() bool { return b.Engaged("pod-a") && b.Engaged("pod-b") })
		bs := b.State()
		if bs.Reason != ksChange.Reason || bs.Since == nil || !bs.Since.Equal(*st.Since) {
			t.Errorf("b's state: got %+v, want a's reason and since %v", bs, st.Since)
		}
		if _, err := a.Disengage(ctx, []string{"pod-a"}, ksChange); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "disengage seen by b", func() bool { return !b.Engaged("pod-a") && b.Engaged("pod-b") })
	})

	t.Run("MissedMessageConvergesByPolling", func(t *testing.T) {
		rdb, prefix := testenv.MustRedis(t)
		a := MustOpenSwitch(t, redisres.NewKillSwitchChannel(rdb, prefix), nil)
		b := MustOpenSwitch(t, deaf{redisres.NewKillSwitchChannel(rdb, prefix)}, nil)
		if _, err := a.Engage(ctx, []string{"pod-c"}, ksChange); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "engage seen by a deaf instance", func() bool { return b.Engaged("pod-c") })
	})

	t.Run("RestartLoadsState", func(t *testing.T) {
		rdb, prefix := testenv.MustRedis(t)
		a := MustOpenSwitch(t, redisres.NewKillSwitchChannel(rdb, prefix), nil)
		if _, err := a.Engage(ctx, nil, ksChange); err != nil {
			t.Fatal(err)
		}
		a.Close()
		b := MustOpenSwitch(t, redisres.NewKillSwitchChannel(rdb, prefix), nil)
		if st := b.State(); !slices.Equal(st.Pods, ksPods) {
			t.Errorf("after restart: got %v, want %v", st.Pods, ksPods)
		}
	})

	t.Run("RefusesMySQLOnly", func(t *testing.T) {
		rdb, prefix := testenv.MustRedis(t)
		a := MustOpenSwitch(t, redisres.NewKillSwitchChannel(rdb, prefix), modes{"pod-b": tandem.ModeMySQLOnly})
		st, err := a.Engage(ctx, nil, ksChange)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Pods, []string{"pod-a", "pod-c"}) || len(st.Refused) != 1 || st.Refused[0].Pod != "pod-b" {
			t.Errorf("got %+v, want pod-a and pod-c engaged, pod-b refused", st)
		}
	})

	t.Run("KeepsFirstEngagement", func(t *testing.T) {
		rdb, prefix := testenv.MustRedis(t)
		ch := redisres.NewKillSwitchChannel(rdb, prefix)
		first := tandem.AuditLogEntry{At: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), Actor: "auto", Pod: "pod-a", Reason: "first"}
		second := first
		second.At, second.Reason = first.At.Add(time.Minute), "second"
		if err := ch.Engage(ctx, []tandem.AuditLogEntry{first}); err != nil {
			t.Fatal(err)
		}
		if err := ch.Engage(ctx, []tandem.AuditLogEntry{second}); err != nil {
			t.Fatal(err)
		}
		got, err := ch.Engaged(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Reason != "first" || !got[0].At.Equal(first.At) || got[0].Actor != "auto" {
			t.Errorf("got %+v, want the first engagement kept", got)
		}
	})

	t.Run("WatchNotifies", func(t *testing.T) {
		rdb, prefix := testenv.MustRedis(t)
		ch := redisres.NewKillSwitchChannel(rdb, prefix)
		wctx, cancel := context.WithCancel(ctx)
		w := ch.Watch(wctx)
		// The subscription is set up asynchronously: publish until one
		// notification arrives.
		got := false
		deadline := time.Now().Add(15 * time.Second)
		for !got && time.Now().Before(deadline) {
			if err := ch.Disengage(ctx, []string{"pod-a"}, time.Now()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w:
				got = true
			case <-time.After(50 * time.Millisecond):
			}
		}
		if !got {
			t.Fatal("no notification received")
		}
		cancel()
		for range w { // closed once ctx ends
		}
	})

	t.Run("ErrUnavailable", func(t *testing.T) {
		testenv.RequireIntegration(t)
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		defer rdb.Close()
		ch := redisres.NewKillSwitchChannel(rdb, "tt:none:")
		if _, err := ch.Engaged(ctx); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Errorf("read: got %v, want %s", err, tandem.EUNAVAILABLE)
		}
		s := killswitch.New(killswitch.Config{Pods: ksPods, Channel: ch})
		if _, err := s.Engage(ctx, nil, ksChange); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Errorf("engage: got %v, want %s", err, tandem.EUNAVAILABLE)
		}
		s.Close()
	})
}

var _ killswitch.Record = (*redisres.KillSwitchChannel)(nil)

func TestKillSwitchChannel_ClearMarks(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.MustRedis(t)
	ch := redisres.NewKillSwitchChannel(rdb, prefix)
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	old := tandem.AuditLogEntry{Pod: "pod-a", At: t0, Actor: "oncall", Reason: "old"}
	if err := ch.Engage(ctx, []tandem.AuditLogEntry{old}); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	if err := ch.Disengage(ctx, []string{"pod-a"}, at); err != nil {
		t.Fatal(err)
	}
	engaged, cleared, err := ch.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(engaged) != 0 || !cleared["pod-a"].Equal(at) {
		t.Fatalf("got engaged %v cleared %v, want none engaged and pod-a cleared at %v", engaged, cleared, at)
	}
	newer := tandem.AuditLogEntry{Pod: "pod-a", At: at.Add(time.Second), Reason: "newer"}
	other := tandem.AuditLogEntry{Pod: "pod-b", At: t0, Reason: "lost in a FLUSHDB"}
	if err := ch.Restore(ctx, []tandem.AuditLogEntry{old, other}); err != nil {
		t.Fatal(err)
	}
	if engaged, _, _ = ch.Load(ctx); len(engaged) != 1 || engaged[0].Pod != "pod-b" {
		t.Fatalf("got %v, want only pod-b written back (pod-a was cleared after its engagement)", engaged)
	}
	if err := ch.Restore(ctx, []tandem.AuditLogEntry{newer}); err != nil {
		t.Fatal(err)
	}
	if engaged, _, _ = ch.Load(ctx); len(engaged) != 2 || engaged[0].Reason != "newer" {
		t.Fatalf("got %v, want pod-a written back from an engagement after its clear", engaged)
	}
}
