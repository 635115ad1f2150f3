package mysqlres_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
)

// admissions counts the waits it is told.
type admissions struct{ n atomic.Int64 }

func (a *admissions) ObserveAdmission(time.Duration) { a.n.Add(1) }

// TestLoad_Signals checks the throttle's signals from MySQL: the server's
// Threads_running, the buyers' admission waits, and a replica's lag from
// the heartbeat row (the primary read as its own replica here, its row
// aged by hand).
func TestLoad_Signals(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)
	adm := &admissions{}
	s := mysqlres.NewStore(dsn)
	s.Admissions = adm
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	t.Run("ThreadsRunning", func(t *testing.T) {
		n, err := s.ThreadsRunning(ctx)
		if err != nil || n < 1 {
			t.Fatalf("got %d, %v; want at least 1 (the statement itself)", n, err)
		}
	})
	t.Run("Admissions", func(t *testing.T) {
		k := tandem.Key{ShopID: 1, ItemID: 1, GroupID: 1}
		if _, err := s.SetOnHand(ctx, k, 5); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(ctx, tandem.ReserveRequest{CartToken: "c", ShopID: 1,
			Lines: []tandem.LineRequest{{ItemID: 1, Quantity: 1, GroupIDs: []int64{1}}}}); err != nil {
			t.Fatal(err)
		}
		if adm.n.Load() == 0 {
			t.Fatal("a reserve told no admission wait")
		}
	})
	t.Run("ReplicaLag", func(t *testing.T) {
		r, err := mysqlres.OpenReplica(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Lag(ctx); err == nil {
			t.Fatal("a replica without the heartbeat row has a lag, want an error")
		}
		if err := s.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		if lag, err := r.Lag(ctx); err != nil || lag >= time.Minute {
			t.Fatalf("lag after a beat: %v, %v", lag, err)
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, "UPDATE tandem_heartbeat SET beat_at = UTC_TIMESTAMP(6) - INTERVAL 5 SECOND"); err != nil {
			t.Fatal(err)
		}
		if lag, err := r.Lag(ctx); err != nil || lag < 5*time.Second {
			t.Fatalf("lag of a row 5s old: %v, %v; want at least 5s", lag, err)
		}
	})
}

// countingThrottle counts the pages that asked it.
type countingThrottle struct{ n atomic.Int64 }

func (c *countingThrottle) Wait(context.Context, string) error {
	c.n.Add(1)
	return nil
}

// TestCheckInvariants_AsksTheThrottle checks that the invariant check
// asks the pod's throttle between its statements, each on a connection of
// its own, and still finds nothing wrong on a clean store.
func TestCheckInvariants_AsksTheThrottle(t *testing.T) {
	s := MustOpenStore(t)
	mustSetOnHand(t, s, tandem.Key{ShopID: 1, ItemID: 1, GroupID: 1}, 5)
	th := &countingThrottle{}
	vs, err := s.CheckInvariants(tandem.WithThrottle(context.Background(), th, tandem.JobAudit))
	if err != nil || len(vs) != 0 {
		t.Fatalf("got %v, %v; want no violation", vs, err)
	}
	if n := th.n.Load(); n != 2 {
		t.Fatalf("the throttle was asked %d times, want between the three statements (2)", n)
	}
}
