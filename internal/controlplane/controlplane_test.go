package controlplane_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
	"github.com/tandemhq/tandem/controldb"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/killswitch"
	"github.com/tandemhq/tandem/redisres"
	"github.com/tandemhq/tandem/rollout"
)

var change = tandem.Change{Actor: "alice", Reason: "integration test"}

// mustOpenControl migrates the control database at dsn and opens a store
// on it, closed when t ends.
func mustOpenControl(t *testing.T, dsn string) *controldb.Store {
	t.Helper()
	s := controldb.NewStore(controldb.Config{DSN: dsn})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate control database: %v", err)
	}
	if err := s.Open(context.Background()); err != nil {
		t.Fatalf("open control database: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not observed", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// instance is one `tandem serve`'s control plane, wired as cmd wires it.
type instance struct {
	ctl *rollout.Controller
	sw  *killswitch.Switch
	cmp *comparator.Comparator
}

func mustOpenInstance(t *testing.T, dsn, redisPrefix, id string) *instance {
	t.Helper()
	ctx := context.Background()
	rdb, _ := testenv.MustRedis(t) // own client; the shared prefix comes from the caller
	store := mustOpenControl(t, dsn)
	in := &instance{cmp: comparator.New(comparator.Config{Log: store})}
	in.ctl = rollout.New(rollout.Config{
		PodConfigs: []rollout.PodConfig{{Name: "pod-a", Mode: tandem.ModeRedis}, {Name: "pod-b", Mode: tandem.ModeShadow}},
		Gates:      rollout.Gates{MinComparisons: 10, MaxDivergenceRate: 0.01, Window: time.Minute, AbortDivergenceRate: 0.05, AbortMinComparisons: 20},
		InstanceID: id, PollInterval: 20 * time.Millisecond, AbortInterval: time.Hour, PlanInterval: time.Hour,
	}, store)
	in.ctl.Comparator = in.cmp
	in.sw = killswitch.New(killswitch.Config{Pods: []string{"pod-a", "pod-b"}, Channel: redisres.NewKillSwitchChannel(rdb, redisPrefix),
		Modes: in.ctl, AuditLog: store, PollInterval: 20 * time.Millisecond})
	in.ctl.Switch = in.sw
	in.cmp.Open()
	if err := in.sw.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := in.ctl.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.ctl.Close()
		in.sw.Close()
		in.cmp.Close()
	})
	return in
}

func TestControlPlane_TwoInstances(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)
	_, prefix := testenv.MustRedis(t)
	a := mustOpenInstance(t, dsn, prefix, "a")
	b := mustOpenInstance(t, dsn, prefix, "b")

	// A promotes pod-b past its gates; B applies it.
	if _, _, err := a.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: change, Mode: tandem.ModeMySQL, Force: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod-b on mysql at b", func() bool { return b.ctl.Mode("pod-b") == tandem.ModeMySQL })

	// A sees pod-b's MySQL diverge and trips its kill switch; B follows.
	for i := range 40 {
		var kind tandem.DivergenceKind
		if i%4 == 0 {
			kind = tandem.KindOutcomeMismatch
		}
		a.cmp.Record(tandem.Comparison{Pod: "pod-b", Op: tandem.OpReserve, Kind: kind, SourceOfTruth: tandem.StoreMySQL,
			Primary: tandem.Outcome{Store: tandem.StoreMySQL, Status: "reserved"}, Shadow: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved"}})
	}
	if tripped := a.ctl.CheckAbort(ctx); !slices.Equal(tripped, []string{"pod-b"}) {
		t.Fatalf("tripped: got %v, want [pod-b]", tripped)
	}
	waitFor(t, "kill switch at b", func() bool { return b.sw.Engaged("pod-b") })
	st, err := b.ctl.Pod(ctx, "pod-b")
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != tandem.ModeMySQL || st.SourceOfTruth != tandem.StoreRedis || !st.KillSwitch {
		t.Errorf("b's pod-b: got %+v, want mode mysql served from Redis with the kill switch", st)
	}

	// While killed, B cannot move pod-b back to mysql, even forced.
	if _, _, err := b.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: change, Mode: tandem.ModeShadow}); err != nil {
		t.Fatal(err)
	}
	_, _, err = b.ctl.SetMode(ctx, "pod-b", tandem.ModeChange{Change: change, Mode: tandem.ModeMySQL, Force: true})
	if g, _ := tandem.ErrorDetails(err)["failed_gates"].([]string); !slices.Equal(g, []string{rollout.RefusedKillSwitch}) {
		t.Errorf("got %v (gates %v), want refused by the kill switch", err, g)
	}

	// The audit log holds every change, the automatic one by "auto".
	waitFor(t, "automatic abort in the audit log", func() bool {
		log, err := a.ctl.AuditLog(ctx, 100)
		if err != nil {
			return false
		}
		for _, e := range log {
			if e.Action == killswitch.ActionEngage && e.Actor == rollout.ActorAuto && e.Pod == "pod-b" && strings.Contains(e.Reason, "divergence rate") {
				return true
			}
		}
		return false
	})

	// The divergences A saw are persisted and listed by B.
	a.cmp.Close()
	ds, err := b.ctl.Divergences(ctx, tandem.DivergenceFilter{Pod: "pod-b", Kind: tandem.KindOutcomeMismatch})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 10 {
		t.Errorf("divergences: got %d, want 10", len(ds))
	}
}
