package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

func TestController_KillSwitchStatus(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, newMemStore(), tandem.ModeRedis, tandem.ModeMySQL, tandem.ModeShadow)
	if _, err := e.ctl.EngageKillSwitch(ctx, []string{"pod-b"}, why); err != nil {
		t.Fatal(err)
	}
	st, _ := e.ctl.Pod(ctx, "pod-b")
	if st.Mode != tandem.ModeMySQL || st.SourceOfTruth != tandem.StoreRedis || st.Shadow != tandem.StoreMySQL || !st.KillSwitch {
		t.Errorf("got %+v, want mode mysql served as shadow with the kill switch", st)
	}
	ks, _ := e.ctl.KillSwitch(ctx)
	if !ks.Engaged {
		t.Error("kill switch state not engaged")
	}
}

func TestController_Instances(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	e := newEnv(t, store)
	store.Heartbeat(ctx, "old", e.clk.Now().Add(-time.Minute), 0)
	store.Heartbeat(ctx, "test", e.clk.Now(), 3)
	ins, err := e.ctl.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stale := map[string]bool{}
	for _, in := range ins {
		stale[in.ID] = in.Stale
	}
	if len(stale) != 2 || !stale["old"] || stale["test"] {
		t.Errorf("got %v, want old stale and test fresh", stale)
	}
}

func TestController_ReportAndDivergences(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, newMemStore())
	e.record("pod-b", 10, 1)
	rs, _ := e.ctl.Report(ctx)
	if len(rs) != 3 || rs[1].Pod != "pod-b" || rs[1].Comparisons != 10 || rs[1].Mode != tandem.ModeShadow || rs[1].Window != "15m" {
		t.Errorf("got %+v, want pod-b with 10 comparisons in shadow over 15m", rs)
	}
	if _, err := e.ctl.Divergences(ctx, tandem.DivergenceFilter{Pod: "pod-x"}); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
		t.Errorf("unknown pod filter: got %v, want %s", err, tandem.EUNKNOWNPOD)
	}
	if _, err := e.ctl.Divergences(ctx, tandem.DivergenceFilter{Kind: "weird"}); tandem.ErrorCode(err) != tandem.EINVALID {
		t.Errorf("unknown kind filter: got %v, want %s", err, tandem.EINVALID)
	}
	ds, err := e.ctl.Divergences(ctx, tandem.DivergenceFilter{})
	if err != nil || ds == nil {
		t.Errorf("got %v %v, want an empty list without a log", ds, err)
	}
	if _, err := e.ctl.Resync(ctx, "pod-b", "redis", why); tandem.ErrorCode(err) != tandem.EINVALID {
		t.Errorf("resync from redis: got %v, want %s", err, tandem.EINVALID)
	}
	if _, err := e.ctl.Resync(ctx, "pod-b", "mysql", why); tandem.ErrorCode(err) != tandem.ETRANSITIONREFUSED {
		t.Errorf("resync of a shadow pod: got %v, want %s", err, tandem.ETRANSITIONREFUSED)
	}
}
