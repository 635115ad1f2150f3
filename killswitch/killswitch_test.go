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

// memChannel is an in-memory Channel (or Record) shared by several
// Switches; err makes every call fail, as if the store were down.
type memChannel struct {
	mu       sync.Mutex
	pods     map[string]tandem.AuditLogEntry
	cleared  map[string]time.Time
	watchers []chan struct{}
	err      error
	restores int
	// disengageErr fails Disengage alone (the record reads but cannot be
	// written).
	disengageErr error
}

func newMemChannel() *memChannel {
	return &memChannel{pods: map[string]tandem.AuditLogEntry{}, cleared: map[string]time.Time{}}
}

func (c *memChannel) setErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// wipe loses every record, as a Redis restart without persistence or a
// FLUSHDB does.
func (c *memChannel) wipe() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods = map[string]tandem.AuditLogEntry{}
	c.cleared = map[string]time.Time{}
}

func (c *memChannel) has(pod string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pods[pod]
	return ok
}

func (c *memChannel) Engage(ctx context.Context, entries []tandem.AuditLogEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	for _, e := range entries {
		if _, ok := c.pods[e.Pod]; !ok {
			c.pods[e.Pod] = e
		}
	}
	c.notify()
	return nil
}

func (c *memChannel) Disengage(ctx context.Context, pods []string, at time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.disengageErr != nil {
		return c.disengageErr
	}
	for _, p := range pods {
		delete(c.pods, p)
		c.cleared[p] = at
	}
	c.notify()
	return nil
}

func (c *memChannel) Restore(ctx context.Context, entries []tandem.AuditLogEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	for _, e := range entries {
		if _, ok := c.pods[e.Pod]; ok {
			continue
		}
		if cl, ok := c.cleared[e.Pod]; ok && !cl.Before(e.At) {
			continue
		}
		c.pods[e.Pod] = e
		c.restores++
	}
	return nil
}

func (c *memChannel) notify() {
	for _, w := range c.watchers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

func (c *memChannel) Load(ctx context.Context) ([]tandem.AuditLogEntry, map[string]time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, nil, c.err
	}
	var out []tandem.AuditLogEntry
	for _, e := range c.pods {
		out = append(out, e)
	}
	cleared := make(map[string]time.Time, len(c.cleared))
	for p, t := range c.cleared {
		cleared[p] = t
	}
	return out, cleared, nil
}

func (c *memChannel) Watch(ctx context.Context) <-chan struct{} {
	w := make(chan struct{}, 1)
	c.mu.Lock()
	c.watchers = append(c.watchers, w)
	c.mu.Unlock()
	return w
}

type modes map[string]tandem.Mode

func (m modes) Mode(pod string) tandem.Mode { return m[pod] }

type memAudit struct {
	mu      sync.Mutex
	entries []tandem.AuditLogEntry
	err     error
}

func (a *memAudit) AppendAudit(ctx context.Context, e tandem.AuditLogEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	a.entries = append(a.entries, e)
	return nil
}

var pods = []string{"pod-a", "pod-b", "pod-c"}

// openSwitch opens a Switch over ch, configured further by configure,
// closed when t ends.
func openSwitch(t *testing.T, ch killswitch.Channel, m killswitch.ModeSource, log killswitch.AuditLog, configure ...func(*killswitch.Config)) *killswitch.Switch {
	t.Helper()
	cfg := killswitch.Config{Pods: pods, Channel: ch, Modes: m, AuditLog: log, PollInterval: 10 * time.Millisecond}
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

var change = tandem.Change{Actor: "alice", Reason: "p99 regression"}

// stepClock is a test clock safe to read from the switch's goroutines.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

func TestSwitch_Engage(t *testing.T) {
	ctx := context.Background()

	t.Run("OK", func(t *testing.T) {
		audit := &memAudit{}
		s := openSwitch(t, newMemChannel(), modes{"pod-a": tandem.ModeMySQL}, audit)
		st, err := s.Engage(ctx, []string{"pod-a"}, change)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Engaged || !slices.Equal(st.Pods, []string{"pod-a"}) || st.Reason != change.Reason || st.Since == nil {
			t.Fatalf("got %+v, want pod-a engaged with the reason and since", st)
		}
		if !s.Engaged("pod-a") || s.Engaged("pod-b") {
			t.Errorf("Engaged: got pod-a %v pod-b %v, want true false", s.Engaged("pod-a"), s.Engaged("pod-b"))
		}
		s.Close() // waits for the background audit record
		if len(audit.entries) != 1 || audit.entries[0].Action != killswitch.ActionEngage || audit.entries[0].Actor != "alice" {
			t.Errorf("audit log: got %+v, want one engage by alice", audit.entries)
		}
	})

	t.Run("AllPodsWhenNoneNamed", func(t *testing.T) {
		s := openSwitch(t, newMemChannel(), nil, nil)
		st, err := s.Engage(ctx, nil, change)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Pods, pods) {
			t.Errorf("got %v, want %v", st.Pods, pods)
		}
		st, err = s.Disengage(ctx, []string{"pod-b"}, change)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Pods, []string{"pod-a", "pod-c"}) {
			t.Errorf("after disengaging pod-b: got %v, want [pod-a pod-c]", st.Pods)
		}
		st, _ = s.Disengage(ctx, nil, change)
		if st.Engaged || len(st.Pods) != 0 || st.Since != nil {
			t.Errorf("after disengaging all: got %+v, want nothing engaged", st)
		}
	})

	t.Run("RefusesMySQLOnly", func(t *testing.T) {
		s := openSwitch(t, newMemChannel(), modes{"pod-a": tandem.ModeMySQL, "pod-b": tandem.ModeMySQLOnly}, nil)
		st, err := s.Engage(ctx, nil, change)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Pods, []string{"pod-a", "pod-c"}) {
			t.Errorf("engaged: got %v, want [pod-a pod-c]", st.Pods)
		}
		want := []tandem.Refusal{{Pod: "pod-b", Reason: killswitch.RefusedMySQLOnly}}
		if !slices.Equal(st.Refused, want) {
			t.Errorf("refused: got %+v, want %+v", st.Refused, want)
		}
		if s.Engaged("pod-b") {
			t.Error("pod-b engaged, want not")
		}
	})

	t.Run("KeepsFirstSinceAndReason", func(t *testing.T) {
		c := &stepClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
		s := openSwitch(t, newMemChannel(), nil, nil, func(cfg *killswitch.Config) { cfg.Now = c.Now })
		clk := c.Now()
		s.Engage(ctx, []string{"pod-a"}, change)
		clk = c.Add(time.Minute)
		st, _ := s.Engage(ctx, []string{"pod-a", "pod-b"}, tandem.Change{Reason: "second"})
		if !st.Since.Equal(clk.Add(-time.Minute)) {
			t.Errorf("since: got %v, want the first engagement %v", st.Since, clk.Add(-time.Minute))
		}
		if st.Reason != "second" {
			t.Errorf("reason: got %q, want the latest engagement's %q", st.Reason, "second")
		}
	})

	t.Run("EngagementsPerPod", func(t *testing.T) {
		c := &stepClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
		s := openSwitch(t, newMemChannel(), nil, nil, func(cfg *killswitch.Config) { cfg.Now = c.Now })
		clk := c.Now()
		s.Engage(ctx, []string{"pod-b"}, change)
		clk = c.Add(time.Minute)
		st, _ := s.Engage(ctx, []string{"pod-a"}, tandem.Change{Actor: "bob", Reason: "second"})
		want := []tandem.KillSwitchEngagement{
			{Pod: "pod-a", Since: clk, Actor: "bob", Reason: "second"},
			{Pod: "pod-b", Since: clk.Add(-time.Minute), Actor: "alice", Reason: change.Reason},
		}
		if !slices.EqualFunc(st.Engagements, want, func(a, b tandem.KillSwitchEngagement) bool {
			return a.Pod == b.Pod && a.Since.Equal(b.Since) && a.Actor == b.Actor && a.Reason == b.Reason
		}) {
			t.Errorf("got engagements %+v, want %+v", st.Engagements, want)
		}
		st, _ = s.Disengage(ctx, nil, change)
		if len(st.Engagements) != 0 {
			t.Errorf("after disengaging all: got engagements %+v, want none", st.Engagements)
		}
	})

	t.Run("ErrUnknownPod", func(t *testing.T) {
		s := openSwitch(t, newMemChannel(), nil, nil)
		_, err := s.Engage(ctx, []string{"pod-a", "pod-x"}, change)
		if code := tandem.ErrorCode(err); code != tandem.EUNKNOWNPOD {
			t.Fatalf("got %q, want %q", code, tandem.EUNKNOWNPOD)
		}
		if s.Engaged("pod-a") {
			t.Error("pod-a engaged by a refused request, want nothing changed")
		}
	})

	t.Run("ErrTargetsChangeNothing", func(t *testing.T) {
		tests := []struct {
			name string
			pods []string
			code string
		}{
			{"EmptyList", []string{}, tandem.EINVALID},
			{"BlankName", []string{"pod-a", " "}, tandem.EINVALID},
			{"EmptyName", []string{""}, tandem.EINVALID},
			{"Repeated", []string{"pod-a", "pod-a"}, tandem.EINVALID},
			{"Unknown", []string{"pod-x", "pod-a", "pod-y"}, tandem.EUNKNOWNPOD},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := openSwitch(t, newMemChannel(), nil, nil)
				s.Engage(ctx, []string{"pod-b"}, change)
				for _, fn := range []func(context.Context, []string, tandem.Change) (*tandem.KillSwitchState, error){s.Engage, s.Disengage} {
					_, err := fn(ctx, tt.pods, change)
					if code := tandem.ErrorCode(err); code != tt.code {
						t.Fatalf("got %v, want %s", err, tt.code)
					}
					if tt.code == tandem.EUNKNOWNPOD {
						if got, _ := tandem.ErrorDetails(err)["pods"].([]string); !slices.Equal(got, []string{"pod-x", "pod-y"}) {
							t.Errorf("got details.pods %v, want [pod-x pod-y]", got)
						}
					}
					if st := s.State(); !slices.Equal(st.Pods, []string{"pod-b"}) {
						t.Errorf("got engaged %v after a refused change, want [pod-b]", st.Pods)
					}
				}
			})
		}
	})

	t.Run("ErrInvalidReason", func(t *testing.T) {
		s := openSwitch(t, newMemChannel(), nil, nil)
		for _, reason := range []string{"", string(make([]rune, 501))} {
			if _, err := s.Engage(ctx, nil, tandem.Change{Reason: reason}); tandem.ErrorCode(err) != tandem.EINVALID {
				t.Errorf("reason of %d chars: got %v, want %s", len([]rune(reason)), err, tandem.EINVALID)
			}
		}
	})

	t.Run("ErrUnavailableChangesNothing", func(t *testing.T) {
		ch := newMemChannel()
		s := openSwitch(t, ch, nil, nil)
		ch.setErr(errors.New("redis down"))
		if _, err := s.Engage(ctx, nil, change); tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Fatalf("got %v, want %s", err, tandem.EUNAVAILABLE)
		}
		if s.Engaged("pod-a") {
			t.Error("engaged after a failed write, want not")
		}
	})

	t.Run("AuditLogDownDoesNotBlock", func(t *testing.T) {
		var mu sync.Mutex
		var reported error
		audit := &memAudit{err: errors.New("mysql down")}
		s := openSwitch(t, newMemChannel(), nil, audit, func(c *killswitch.Config) {
			c.OnError = func(err error) { mu.Lock(); reported = err; mu.Unlock() }
		})
		if _, err := s.Engage(ctx, nil, change); err != nil {
			t.Fatalf("got %v, want the engagement to succeed without the audit log", err)
		}
		if !s.Engaged("pod-c") {
			t.Error("pod-c not engaged")
		}
		s.Close()
		mu.Lock()
		defer mu.Unlock()
		if reported == nil {
			t.Error("audit failure not reported")
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not observed", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSwitch_Fanout(t *testing.T) {
	ctx := context.Background()
	t.Run("OtherInstanceFollows", func(t *testing.T) {
		ch := newMemChannel()
		a := openSwitch(t, ch, nil, nil)
		b := openSwitch(t, ch, nil, nil)
		if _, err := a.Engage(ctx, []string{"pod-b"}, change); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "engage on b", func() bool { return b.Engaged("pod-b") })
		if _, err := a.Disengage(ctx, nil, change); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "disengage on b", func() bool { return !b.Engaged("pod-b") })
	})

	t.Run("RestartLoadsState", func(t *testing.T) {
		ch := newMemChannel()
		a := openSwitch(t, ch, nil, nil)
		a.Engage(ctx, []string{"pod-c"}, change)
		b := openSwitch(t, ch, nil, nil)
		if !b.Engaged("pod-c") {
			t.Error("a new instance does not see pod-c engaged after Open")
		}
	})

	t.Run("ErrOpenWithoutState", func(t *testing.T) {
		ch := newMemChannel()
		ch.err = errors.New("redis down")
		s := killswitch.New(killswitch.Config{Pods: pods, Channel: ch})
		if err := s.Open(ctx); err == nil {
			t.Error("got nil, want an error when the state cannot be read")
		}
		s.Close()
	})
}
