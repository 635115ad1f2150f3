package rollout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

var why = tandem.Change{Actor: "alice", Reason: "rollout step"}

func TestController_Open(t *testing.T) {
	ctx := context.Background()
	t.Run("ConfiguredModesOnFirstStart", func(t *testing.T) {
		e := newEnv(t, newMemStore())
		if got := e.ctl.Mode("pod-a"); got != tandem.ModeRedis {
			t.Errorf("pod-a: got %s, want redis", got)
		}
		if got := e.ctl.Mode("pod-x"); got != "" {
			t.Errorf("unknown pod: got %q, want empty", got)
		}
	})

	t.Run("PersistedModeWins", func(t *testing.T) {
		store := newMemStore()
		e := newEnv(t, store)
		if _, _, err := e.ctl.SetMode(ctx, "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow}); err != nil {
			t.Fatal(err)
		}
		e.ctl.Close()
		again := newEnv(t, store) // config still says redis
		if got := again.ctl.Mode("pod-a"); got != tandem.ModeShadow {
			t.Errorf("after restart: got %s, want shadow", got)
		}
	})

	t.Run("ErrStoreDown", func(t *testing.T) {
		store := newMemStore()
		store.fail(errDown)
		c := rollout.New(rollout.Config{PodConfigs: []rollout.PodConfig{{Name: "pod-a", Mode: tandem.ModeRedis}}}, store)
		if err := c.Open(ctx); !errors.Is(err, errDown) {
			t.Errorf("got %v, want %v", err, errDown)
		}
		c.Close()
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not observed", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestController_OtherInstanceFollows(t *testing.T) {
	store := newMemStore()
	a := newEnv(t, store)
	b := newEnv(t, store)
	if _, _, err := a.ctl.SetMode(context.Background(), "pod-a", tandem.ModeChange{Change: why, Mode: tandem.ModeShadow}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod-a in shadow on b", func() bool { return b.ctl.Mode("pod-a") == tandem.ModeShadow })
	waitFor(t, "b at a's version", func() bool { return b.ctl.Version() == a.ctl.Version() })
}
