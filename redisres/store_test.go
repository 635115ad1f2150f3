package redisres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/redisres"
)

var ctx = context.Background()

func TestStore_Unavailable(t *testing.T) {
	mr := miniredis.RunT(t)
	// No retries: the answer is the same, only sooner.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	e := MustOpenStoreOn(t, rdb, "t:", memres.NewLedger(), newClock())
	e.MustStock(t, key(1, 100, 1), 10)
	mr.Close()
	_, err := e.Reserve(ctx, cartReq("c-1", line(100, 1, 1)))
	wantCode(t, err, tandem.EUNAVAILABLE)
	_, err = e.Counters(ctx, key(1, 100, 1))
	wantCode(t, err, tandem.EUNAVAILABLE)
	_, err = e.ExpireDue(ctx, e.Clock.Now(), 10)
	wantCode(t, err, tandem.EUNAVAILABLE)

	t.Run("DeadlineExceeded", func(t *testing.T) {
		c, cancel := context.WithCancel(ctx)
		cancel()
		_, err := e.Get(c, 1, "c-1")
		wantCode(t, err, tandem.EUNAVAILABLE)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want it to wrap context.Canceled", err)
		}
	})
}

func TestStore_Metrics(t *testing.T) {
	e, _ := MustOpenStore(t)
	e.MustStock(t, key(1, 100, 1), 1)
	e.MustReserve(t, cartReq("c-1", line(100, 1, 1)))
	e.Reserve(ctx, cartReq("c-2", line(100, 1, 1)))
	families, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, f := range families {
		if f.GetName() == "tandem_redis_op_duration_seconds" {
			n = len(f.GetMetric())
		}
	}
	// set_on_hand/ok, reserve/ok, reserve/insufficient_inventory
	if n != 3 {
		t.Errorf("series: got %d, want 3", n)
	}

	t.Run("CloseTwiceAndReopen", func(t *testing.T) {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("second close: got %v, want nil", err)
		}
		s := redisres.NewStore(e.RDB, e.Ledger)
		s.Registerer = e.Registry
		if err := s.Open(ctx); err != nil {
			t.Fatalf("open on the registry of a closed store: %v", err)
		}
		s.Close()
	})

	t.Run("NoRegisterer", func(t *testing.T) {
		s := redisres.NewStore(e.RDB, e.Ledger)
		if err := s.Open(ctx); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Counters(ctx, key(1, 100, 1)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestStore_InternalErrors(t *testing.T) {
	t.Run("WrongTypeIsInternal", func(t *testing.T) {
		// A server that answers, wrongly, is a bug to log, not an outage.
		e, _ := MustOpenStore(t)
		if err := e.RDB.Set(ctx, e.Prefix+"{1}:item:100:1", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := e.Counters(ctx, key(1, 100, 1))
		wantCode(t, err, tandem.EINTERNAL)
	})

	t.Run("PrefixWithBraces", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		s := redisres.NewStore(e.RDB, e.Ledger)
		s.Prefix = "{pod}:"
		wantCode(t, s.Open(ctx), tandem.EINVALID)
	})

	t.Run("ErrInvalidSettings", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		for name, set := range map[string]func(*redisres.Store){
			"Retention": func(s *redisres.Store) { s.Retention = 0 },
			"NoClock":   func(s *redisres.Store) { s.Now = nil },
		} {
			t.Run(name, func(t *testing.T) {
				s := redisres.NewStore(e.RDB, e.Ledger)
				set(s)
				wantCode(t, s.Open(ctx), tandem.EINVALID)
				if err := s.Close(); err != nil {
					t.Fatalf("Close after a refused Open: got %v, want nil", err)
				}
			})
		}
	})
}
