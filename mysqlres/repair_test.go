package mysqlres_test

import (
	"context"
	"testing"
)

// TestRepair: a pool that lost rows shows in Records (pool plus unpooled
// below on_hand less holds); Repair sets unpooled again and refills the
// pool, and the store's invariants hold again.
func TestRepair(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	k := key(100, 1)
	mustSetOnHand(t, s, k, 10)
	if _, err := s.Reserve(ctx, reserve1("c-1", 100, 2, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, "DELETE FROM unit_pool WHERE shop_id = 1 AND inventory_item_id = 100 AND inventory_group_id = 1 LIMIT 5"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Records(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if r.Consistent() || r.Available != 8 || r.Sellable != 3 {
		t.Fatalf("records of a pool that lost 5 rows: got %+v, want inconsistent: available 8, sellable 3", *r)
	}
	if r, err = s.Repair(ctx, k); err != nil {
		t.Fatal(err)
	}
	if !r.Consistent() || r.Available != 8 || r.Sellable != 8 || r.Reserved != 2 {
		t.Fatalf("after Repair: got %+v, want 8 available and sellable, 2 held", *r)
	}
	MustHaveNoViolations(t, s)
	if _, err := s.Reserve(ctx, reserve1("c-2", 100, 8, 1)); err != nil {
		t.Fatalf("after Repair the 8 units sell: %v", err)
	}
}
