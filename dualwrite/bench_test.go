package dualwrite_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
	"github.com/tandemhq/tandem/dualwrite"
)

// instantStore grants every reserve at once with the groups asked first and
// keeps its holds in a map, so that a benchmark measures the router alone.
// Only what the shadow path and convergence call is implemented: the
// other methods of the embedded nil tandem.ShadowStore panic.
type instantStore struct {
	tandem.ShadowStore
	name  string
	holds sync.Map // token -> *tandem.Reservation
}

func (s *instantStore) Name() string { return s.name }

func (s *instantStore) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	lines := make([]tandem.Line, len(req.Lines))
	for i, l := range req.Lines {
		lines[i] = tandem.Line{ItemID: l.ItemID, Quantity: l.Quantity, GroupID: l.GroupIDs[0]}
	}
	res := &tandem.Reservation{CartToken: req.CartToken, ShopID: req.ShopID, Status: tandem.StatusReserved,
		ExpiresAt: time.Now().Add(req.TTL), Lines: lines}
	s.holds.Store(req.CartToken, res)
	c := *res
	return &c, nil
}

func (s *instantStore) Get(ctx context.Context, shopID int64, token string) (*tandem.Reservation, error) {
	v, ok := s.holds.Load(token)
	if !ok {
		return nil, tandem.Errorf(tandem.ENOTFOUND, "no cart %s", token)
	}
	c := *v.(*tandem.Reservation)
	return &c, nil
}

func (s *instantStore) Discard(ctx context.Context, shopID int64, token string) error {
	s.holds.Delete(token)
	return nil
}

// benchRouter opens a router in mode over two instant stores, with
// a comparator as its recorder.
func benchRouter(b *testing.B, mode tandem.Mode) (*dualwrite.Router, *comparator.Comparator) {
	b.Helper()
	shops, _ := tandem.ParseShopSet([]string{"1-1000"})
	r := dualwrite.NewRouter("pod-b", shops, &instantStore{name: tandem.StoreRedis}, &instantStore{name: tandem.StoreMySQL})
	m := &modes{}
	m.set(mode)
	r.Modes, r.Kill = m, &kill{}
	// Stores that answer at once let the loop outrun the shadow goroutines'
	// scheduling; a cap no run reaches keeps the drop path out of the figures.
	r.MaxInflight = 1 << 20
	cmp := comparator.New(comparator.Config{})
	r.Recorder = cmp
	if err := cmp.Open(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmp.Close() })
	if err := r.Open(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r, cmp
}

// reportShadow checks that every reserve was compared and reports the
// shadow operations dropped and timed out per reserve.
func reportShadow(b *testing.B, r *dualwrite.Router, cmp *comparator.Comparator, n int64) {
	r.Wait()
	b.StopTimer()
	st := cmp.Stats().Pods["pod-b"]
	if st.Comparisons != n {
		b.Fatalf("got %d comparisons, want %d", st.Comparisons, n)
	}
	b.ReportMetric(float64(st.Divergences[tandem.KindShadowDropped])/float64(n), "dropped/op")
	b.ReportMetric(float64(st.Divergences[tandem.KindShadowTimeout])/float64(n), "timeouts/op")
}

var benchLines = []tandem.LineRequest{{ItemID: 100, Quantity: 1, GroupIDs: []int64{1, 2}}}

// BenchmarkRouterReserveShadow is the cost of one reserve in shadow mode on
// two stores that answer at once: admission, the shadow job (its goroutine,
// its wait in the cart's line, its store call), the comparison and the
// comparator's count. dropped/op says how many shadow operations the
// in-flight cap dropped: 0, or the benchmark measures the drop path.
func BenchmarkRouterReserveShadow(b *testing.B) {
	r, cmp := benchRouter(b, tandem.ModeShadow)
	ctx := context.Background()
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		n++
		req := tandem.ReserveRequest{CartToken: "c-" + strconv.FormatInt(n, 10), ShopID: 1, Lines: benchLines}
		if _, err := r.Reserve(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	reportShadow(b, r, cmp, n)
}

// BenchmarkRouterReserveShadowParallel is BenchmarkRouterReserveShadow
// from GOMAXPROCS buyers at once: the router's and the comparator's locks
// are shared by all of them.
func BenchmarkRouterReserveShadowParallel(b *testing.B) {
	r, cmp := benchRouter(b, tandem.ModeShadow)
	ctx := context.Background()
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := tandem.ReserveRequest{CartToken: "c-" + strconv.FormatInt(n.Add(1), 10), ShopID: 1, Lines: benchLines}
			if _, err := r.Reserve(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportShadow(b, r, cmp, n.Load())
}

// BenchmarkRouterReserveRedis is the router's own cost in redis mode (no
// shadow): validation, admission in the cart's order and the fence, and
// the SoT call on an instant store.
func BenchmarkRouterReserveRedis(b *testing.B) {
	r, _ := benchRouter(b, tandem.ModeRedis)
	ctx := context.Background()
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		n++
		req := tandem.ReserveRequest{CartToken: "c-" + strconv.FormatInt(n, 10), ShopID: 1, Lines: benchLines}
		if _, err := r.Reserve(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
