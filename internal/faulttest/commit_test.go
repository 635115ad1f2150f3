package faulttest_test

import (
	"fmt"
	"testing"

	"github.com/tandemhq/tandem"
)

// TestCommitAmbiguity cuts the connection between a COMMIT and its answer
// (and, for contrast, before the COMMIT reaches the server): the store
// cannot know whether its transaction committed. It reruns it once on a
// fresh connection (every flow is keyed by its cart), and the rerun finds
// what the first run did: the call answers as if nothing broke, replayed
// when the first run had committed. When the rerun's connection breaks
// too, the caller sees unavailable; its retry of the same request (same
// cart token, same lines) and of the same claim must neither hold twice
// nor deduct twice.
func TestCommitAmbiguity(t *testing.T) {
	for _, tc := range []struct {
		name      string
		delivered bool
	}{
		{"AnswerLost", true},  // committed, the client cannot know
		{"CommitLost", false}, // never committed
	} {
		for _, cuts := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%dCuts", tc.name, cuts), func(t *testing.T) {
				t.Run("MySQLReserveAndClaim", func(t *testing.T) {
					// mysql_only: the engine alone, so that Replayed tells whether
					// the cut commit landed. With a Redis shadow, the shadow's
					// claim of a cart whose SoT claim failed deducts the ledger
					// itself (SettleUnavailableChangesNothing), and the retry
					// answers a replay either way.
					p := mustOpenFaultPod(t, tandem.ModeMySQLOnly, podOptions{commitCutter: true})
					p.mustStock(t, 10, 1)

					p.cutter.ArmTimes("reserve", tc.delivered, cuts)
					res, err := p.reserve(t, "amb", line(1, 3))
					if got := p.cutter.Cuts(); got != int64(cuts) {
						t.Fatalf("got %d cut commits, want %d (the reserve's)", got, cuts)
					}
					if cuts == 2 {
						wantCode(t, "reserve whose commit was cut twice", err, tandem.EUNAVAILABLE)
						if res, err = p.reserve(t, "amb", line(1, 3)); err != nil {
							t.Fatalf("retried reserve: %v", err)
						}
					} else if err != nil {
						t.Fatalf("reserve whose commit was cut once: %v, want it rerun on a fresh connection", err)
					}
					if res.Replayed != tc.delivered {
						t.Errorf("reserve: got replayed %v, want %v (the first run committed: %v)", res.Replayed, tc.delivered, tc.delivered)
					}
					if got := p.counters(t, p.mysql, 1); got.Reserved != 3 || got.Available != 7 {
						t.Errorf("mysql after the reserve: got reserved %d available %d, want 3 and 7 (held once)", got.Reserved, got.Available)
					}

					p.cutter.ArmTimes("claim", tc.delivered, cuts)
					res, err = p.claim(t, "amb")
					if got := p.cutter.Cuts(); got != int64(2*cuts) {
						t.Fatalf("got %d cut commits, want %d (the claim's)", got, 2*cuts)
					}
					if cuts == 2 {
						wantCode(t, "claim whose commit was cut twice", err, tandem.EUNAVAILABLE)
						if res, err = p.claim(t, "amb"); err != nil {
							t.Fatalf("retried claim: %v", err)
						}
					} else if err != nil {
						t.Fatalf("claim whose commit was cut once: %v, want it rerun on a fresh connection", err)
					}
					if res.Status != tandem.StatusClaimed || res.Replayed != tc.delivered {
						t.Errorf("claim: got %s replayed %v, want claimed replayed %v", res.Status, res.Replayed, tc.delivered)
					}
					if got := p.onHand(t, 1); got != 7 {
						t.Errorf("ledger: got on_hand %d, want 7 (deducted once)", got)
					}
					if got := p.counters(t, p.mysql, 1); got.Reserved != 0 || got.Available != 7 {
						t.Errorf("mysql after the claim: got reserved %d available %d, want 0 and 7", got.Reserved, got.Available)
					}
					p.mustAuditClean(t)
				})

				// Redis claims in two steps; the first, the ledger's deduction
				// in MySQL, loses its answer here. The claim (rerun, or
				// retried) must finish the second step without deducting
				// again.
				t.Run("RedisClaimLedgerDeduction", func(t *testing.T) {
					p := mustOpenFaultPod(t, tandem.ModeRedis, podOptions{commitCutter: true})
					p.mustStock(t, 10, 1)
					if _, err := p.reserve(t, "amb", line(1, 4)); err != nil {
						t.Fatal(err)
					}
					p.cutter.ArmTimes("ledger", tc.delivered, cuts)
					res, err := p.claim(t, "amb")
					if got := p.cutter.Cuts(); got != int64(cuts) {
						t.Fatalf("got %d cut commits, want %d (the ledger deduction's)", got, cuts)
					}
					if cuts == 2 {
						wantCode(t, "claim whose ledger commit was cut twice", err, tandem.EUNAVAILABLE)
						if res, err := p.get(t, "amb"); err != nil || res.Status != tandem.StatusReserved {
							t.Errorf("cart after the cut claim: got %v, %v, want still reserved in Redis", res, err)
						}
						if res, err = p.claim(t, "amb"); err != nil {
							t.Fatalf("retried claim: %v", err)
						}
					} else if err != nil {
						t.Fatalf("claim whose ledger commit was cut once: %v, want it rerun on a fresh connection", err)
					}
					if res.Status != tandem.StatusClaimed {
						t.Errorf("claim: got %s, want claimed", res.Status)
					}
					if got := p.onHand(t, 1); got != 6 {
						t.Errorf("ledger: got on_hand %d, want 6 (deducted once)", got)
					}
					got := p.counters(t, p.redis, 1)
					if got.OnHand != 6 || got.Reserved != 0 || got.Available != 6 {
						t.Errorf("redis: got on_hand %d reserved %d available %d, want 6 0 6", got.OnHand, got.Reserved, got.Available)
					}
					p.mustAuditClean(t)
				})
			})
		}
	}
}
