package controldb_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
	"github.com/tandemhq/tandem/controldb"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/killswitch"
	"github.com/tandemhq/tandem/rollout"
)

var (
	_ rollout.StateStore       = (*controldb.Store)(nil)
	_ comparator.DivergenceLog = (*controldb.Store)(nil)
	_ killswitch.AuditLog      = (*controldb.Store)(nil)
)

// MustOpenStore migrates the control database at dsn and opens a store
// on it, configured by configure, closed when tb ends.
func MustOpenStore(tb testing.TB, dsn string, configure ...func(*controldb.Config)) *controldb.Store {
	tb.Helper()
	ctx := context.Background()
	cfg := controldb.Config{DSN: dsn}
	for _, f := range configure {
		f(&cfg)
	}
	s := controldb.NewStore(cfg)
	if err := s.Migrate(ctx); err != nil {
		tb.Fatalf("migrate control database: %v", err)
	}
	if err := s.Open(ctx); err != nil {
		tb.Fatalf("open control database: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// MustOpenController opens a rollout controller on store with pods pod-a
// (redis) and pod-b (shadow), closed when tb ends.
func MustOpenController(tb testing.TB, store *controldb.Store, id string) *rollout.Controller {
	tb.Helper()
	c := rollout.New(rollout.Config{
		PodConfigs: []rollout.PodConfig{
			{Name: "pod-a", Mode: tandem.ModeRedis},
			{Name: "pod-b", Mode: tandem.ModeShadow},
		},
		InstanceID: id, Addr: "127.0.0.1:8080",
		PollInterval: 20 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond,
	}, store)
	c.Comparator = comparator.New(comparator.Config{})
	if err := c.Open(context.Background()); err != nil {
		tb.Fatalf("open controller: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not observed", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var change = tandem.Change{Actor: "alice", Reason: "integration test"}

func TestStore_Migrate(t *testing.T) {
	dsn := testenv.MustCreateDatabase(t)
	s := MustOpenStore(t, dsn)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second migrate: got %v, want nil (idempotent)", err)
	}
	v, err := s.Version(context.Background())
	if err != nil || v != 0 {
		t.Errorf("fresh version: got %d %v, want 0 nil", v, err)
	}
	if err := s.CheckSchema(context.Background()); err != nil {
		t.Errorf("schema after migrate: got %v, want nil", err)
	}

	// Control databases migrated before the control store had a package of
	// its own recorded these names in this table: they must keep counting
	// as applied, or an upgrade would rerun them.
	t.Run("RecordsKeepTheirNames", func(t *testing.T) {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.Query("SELECT name FROM tandem_control_migrations ORDER BY name")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			got = append(got, name)
		}
		want := []string{"001_control_pods.sql", "002_control_version.sql", "003_control_version_row.sql", "004_audit_log.sql",
			"005_divergences.sql", "006_instances.sql", "007_killswitch.sql", "008_transitions.sql", "009_rollout_plan.sql",
			"010_rollout_plan_row.sql", "011_divergence_position.sql", "012_transition_checkpoint.sql", "013_pod_throttles.sql"}
		if controldb.MigrationsTable != "tandem_control_migrations" || !slices.Equal(got, want) {
			t.Errorf("got table %s holding %v, want tandem_control_migrations holding %v", controldb.MigrationsTable, got, want)
		}
	})
}

func TestStore_Modes(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)

	t.Run("OtherControllerFollows", func(t *testing.T) {
		store := MustOpenStore(t, dsn)
		a := MustOpenController(t, store, "a")
		b := MustOpenController(t, MustOpenStore(t, dsn), "b")
		if _, _, err := a.SetMode(ctx, "pod-a", tandem.ModeChange{Change: change, Mode: tandem.ModeShadow}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "pod-a in shadow on b", func() bool { return b.Mode("pod-a") == tandem.ModeShadow })
		if b.Version() != a.Version() {
			t.Errorf("version: b %d, a %d, want equal", b.Version(), a.Version())
		}
		waitFor(t, "both instances report the applied version", func() bool {
			ins, err := a.Instances(ctx)
			if err != nil || len(ins) != 2 {
				return false
			}
			for _, in := range ins {
				if in.ControlVersion != a.Version() || in.Stale || in.Addr != "127.0.0.1:8080" {
					return false
				}
			}
			return true
		})
	})

	t.Run("PersistedAcrossRestart", func(t *testing.T) {
		// The previous subtest moved pod-a to shadow in this database.
		c := MustOpenController(t, MustOpenStore(t, dsn), "c")
		if got := c.Mode("pod-a"); got != tandem.ModeShadow {
			t.Errorf("pod-a: got %s, want shadow (persisted wins over the config's redis)", got)
		}
		log, err := c.AuditLog(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(log) != 1 || log[0].Action != rollout.ActionSetMode || log[0].Before != "redis" || log[0].After != "shadow" ||
			log[0].Actor != "alice" || log[0].Reason != change.Reason || log[0].Pod != "pod-a" || log[0].At.IsZero() {
			t.Errorf("audit log: got %+v, want the one set_mode of pod-a", log)
		}
	})

	t.Run("ErrConflictOnStaleMode", func(t *testing.T) {
		s := MustOpenStore(t, dsn)
		_, err := s.SetMode(ctx, "pod-a", tandem.ModeRedis, tandem.ModeShadow, tandem.AuditLogEntry{At: time.Now(), Actor: "x", Action: "set_mode", Reason: "r"})
		if tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Errorf("got %v, want %s", err, tandem.ECONFLICT)
		}
		_, err = s.SetMode(ctx, "pod-x", tandem.ModeRedis, tandem.ModeShadow, tandem.AuditLogEntry{At: time.Now(), Actor: "x", Action: "set_mode", Reason: "r"})
		if tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
			t.Errorf("got %v, want %s", err, tandem.EUNKNOWNPOD)
		}
	})

	t.Run("ResyncedFlag", func(t *testing.T) {
		s := MustOpenStore(t, dsn)
		e := tandem.AuditLogEntry{At: time.Now(), Actor: "x", Action: "resync", Pod: "pod-b", Reason: "r"}
		before, _ := s.Version(ctx)
		if err := s.MarkResynced(ctx, "pod-b", e); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Resynced(ctx, "pod-b"); err != nil || !ok {
			t.Fatalf("got %v %v, want true", ok, err)
		}
		if after, _ := s.Version(ctx); after != before+1 {
			t.Errorf("version: got %d, want %d", after, before+1)
		}
		if _, err := s.SetMode(ctx, "pod-b", tandem.ModeShadow, tandem.ModeRedis, e); err != nil {
			t.Fatal(err)
		}
		if ok, _ := s.Resynced(ctx, "pod-b"); ok {
			t.Error("resynced flag kept across a mode change, want cleared")
		}
		if err := s.MarkResynced(ctx, "pod-x", e); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
			t.Errorf("unknown pod: got %v, want %s", err, tandem.EUNKNOWNPOD)
		}
	})
}

func TestStore_AuditLog(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)
	s := MustOpenStore(t, dsn)
	at := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	for i := range 5 {
		e := tandem.AuditLogEntry{At: at.Add(time.Duration(i) * time.Second), Actor: "bob", Action: killswitch.ActionEngage,
			Pod: "pod-a", Reason: fmt.Sprintf("step %d", i), Before: "disengaged", After: "engaged"}
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := s.Version(ctx); v != 5 {
		t.Errorf("version: got %d, want 5 (bumped with every entry)", v)
	}
	reopened := MustOpenStore(t, dsn)
	log, err := reopened.AuditLog(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range log {
		reasons = append(reasons, e.Reason)
	}
	if !slices.Equal(reasons, []string{"step 4", "step 3", "step 2"}) {
		t.Errorf("got %v, want the last three newest first", reasons)
	}
	if !log[0].At.Equal(at.Add(4*time.Second)) || log[0].Before != "disengaged" || log[0].After != "engaged" {
		t.Errorf("got %+v, want the entry as written (microsecond time)", log[0])
	}
}

func TestStore_Divergences(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)

	t.Run("NewestFirstWithFilters", func(t *testing.T) {
		s := MustOpenStore(t, dsn)
		at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
		var batch []tandem.Divergence
		for i := range 6 {
			batch = append(batch, tandem.Divergence{
				At: at.Add(time.Duration(i) * time.Second), Pod: []string{"pod-a", "pod-b"}[i%2], Op: tandem.OpReserve,
				Kind:      []tandem.DivergenceKind{tandem.KindOutcomeMismatch, tandem.KindShadowTimeout, tandem.KindOutcomeMismatch}[i%3],
				CartToken: fmt.Sprintf("c-%d", i), ShopID: 1, SourceOfTruth: tandem.StoreRedis,
				Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved", Lines: []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 1}}, LatencyMS: 1.5},
				Shadow:  tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.EINSUFFICIENT, Message: "item 100 has 1 sellable unit"},
			})
		}
		if err := s.AppendDivergences(ctx, batch); err != nil {
			t.Fatal(err)
		}
		all, err := s.Divergences(ctx, tandem.DivergenceFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 6 || all[0].CartToken != "c-5" || all[5].CartToken != "c-0" || all[0].ID <= all[1].ID {
			t.Fatalf("got %d, first %q, want 6 newest first", len(all), all[0].CartToken)
		}
		d := all[5]
		if !d.At.Equal(at) || d.Primary.Status != "reserved" || len(d.Primary.Lines) != 1 || d.Primary.Lines[0].Quantity != 2 ||
			d.Shadow.Status != tandem.EINSUFFICIENT || d.Shadow.Message == "" || d.Primary.LatencyMS != 1.5 {
			t.Errorf("got %+v, want both outcomes as written", d)
		}
		tokens := func(ds []tandem.Divergence) []string {
			var out []string
			for _, d := range ds {
				out = append(out, d.CartToken)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			f    tandem.DivergenceFilter
			want []string
		}{
			{"Pod", tandem.DivergenceFilter{Pod: "pod-b"}, []string{"c-5", "c-3", "c-1"}},
			{"Kind", tandem.DivergenceFilter{Kind: tandem.KindShadowTimeout}, []string{"c-4", "c-1"}},
			{"PodAndKind", tandem.DivergenceFilter{Pod: "pod-a", Kind: tandem.KindOutcomeMismatch}, []string{"c-2", "c-0"}},
			{"Limit", tandem.DivergenceFilter{Limit: 2}, []string{"c-5", "c-4"}},
			{"Since", tandem.DivergenceFilter{Since: at.Add(4 * time.Second)}, []string{"c-5", "c-4"}},
			{"PodSince", tandem.DivergenceFilter{Pod: "pod-b", Since: at.Add(2500 * time.Millisecond)}, []string{"c-5", "c-3"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ds, err := s.Divergences(ctx, tc.f)
				if err != nil {
					t.Fatal(err)
				}
				if got := tokens(ds); !slices.Equal(got, tc.want) {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			})
		}
	})

	t.Run("BoundedSample", func(t *testing.T) {
		s := MustOpenStore(t, testenv.MustCreateDatabase(t), func(c *controldb.Config) { c.MaxDivergences = 4 })
		for i := range 10 {
			d := tandem.Divergence{At: time.Now(), Pod: "pod-a", Op: tandem.OpClaim, Kind: tandem.KindShadowError, CartToken: fmt.Sprintf("c-%d", i)}
			if err := s.AppendDivergences(ctx, []tandem.Divergence{d}); err != nil {
				t.Fatal(err)
			}
		}
		ds, _ := s.Divergences(ctx, tandem.DivergenceFilter{Limit: 100})
		if len(ds) != 4 || ds[0].CartToken != "c-9" {
			t.Errorf("got %d rows, newest %q, want the 4 newest", len(ds), ds[0].CartToken)
		}
	})

	t.Run("ThroughTheComparator", func(t *testing.T) {
		s := MustOpenStore(t, testenv.MustCreateDatabase(t))
		c := comparator.New(comparator.Config{Log: s})
		c.Open()
		for i := range 300 {
			var kind tandem.DivergenceKind
			if i%3 == 0 {
				kind = tandem.KindLocationMismatch
			}
			c.Record(tandem.Comparison{Pod: "pod-a", Op: tandem.OpReserve, CartToken: fmt.Sprintf("c-%d", i), Kind: kind,
				Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved"}, Shadow: tandem.Outcome{Store: tandem.StoreMySQL, Status: "reserved"}})
		}
		c.Close()
		ds, err := s.Divergences(ctx, tandem.DivergenceFilter{Pod: "pod-a", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); len(ds) != 100 || st.Persisted != 100 || st.Dropped != 0 {
			t.Errorf("got %d rows, stats %+v, want 100 persisted", len(ds), st)
		}
	})
}

func TestStore_Instances(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t, testenv.MustCreateDatabase(t))
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	if err := s.RegisterInstance(ctx, tandem.Instance{ID: "old", Addr: "h1:8080", StartedAt: now.Add(-48 * time.Hour), LastSeen: now.Add(-48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterInstance(ctx, tandem.Instance{ID: "i1", Addr: "h2:8080", StartedAt: now, LastSeen: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "i1", now.Add(time.Second), 42); err != nil {
		t.Fatal(err)
	}
	ins, err := s.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 {
		t.Fatalf("got %+v, want only i1 (old is past retention)", ins)
	}
	in := ins[0]
	if in.ID != "i1" || in.Addr != "h2:8080" || !in.StartedAt.Equal(now) || !in.LastSeen.Equal(now.Add(time.Second)) || in.ControlVersion != 42 {
		t.Errorf("got %+v, want i1 seen a second after its start at version 42", in)
	}
}
