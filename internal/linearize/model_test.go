package linearize_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/linearize"
	"github.com/tandemhq/tandem/internal/memres"
)

// small is one item stocked 1 in group 10 and 2 in group 20.
var small = linearize.Config{
	ShopID: 1, Items: []int64{100}, Groups: []int64{10, 20}, OnHand: []int64{1, 2},
	Prefs: [][]int{{0}, {0, 1}, {1}}, Carts: 8,
}

// op builds a recorded call of cart n on the item of small.
func op(client int, call, ret int64, in linearize.Input, out linearize.Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func reserve(cart int, qty int64, pref int) linearize.Input {
	return linearize.Input{Kind: linearize.Reserve, Cart: cart, Quantity: qty, Pref: pref}
}

func claim(cart int) linearize.Input {
	return linearize.Input{Kind: linearize.Claim, Cart: cart}
}

func release(cart int) linearize.Input {
	return linearize.Input{Kind: linearize.Release, Cart: cart}
}

func count(group int, onHand int64) linearize.Input {
	return linearize.Input{Kind: linearize.SetOnHand, Group: group, OnHand: onHand}
}

func held(st tandem.Status, group int, qty int64) linearize.Output {
	return linearize.Output{Status: st, Group: group, Quantity: qty}
}

func failed(code string) linearize.Output { return linearize.Output{Code: code, Group: -1} }

var (
	ok      = linearize.Output{Group: -1}
	unknown = linearize.Output{Unknown: true, Group: -1}
)

func TestModel(t *testing.T) {
	R, C, X := tandem.StatusReserved, tandem.StatusClaimed, tandem.StatusReleased
	tests := []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"ConcurrentLastUnitOneWinner", []porcupine.Operation{
			op(0, 0, 10, reserve(0, 1, 0), held(R, 0, 1)),
			op(1, 1, 9, reserve(1, 1, 0), failed(tandem.EINSUFFICIENT)),
		}, porcupine.Ok},
		{"ErrConcurrentLastUnitTwoWinners", []porcupine.Operation{
			op(0, 0, 10, reserve(0, 1, 0), held(R, 0, 1)),
			op(1, 1, 9, reserve(1, 1, 0), held(R, 0, 1)),
		}, porcupine.Illegal},
		{"GroupPreferenceFallsBackWhole", []porcupine.Operation{
			op(0, 0, 1, reserve(0, 1, 1), held(R, 0, 1)),
			op(0, 2, 3, reserve(1, 2, 1), held(R, 1, 2)),
			op(0, 4, 5, reserve(2, 1, 1), failed(tandem.EINSUFFICIENT)),
		}, porcupine.Ok},
		{"ErrLineSplitAcrossGroups", []porcupine.Operation{
			op(0, 0, 1, reserve(0, 2, 0), held(R, 0, 2)),
		}, porcupine.Illegal},
		{"ErrFalseSoldOut", []porcupine.Operation{
			op(0, 0, 1, reserve(0, 1, 0), held(R, 0, 1)),
			op(0, 2, 3, release(0), held(X, 0, 1)),
			op(0, 4, 5, reserve(1, 1, 0), failed(tandem.EINSUFFICIENT)),
		}, porcupine.Illegal},
		{"ReplayAnswersTheHeldGroup", []porcupine.Operation{
			op(0, 0, 1, reserve(0, 1, 1), held(R, 0, 1)),
			op(1, 2, 3, reserve(1, 1, 0), failed(tandem.EINSUFFICIENT)),
			op(0, 4, 5, reserve(0, 1, 1), held(R, 0, 1)),
			op(0, 6, 7, reserve(0, 2, 1), failed(tandem.ECONFLICT)),
		}, porcupine.Ok},
		{"ClaimDeductsOnce", []porcupine.Operation{
			op(0, 0, 1, reserve(0, 2, 2), held(R, 1, 2)),
			op(0, 2, 3, claim(0), held(C, 1, 2)),
			op(1, 4, 5, claim(0), held(C, 1, 2)),
			op(1, 6, 7, release(0), failed(tandem.EALREADYCLAIMED)),
			op(1, 8, 9, reserve(0, 2, 2), failed(tandem.ECONFLICT)),
			op(1, 10, 11, reserve(1, 1, 2), failed(tandem.EINSUFFICIENT)),
			op(1, 12, 13, count(1, 0), ok),
		}, porcupine.Ok},
		{"ErrClaimAndReleaseBothWin", []porcupine.Operation{
			op(0, 0, 1, reserve(0, 1, 0), held(R, 0, 1)),
			op(0, 2, 6, claim(0), held(C, 0, 1)),
			op(1, 3, 5, release(0), held(X, 0, 1)),
		}, porcupine.Illegal},
		{"SettleUnknownCarts", []porcupine.Operation{
			op(0, 0, 1, claim(3), failed(tandem.ENOTFOUND)),
			op(0, 2, 3, release(3), failed(tandem.ENOTFOUND)),
			op(0, 4, 5, reserve(3, 1, 0), held(R, 0, 1)),
			op(0, 6, 7, release(3), held(X, 0, 1)),
			op(0, 8, 9, release(3), held(X, 0, 1)),
			op(0, 10, 11, claim(3), failed(tandem.EGONE)),
		}, porcupine.Ok},
		{"StockCountBelowHeldConflicts", []porcupine.Operation{
			op(0, 0, 1, reserve(0, 2, 2), held(R, 1, 2)),
			op(0, 2, 3, count(1, 1), failed(tandem.ECONFLICT)),
			op(0, 4, 5, count(1, 3), ok),
			op(0, 6, 7, reserve(1, 1, 2), held(R, 1, 1)),
		}, porcupine.Ok},
		{"ErrStockCountBelowHeldApplied", []porcupine.Operation{
			op(0, 0, 1, reserve(0, 2, 2), held(R, 1, 2)),
			op(0, 2, 3, count(1, 1), ok),
		}, porcupine.Illegal},
		{"UnknownReserveThatHeld", []porcupine.Operation{
			op(0, 0, linearize.Infinity, reserve(0, 1, 0), unknown),
			op(1, 5, 6, reserve(1, 1, 0), failed(tandem.EINSUFFICIENT)),
			op(1, 7, 8, claim(0), held(C, 0, 1)),
		}, porcupine.Ok},
		{"UnknownReserveThatNeverHeld", []porcupine.Operation{
			op(0, 0, linearize.Infinity, reserve(0, 1, 0), unknown),
			op(1, 5, 6, reserve(1, 1, 0), held(R, 0, 1)),
			op(1, 7, 8, claim(0), failed(tandem.ENOTFOUND)),
		}, porcupine.Ok},
		{"ErrUnknownReserveCannotExplainTwoWinners", []porcupine.Operation{
			op(0, 0, linearize.Infinity, reserve(0, 1, 0), unknown),
			op(1, 5, 6, reserve(1, 1, 0), held(R, 0, 1)),
			op(1, 7, 8, reserve(2, 1, 0), held(R, 0, 1)),
		}, porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := porcupine.CheckOperations(linearize.Model(small), tt.ops)
			if want := tt.want == porcupine.Ok; got != want {
				t.Errorf("linearizable: got %v, want %v", got, want)
			}
		})
	}
}

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *linearize.Config)
	}{
		{"ErrNoItems", func(c *linearize.Config) { c.Items = nil }},
		{"ErrTooManyGroups", func(c *linearize.Config) { c.Groups = []int64{1, 2, 3, 4, 5} }},
		{"ErrOnHandPerGroup", func(c *linearize.Config) { c.OnHand = []int64{1} }},
		{"ErrPrefOutOfRange", func(c *linearize.Config) { c.Prefs = [][]int{{2}} }},
		{"ErrTooManyCarts", func(c *linearize.Config) { c.Carts = linearize.MaxCarts + 1 }},
	}
	if err := small.Validate(); err != nil {
		t.Fatalf("valid config: got %v, want nil", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := small
			tt.edit(&c)
			if err := c.Validate(); err == nil {
				t.Errorf("got nil, want an error")
			}
		})
	}
}

// workload is the shared shape of every run: two items, 2+2 units each,
// carts of 1-2 units, a handful of live tokens per item.
func workload(seed uint64) linearize.Workload {
	return linearize.Workload{
		Config: linearize.Config{
			ShopID: 7, Items: []int64{501, 502}, Groups: []int64{1, 2}, OnHand: []int64{2, 3},
			Prefs: [][]int{{0}, {1}, {0, 1}, {1, 0}}, Carts: 48,
		},
		Clients: 12, OpsPerClient: 30, Recent: 3, StockCounts: 0.08, Seed: seed,
	}
}

// mustRun stocks the target, runs the workload against it and returns the
// history; calls with an unknown outcome fail the test (every run here is
// against healthy servers).
func mustRun(t *testing.T, tgt linearize.Target, w linearize.Workload) *linearize.History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := linearize.Stock(ctx, tgt, w.Config); err != nil {
		t.Fatal(err)
	}
	h, err := linearize.Run(ctx, tgt, w)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.Unknown(); n != 0 {
		t.Errorf("got %d calls with an unknown outcome, want 0 against healthy servers (%v); errors: %q", n, h.Outcomes, h.Failures)
	}
	return h
}

// mustLinearizable checks the history and, when it is not linearizable,
// writes porcupine's visualization and logs its path.
func mustLinearizable(t *testing.T, w linearize.Workload, h *linearize.History) {
	t.Helper()
	v := linearize.Check(w.Config, h, 30*time.Second)
	if v.Result == porcupine.Ok {
		return
	}
	path, err := linearize.Visualize(w.Config, v, "")
	if err != nil {
		t.Logf("no visualization: %v", err)
	} else {
		t.Logf("visualization of the history: %s", path)
	}
	t.Log(linearize.Explain(w.Config, h, v))
	t.Errorf("got %s, want ok: the history of %d calls is not linearizable (outcomes %v)", v.Result, len(h.Operations), h.Outcomes)
}

// mustCover asserts the run met the cases worth checking: holds granted and
// refused at the sold-out boundary, settled both ways, and retried.
func mustCover(t *testing.T, h *linearize.History) {
	t.Helper()
	for _, o := range []string{"reserve:reserved", "reserve:insufficient_inventory", "reserve:conflict",
		"claim:claimed", "release:released"} {
		if h.Outcomes[o] == 0 {
			t.Errorf("got no %q in %v, want the run to reach it", o, h.Outcomes)
		}
	}
}

func TestRun_ReferenceModel(t *testing.T) {
	w := workload(1)
	h := mustRun(t, linearize.StoreTarget(memres.NewStore(nil)), w)
	mustCover(t, h)
	mustLinearizable(t, w, h)
}

// phantomHolds answers every other refused reserve with a hold it never
// took: an oversell.
type phantomHolds struct {
	tandem.ReservationStore
	n atomic.Int64
}

func (s *phantomHolds) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	res, err := s.ReservationStore.Reserve(ctx, req)
	if tandem.ErrorCode(err) == tandem.EINSUFFICIENT && s.n.Add(1)%2 == 0 {
		l := req.Lines[0]
		return &tandem.Reservation{CartToken: req.CartToken, ShopID: req.ShopID, Status: tandem.StatusReserved,
			Lines: []tandem.Line{{ItemID: l.ItemID, Quantity: l.Quantity, GroupID: l.GroupIDs[0]}}}, nil
	}
	return res, err
}

// doubleDeduct takes a claimed cart's units off on_hand a second time: an
// undersell.
type doubleDeduct struct{ tandem.ReservationStore }

func (s doubleDeduct) Claim(ctx context.Context, shopID int64, token string) (*tandem.Reservation, error) {
	res, err := s.ReservationStore.Claim(ctx, shopID, token)
	if err == nil && !res.Replayed {
		for _, l := range res.Lines {
			c, cerr := s.Counters(ctx, l.Key(shopID))
			if cerr == nil && c.Available >= l.Quantity {
				_, _ = s.ReservationStore.SetOnHand(ctx, l.Key(shopID), c.OnHand-l.Quantity)
			}
		}
	}
	return res, err
}

// falseSoldOut refuses every third reserve it could grant: an undersell.
type falseSoldOut struct {
	tandem.ReservationStore
	n atomic.Int64
}

func (s *falseSoldOut) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	res, err := s.ReservationStore.Reserve(ctx, req)
	if err == nil && !res.Replayed && s.n.Add(1)%3 == 0 {
		if _, err := s.ReservationStore.Release(ctx, req.ShopID, req.CartToken); err != nil {
			return nil, err
		}
		return nil, tandem.Errorf(tandem.EINSUFFICIENT, "sold out (falsely)")
	}
	return res, err
}

// TestRun_BrokenStoreIsCaught is the negative control: the checker must
// find the broken wrappers' histories illegal.
func TestRun_BrokenStoreIsCaught(t *testing.T) {
	tests := []struct {
		name string
		wrap func(tandem.ReservationStore) tandem.ReservationStore
	}{
		{"PhantomHold", func(s tandem.ReservationStore) tandem.ReservationStore { return &phantomHolds{ReservationStore: s} }},
		{"DoubleDeduct", func(s tandem.ReservationStore) tandem.ReservationStore { return doubleDeduct{s} }},
		{"FalseSoldOut", func(s tandem.ReservationStore) tandem.ReservationStore { return &falseSoldOut{ReservationStore: s} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := workload(2)
			// Stock enough that a claim leaves units to deduct twice, and no
			// counts, which would mend the double deduction.
			w.OnHand, w.StockCounts, w.OpsPerClient = []int64{5, 5}, 0, 100
			h := mustRun(t, linearize.StoreTarget(tt.wrap(memres.NewStore(nil))), w)
			v := linearize.Check(w.Config, h, 30*time.Second)
			if v.Result != porcupine.Illegal {
				t.Errorf("got %s, want illegal for a broken store (outcomes %v)", v.Result, h.Outcomes)
			}
		})
	}
}

// The opening reaches every outcome mustCover asks for, whatever the
// clients do after it: here one client making one call.
func TestRun_OpeningCoversEveryOutcome(t *testing.T) {
	w := workload(3)
	w.Clients, w.OpsPerClient = 1, 1
	h := mustRun(t, linearize.StoreTarget(memres.NewStore(nil)), w)
	mustCover(t, h)
	mustLinearizable(t, w, h)
}
