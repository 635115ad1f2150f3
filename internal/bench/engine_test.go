package bench_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/bench"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestEngine runs every store for a short cell; each cell ends by checking
// the store's invariants (conservation for mysql and redis, available +
// held = stock for naive), which fails the run when broken.
func TestEngine(t *testing.T) {
	testenv.RequireIntegration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := bench.Engine{Stores: []string{"redis", "mysql", "naive"}, Items: 2, CartSize: 2, Concurrency: []int{2},
		Duration: 200 * time.Millisecond, MySQLDSN: testenv.RootDSN(), Redis: bench.NewRedis(testenv.RedisAddr(), ""),
		Shops: 1, PoolCap: 100, MaxConns: 4}
	results, err := b.Run(ctx, io.Discard)
	if err != nil {
		t.Fatalf("got %v, want the cells (invariants hold after each)", err)
	}
	if len(results) != 3 {
		t.Fatalf("got %d results, want 3", len(results))
	}
	for _, r := range results {
		t.Run(r.Store, func(t *testing.T) {
			if r.OpsPerSec <= 0 || r.Errors != 0 {
				t.Errorf("got %v ops/s and %d errors (%s), want > 0 and 0", r.OpsPerSec, r.Errors, r.FirstError)
			}
			if r.CPUUSPerOp <= 0 || r.CPUUSPerOp < r.CPUUserUSPerOp {
				t.Errorf("got cpu %v us/op (user %v, sys %v), want > 0 and the sum", r.CPUUSPerOp, r.CPUUserUSPerOp, r.CPUSysUSPerOp)
			}
			_, mean := r.ConnHoldMS["reserve"]
			_, p99 := r.ConnHoldP99MS["reserve"]
			if want := r.Store == "mysql"; mean != want || p99 != want {
				t.Errorf("got reserve hold mean %v p99 %v, want both %v (the mysql engine's only)", mean, p99, want)
			}
			if r.Store == "mysql" && r.ConnHoldP99MS["reserve"] <= 0 {
				t.Errorf("got reserve hold p99 %v, want > 0", r.ConnHoldP99MS["reserve"])
			}
		})
	}
}
