package replay_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/internal/replay"
	"github.com/tandemhq/tandem/internal/testenv"
)

var ctx = context.Background()

// gap separates the waves of the captured flash sale: longer than the
// engine needs to answer a wave on a busy machine, so that each wave of the
// replay sees the stock its capture saw.
const gap = time.Second

func line(item, qty int64, groups ...int64) tandem.LineRequest {
	return tandem.LineRequest{ItemID: item, Quantity: qty, GroupIDs: groups}
}

// mustCaptureFlashSale captures a small flash sale through a router: a hold
// from before the capture, waves of concurrent carts on a hot item (more
// carts than units), multi-line carts over two groups, claims, releases, a
// retried reserve, an unknown cart and a restock. Waves are apart in time,
// so that a replay at equal speed sees the same stock at each.
func mustCaptureFlashSale(t *testing.T) *capture.File {
	t.Helper()
	l := memres.NewLedger()
	sot := memres.NewStore(l)
	r := dualwrite.NewRouter("pod-a", tandem.ShopSet{}, memres.Solo{Store: sot}, memres.Solo{Store: memres.NewStore(l)})
	if err := r.Open(); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, p := range []struct {
		item, group, onHand int64
	}{{100, 1, 30}, {200, 1, 4}, {200, 2, 6}, {300, 1, 50}} {
		if _, err := r.SetOnHand(ctx, tandem.Key{ShopID: 1, ItemID: p.item, GroupID: p.group}, p.onHand); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Reserve(ctx, tandem.ReserveRequest{CartToken: "before", ShopID: 1, TTL: time.Hour, Lines: []tandem.LineRequest{line(300, 2, 1)}}); err != nil {
		t.Fatal(err)
	}
	rec := capture.NewRecorder(t.TempDir(), map[string]capture.Snapshot{"pod-a": func(ctx context.Context) (string, []capture.Position, []capture.Hold, error) {
		onHand, _ := l.ListOnHand(ctx)
		var ps []capture.Position
		for k, n := range onHand {
			ps = append(ps, capture.Position{Key: k, OnHand: n})
		}
		holds, _ := sot.ActiveHolds(ctx)
		var hs []capture.Hold
		for _, h := range holds {
			hs = append(hs, capture.Hold{ShopID: h.ShopID, CartToken: h.CartToken, ExpiresAt: h.ExpiresAt, Lines: h.Lines})
		}
		return tandem.StoreRedis, ps, hs, nil
	}})
	defer rec.Close()
	r.Tap = rec
	info, err := rec.StartCapture(ctx, "pod-a", tandem.CaptureRequest{Change: tandem.Change{Reason: "test"}, Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	wave := func(prefix string, n int, lines ...tandem.LineRequest) []string {
		var mu sync.Mutex
		var got []string
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				tok := fmt.Sprintf("%s-%d", prefix, i)
				if _, err := r.Reserve(ctx, tandem.ReserveRequest{CartToken: tok, ShopID: 1, TTL: 10 * time.Minute, Lines: lines}); err == nil {
					mu.Lock()
					got = append(got, tok)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		time.Sleep(gap)
		return got
	}
	settle := func(claim, release []string) {
		var wg sync.WaitGroup
		for _, tok := range claim {
			wg.Go(func() { r.Claim(ctx, 1, tok) })
		}
		for _, tok := range release {
			wg.Go(func() { r.Release(ctx, 1, tok) })
		}
		wg.Wait()
		time.Sleep(gap)
	}
	// Every cart of a wave is settled alike, so that the counts do not
	// depend on which carts won the race for the last units.
	all := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	wave("w1", 40, line(100, 1, 1))
	settle(all("w1", 40), nil)
	r.SetOnHand(ctx, tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}, 20)
	time.Sleep(gap)
	wave("w2", 25, line(100, 1, 1))
	settle(nil, all("w2", 25))
	wave("m", 8, line(200, 2, 1, 2), line(300, 1, 1))
	settle(all("m", 8), nil)
	r.Claim(ctx, 1, "before")
	r.Reserve(ctx, tandem.ReserveRequest{CartToken: "before", ShopID: 1, TTL: time.Hour, Lines: []tandem.LineRequest{line(300, 2, 1)}})
	r.Claim(ctx, 1, "never-reserved")
	time.Sleep(gap)
	wave("w3", 30, line(100, 1, 1))
	rec.Close()
	rc, _, err := rec.OpenCapture(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	f, err := capture.ReadFile(rc)
	if err != nil {
		t.Fatal(err)
	}
	if f.End.Dropped != 0 || len(f.Header.Holds) != 1 {
		t.Fatalf("capture: %d dropped, %d holds at start; want 0 and 1", f.End.Dropped, len(f.Header.Holds))
	}
	return f
}

func rehearsal(t *testing.T, f *capture.File) *replay.Rehearsal {
	var progress bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(progress.String())
		}
	})
	return &replay.Rehearsal{File: f, ServerDSN: testenv.RootDSN(), Progress: &progress}
}

func TestRehearsal(t *testing.T) {
	testenv.RequireIntegration(t)
	f := mustCaptureFlashSale(t)

	t.Run("SameOutcomesAtEqualSpeed", func(t *testing.T) {
		res, err := rehearsal(t, f).Run(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops != len(f.Ops) || res.Errors != 0 || len(res.Violations) != 0 {
			t.Fatalf("got %d ops, %d errors, violations %v; want %d ops, none", res.Ops, res.Errors, res.Violations, len(f.Ops))
		}
		for _, s := range res.PerOp {
			if s.Op == tandem.OpReserve && fmt.Sprint(s.Captured) != "map[conflict:1 insufficient_inventory:28 reserved:75]" {
				t.Fatalf("captured reserves: got %v, want the flash sale's races (30 of 40, 20 of 25, 5 of 8, 20 of 30)", s.Captured)
			}
			if fmt.Sprint(s.Captured) != fmt.Sprint(s.Replayed) {
				t.Errorf("%s: got %v, want the capture's %v (p99 %.1f ms, max %.1f ms; diff %v)", s.Op, s.Replayed, s.Captured, s.P99MS, s.MaxMS, res.Diff.Examples)
			}
		}
		if !res.Held {
			t.Errorf("got held false (%s), want held", res.Verdict())
		}
		var text, page bytes.Buffer
		replay.WriteText(&text, res)
		if err := replay.WriteHTML(&page, res); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text.String(), "verdict: held") || !strings.Contains(page.String(), "<polyline") {
			t.Errorf("got report %q and a page without a chart", text.String())
		}
		if len(res.ConnHoldMS) == 0 || res.ConnHoldMS["reserve"].Count == 0 {
			t.Errorf("got connection holds %v, want the engine's reserve holds", res.ConnHoldMS)
		}
	})

	t.Run("InvariantsHoldAtFourTimes", func(t *testing.T) {
		res, err := rehearsal(t, f).Run(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || len(res.Violations) != 0 {
			t.Fatalf("got %d errors, violations %v; want none", res.Errors, res.Violations)
		}
		var reserved int
		for _, s := range res.PerOp {
			if s.Op == tandem.OpReserve {
				reserved = s.Replayed[tandem.StatusOf(tandem.StatusReserved)]
			}
		}
		if reserved == 0 {
			t.Errorf("got no reserve granted at 4x")
		}
	})

	t.Run("ErrNotScratch", func(t *testing.T) {
		dsn := testenv.MustCreateDatabase(t)
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec("CREATE TABLE precious (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		h := rehearsal(t, f)
		h.MySQLDSN = dsn
		_, err = h.Run(ctx, 1)
		if !errors.Is(err, replay.ErrNotScratch) {
			t.Fatalf("got %v, want ErrNotScratch", err)
		}
		var n int
		db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n)
		if n != 1 {
			t.Errorf("got %d tables after the refusal, want the 1 it had", n)
		}
	})
}
