package controldb_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/controldb"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/killswitch"
)

var _ killswitch.Record = (*controldb.KillSwitchRecord)(nil)

func TestKillSwitchRecord(t *testing.T) {
	ctx := context.Background()
	rec := MustOpenStore(t, testenv.MustCreateDatabase(t)).KillSwitch()
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	entry := func(pod string, at time.Time, reason string) tandem.AuditLogEntry {
		return tandem.AuditLogEntry{Pod: pod, At: at, Actor: "oncall", Reason: reason}
	}
	load := func() (map[string]tandem.AuditLogEntry, map[string]time.Time) {
		t.Helper()
		engaged, cleared, err := rec.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]tandem.AuditLogEntry{}
		for _, e := range engaged {
			m[e.Pod] = e
		}
		return m, cleared
	}

	t.Run("EngageKeepsTheFirst", func(t *testing.T) {
		if err := rec.Engage(ctx, []tandem.AuditLogEntry{entry("pod-a", t0, "first")}); err != nil {
			t.Fatal(err)
		}
		if err := rec.Engage(ctx, []tandem.AuditLogEntry{entry("pod-a", t0.Add(time.Minute), "second")}); err != nil {
			t.Fatal(err)
		}
		got, _ := load()
		if e := got["pod-a"]; e.Reason != "first" || !e.At.Equal(t0) || e.Actor != "oncall" {
			t.Errorf("got %+v, want the first engagement", e)
		}
	})

	t.Run("DisengageMarksTheClear", func(t *testing.T) {
		at := t0.Add(2 * time.Minute)
		if err := rec.Disengage(ctx, []string{"pod-a", "pod-b"}, at); err != nil {
			t.Fatal(err)
		}
		got, cleared := load()
		if _, ok := got["pod-a"]; ok || !cleared["pod-a"].Equal(at) || !cleared["pod-b"].Equal(at) {
			t.Errorf("got engaged %v cleared %v, want nothing engaged, both cleared at %v", got, cleared, at)
		}
	})

	t.Run("RestoreNeverUndoesALaterClear", func(t *testing.T) {
		if err := rec.Restore(ctx, []tandem.AuditLogEntry{entry("pod-a", t0, "stale")}); err != nil {
			t.Fatal(err)
		}
		if got, _ := load(); len(got) != 0 {
			t.Errorf("got %v, want the stale engagement refused", got)
		}
		later := entry("pod-a", t0.Add(3*time.Minute), "engaged while MySQL was down")
		if err := rec.Restore(ctx, []tandem.AuditLogEntry{later, entry("pod-c", t0, "never cleared")}); err != nil {
			t.Fatal(err)
		}
		got, _ := load()
		if got["pod-a"].Reason != later.Reason || got["pod-c"].Reason != "never cleared" {
			t.Errorf("got %v, want pod-a and pod-c written back", got)
		}
	})

	t.Run("EngageAfterAClearAlwaysWins", func(t *testing.T) {
		rec.Disengage(ctx, []string{"pod-c"}, t0.Add(time.Hour))
		// An operator's engage wins whatever the clocks say.
		if err := rec.Engage(ctx, []tandem.AuditLogEntry{entry("pod-c", t0, "again")}); err != nil {
			t.Fatal(err)
		}
		if got, _ := load(); got["pod-c"].Reason != "again" {
			t.Errorf("got %v, want pod-c engaged again", got)
		}
	})
}
