package mysqlres_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// A preferred group whose units are only locked (by a transaction that
// rolls back, such as a retried reserve that finds its token taken at its
// insert) is not passed over for the next group, even when the position
// was just seen drained: the line goes to the first group that covers it.
func TestReservePassOver(t *testing.T) {
	t.Run("PreferredGroupLockedByRollback", func(t *testing.T) {
		ctx := context.Background()
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 2), 1)
		mustSetOnHand(t, s, key(100, 1), 1) // refilled whole: seen drained
		holder, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		var id int64
		if err := holder.QueryRowContext(ctx, "SELECT id FROM unit_pool WHERE shop_id = 1 AND inventory_item_id = 100 AND inventory_group_id = 1 FOR UPDATE").Scan(&id); err != nil {
			t.Fatal(err)
		}
		type answer struct {
			res *tandem.Reservation
			err error
		}
		done := make(chan answer, 1)
		go func() {
			res, err := s.Reserve(ctx, reserve1("c", 100, 1, 1, 2))
			done <- answer{res, err}
		}()
		// The reserve either waits for the locked unit (right) or answers
		// at once from group 2 (wrong).
		var early *answer
		for deadline := time.Now().Add(30 * time.Second); early == nil && time.Now().Before(deadline); {
			var n int
			if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
				WHERE DB = DATABASE() AND INFO LIKE '%reserve_slow%SELECT id FROM unit_pool%FOR UPDATE'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			select {
			case a := <-done:
				early = &a
			case <-time.After(10 * time.Millisecond):
			}
		}
		if early != nil {
			t.Fatalf("got %+v, %v before the locked unit was released, want the reserve to wait for it", early.res, early.err)
		}
		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		a := <-done
		if a.err != nil {
			t.Fatal(a.err)
		}
		if got := a.res.Lines[0].GroupID; got != 1 {
			t.Errorf("got group %d, want 1 (the first group that covers the line)", got)
		}
	})
}
