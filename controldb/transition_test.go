package controldb_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/testenv"
)

// A copy's checkpoint survives the store (a restarted instance reads it
// with the transition), never goes back, belongs to the transition's owner
// alone, and a new transition of the pod starts from none.
func TestStore_TransitionCheckpoint(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)
	s := MustOpenStore(t, dsn)
	pt := tandem.PendingTransition{Pod: "pod-a", To: tandem.ModeShadow, Owner: "i1", Actor: "op", StartedAt: time.Now().UTC()}
	if err := s.BeginTransition(ctx, pt); err != nil {
		t.Fatal(err)
	}
	for _, at := range []tandem.BackfillCheckpoint{{Shop: 40, Copied: 4000}, {Shop: 20, Copied: 2000}} {
		if err := s.TransitionCheckpoint(ctx, "pod-a", "i1", at); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.TransitionCheckpoint(ctx, "pod-a", "someone-else", tandem.BackfillCheckpoint{Shop: 90, Copied: 9000}); err != nil {
		t.Fatal(err)
	}
	got := checkpointOf(t, MustOpenStore(t, dsn), "pod-a")
	if want := (tandem.BackfillCheckpoint{Shop: 40, Copied: 4000}); got != want {
		t.Errorf("checkpoint after a reopen: got %+v, want %+v (the owner's furthest)", got, want)
	}
	if err := s.BeginTransition(ctx, pt); err != nil {
		t.Fatal(err)
	}
	if got := checkpointOf(t, s, "pod-a"); got != (tandem.BackfillCheckpoint{}) {
		t.Errorf("checkpoint of a new transition: got %+v, want none", got)
	}
}

func checkpointOf(t *testing.T, s interface {
	PendingTransitions(context.Context) ([]tandem.PendingTransition, error)
}, pod string) tandem.BackfillCheckpoint {
	t.Helper()
	pts, err := s.PendingTransitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range pts {
		if pt.Pod == pod {
			return pt.Checkpoint
		}
	}
	t.Fatalf("no transition of %s", pod)
	return tandem.BackfillCheckpoint{}
}
