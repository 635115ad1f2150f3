package redisres_test

import (
	"testing"
)

// TestStore_RecordsAndRepair: a counter set by hand shows in Records as a
// counter that disagrees with its own on_hand and holds; Repair sets it
// again from them (not from the ledger) and leaves the holds alone.
func TestStore_RecordsAndRepair(t *testing.T) {
	e := MustOpenRealStore(t)
	k := key(1, 100, 1)
	e.MustStock(t, k, 10)
	e.MustReserve(t, cartReq("c-1", line(100, 3, 1)))
	r, err := e.Records(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Consistent() || r.Available != 7 || r.Sellable != 7 || r.Reserved != 3 {
		t.Fatalf("records before the drift: got %+v, want 7 available and sellable, 3 held", *r)
	}
	if err := e.RDB.HSet(ctx, e.Prefix+"{1}:item:100:1", "available", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err = e.Records(ctx, k); err != nil {
		t.Fatal(err)
	}
	if r.Consistent() || r.Available != 0 || r.Sellable != 7 {
		t.Fatalf("records of a counter set to 0: got %+v, want inconsistent: available 0, sellable 7", *r)
	}
	if r, err = e.Repair(ctx, k); err != nil {
		t.Fatal(err)
	}
	if !r.Consistent() || r.Available != 7 || r.Reserved != 3 {
		t.Fatalf("after Repair: got %+v, want 7 available, 3 held", *r)
	}
	e.WantCounters(t, k, 10, 3, 7)
	e.WantClean(t)
}
