package capture_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/internal/memres"
)

var ctx = context.Background()

// mustOpenRouter returns a redis-mode router over in-memory stores with
// item 100 of shop 1 stocked with stock units.
func mustOpenRouter(tb testing.TB, stock int64) *dualwrite.Router {
	tb.Helper()
	l := memres.NewLedger()
	r := dualwrite.NewRouter("pod-a", tandem.ShopSet{}, memres.Solo{Store: memres.NewStore(l)}, memres.Solo{Store: memres.NewStore(l)})
	if err := r.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	if _, err := r.SetOnHand(ctx, tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}, stock); err != nil {
		tb.Fatal(err)
	}
	return r
}

func snapshotOf(positions ...capture.Position) capture.Snapshot {
	return func(ctx context.Context) (string, []capture.Position, []capture.Hold, error) {
		return tandem.StoreRedis, positions, nil, nil
	}
}

func mustNewRecorder(tb testing.TB) *capture.Recorder {
	tb.Helper()
	rec := capture.NewRecorder(tb.TempDir(), map[string]capture.Snapshot{
		"pod-a": snapshotOf(capture.Position{Key: tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}, OnHand: 5}),
	})
	tb.Cleanup(func() { rec.Close() })
	return rec
}

// answers reserves one unit for each of carts concurrently, then
// releases the reserved carts, and returns each cart's answer.
func answers(t *testing.T, r *dualwrite.Router, carts int) map[string]string {
	var mu sync.Mutex
	out := map[string]string{}
	var wg sync.WaitGroup
	for i := range carts {
		wg.Go(func() {
			tok := fmt.Sprintf("c-%d", i)
			res, err := r.Reserve(ctx, tandem.ReserveRequest{CartToken: tok, ShopID: 1,
				Lines: []tandem.LineRequest{{ItemID: 100, Quantity: 1, GroupIDs: []int64{1}}}})
			got := tandem.ErrorCode(err)
			if err == nil {
				got = string(res.Status)
			}
			mu.Lock()
			out[tok] = got
			mu.Unlock()
		})
	}
	wg.Wait()
	var held []string
	for tok, st := range out {
		if st == string(tandem.StatusReserved) {
			held = append(held, tok)
		}
	}
	for _, tok := range held {
		wg.Go(func() {
			_, err := r.Release(ctx, 1, tok)
			mu.Lock()
			out[tok] += "+released" + tandem.ErrorCode(err)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func count(m map[string]string) map[string]int {
	c := map[string]int{}
	for _, v := range m {
		c[v]++
	}
	return c
}

func TestRecorder(t *testing.T) {
	t.Run("DropsWhenFullWithoutChangingAnswers", func(t *testing.T) {
		rec := mustNewRecorder(t)
		rec.BufferSize = 4
		hold := make(chan struct{})
		capture.SetBeforeWrite(rec, func() { <-hold })
		r := mustOpenRouter(t, 50)
		r.Tap = rec
		info, err := rec.StartCapture(ctx, "pod-a", tandem.CaptureRequest{Change: tandem.Change{Reason: "test", Actor: "t"},
			Duration: time.Hour, MaxOps: 1000})
		if err != nil {
			t.Fatal(err)
		}
		// The writer is held: the buffer fills and the rest is dropped, and
		// no buyer waits for it.
		got := answers(t, r, 200)
		plain := answers(t, mustOpenRouter(t, 50), 200)
		if g, w := count(got), count(plain); fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("answers with a capture: got %v, want %v as without", g, w)
		}
		close(hold)
		rec.Close()
		list, _ := rec.Captures(ctx)
		if len(list) != 1 || list[0].ID != info.ID {
			t.Fatalf("got captures %+v, want %s", list, info.ID)
		}
		c := list[0]
		// 200 reserves and 50 releases were offered.
		if c.Dropped == 0 || c.Ops+c.Dropped != 250 || c.Ops < 4 {
			t.Errorf("got ops %d dropped %d, want drops and ops+dropped = 250", c.Ops, c.Dropped)
		}
		if c.State != tandem.CaptureDone || c.Ended != capture.EndedShutdown {
			t.Errorf("got state %s ended %q, want done by shutdown", c.State, c.Ended)
		}
		f := mustReadCapture(t, rec, info.ID)
		if int64(len(f.Ops)) != c.Ops || f.End.Dropped != c.Dropped {
			t.Errorf("file: got %d ops, %d dropped; want %d, %d", len(f.Ops), f.End.Dropped, c.Ops, c.Dropped)
		}
	})

	t.Run("RecordsOpsUpToMaxOps", func(t *testing.T) {
		rec := mustNewRecorder(t)
		r := mustOpenRouter(t, 5)
		r.Tap = rec
		info, err := rec.StartCapture(ctx, "pod-a", tandem.CaptureRequest{Change: tandem.Change{Reason: "test"},
			Duration: time.Hour, MaxOps: 8})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			r.Reserve(ctx, tandem.ReserveRequest{CartToken: fmt.Sprintf("c-%d", i), ShopID: 1,
				Lines: []tandem.LineRequest{{ItemID: 100, Quantity: 1, GroupIDs: []int64{1}}}})
		}
		for rec.Running("pod-a") {
			time.Sleep(time.Millisecond)
		}
		f := mustReadCapture(t, rec, info.ID)
		if len(f.Ops) != 8 || f.End.Ended != capture.EndedMaxOps {
			t.Fatalf("got %d ops ended %q, want 8 ended by max_ops", len(f.Ops), f.End.Ended)
		}
		st := map[tandem.OutcomeStatus]int{}
		for i, op := range f.Ops {
			st[op.Status]++
			if op.CartToken == fmt.Sprintf("c-%d", i) || len(op.CartToken) < 10 {
				t.Errorf("op %d: token %q is not hashed", i, op.CartToken)
			}
			if len(op.Lines) != 1 || op.TTL != tandem.DefaultTTL {
				t.Errorf("op %d: got lines %v ttl %s, want the request", i, op.Lines, op.TTL)
			}
		}
		if st["reserved"] != 5 || st[tandem.EINSUFFICIENT] != 3 {
			t.Errorf("got statuses %v, want 5 reserved, 3 insufficient", st)
		}
		if len(f.Header.Positions) != 1 || f.Header.Positions[0].OnHand != 5 {
			t.Errorf("got positions %v, want the snapshot's", f.Header.Positions)
		}
	})

	t.Run("ErrConflict", func(t *testing.T) {
		rec := mustNewRecorder(t)
		req := tandem.CaptureRequest{Change: tandem.Change{Reason: "test"}, Duration: time.Hour}
		info, err := rec.StartCapture(ctx, "pod-a", req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rec.StartCapture(ctx, "pod-a", req); tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Errorf("second capture: got %v, want conflict", err)
		}
		if _, _, err := rec.OpenCapture(ctx, info.ID); tandem.ErrorCode(err) != tandem.ECONFLICT {
			t.Errorf("download while running: got %v, want conflict", err)
		}
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		rec := mustNewRecorder(t)
		for _, req := range []tandem.CaptureRequest{
			{Change: tandem.Change{Reason: "x"}},
			{Change: tandem.Change{Reason: "x"}, Duration: 48 * time.Hour},
			{Change: tandem.Change{Reason: "x"}, Duration: time.Minute, MaxOps: -1},
			{Duration: time.Minute},
		} {
			if _, err := rec.StartCapture(ctx, "pod-a", req); tandem.ErrorCode(err) != tandem.EINVALID {
				t.Errorf("%+v: got %v, want invalid_request", req, err)
			}
		}
		if _, err := rec.StartCapture(ctx, "pod-x", tandem.CaptureRequest{Change: tandem.Change{Reason: "x"}, Duration: time.Minute}); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
			t.Errorf("unknown pod: got %v", err)
		}
		if list, _ := rec.Captures(ctx); len(list) != 0 {
			t.Errorf("got %d captures after refusals, want none", len(list))
		}
	})

	t.Run("ErrUnavailable", func(t *testing.T) {
		rec := capture.NewRecorder(t.TempDir(), map[string]capture.Snapshot{"pod-a": func(ctx context.Context) (string, []capture.Position, []capture.Hold, error) {
			return "", nil, nil, errors.New("mysql down")
		}})
		defer rec.Close()
		_, err := rec.StartCapture(ctx, "pod-a", tandem.CaptureRequest{Change: tandem.Change{Reason: "x"}, Duration: time.Minute})
		if tandem.ErrorCode(err) != tandem.EUNAVAILABLE {
			t.Errorf("got %v, want unavailable", err)
		}
	})
}

func mustReadCapture(tb testing.TB, rec *capture.Recorder, id string) *capture.File {
	tb.Helper()
	rc, _, err := rec.OpenCapture(ctx, id)
	if err != nil {
		tb.Fatal(err)
	}
	defer rc.Close()
	f, err := capture.ReadFile(rc)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}
