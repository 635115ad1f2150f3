package mysqlres_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
)

// handlerReads are the session's row reads of the storage engine: what
// the server examined, whatever plan it chose.
var handlerReads = []string{"Handler_read_first", "Handler_read_key", "Handler_read_last",
	"Handler_read_next", "Handler_read_prev", "Handler_read_rnd", "Handler_read_rnd_next"}

// sessionReads returns the sum of conn's Handler_read_* counters.
func sessionReads(tb testing.TB, conn *sql.Conn) int64 {
	tb.Helper()
	q := "SHOW SESSION STATUS WHERE Variable_name IN ('" + strings.Join(handlerReads, "', '") + "')"
	rows, err := conn.QueryContext(context.Background(), q)
	if err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			tb.Fatal(err)
		}
		sum += v
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return sum
}

// rowsExamined runs q on conn, reads every row it answers and returns the
// rows the server read for it (less what reading the counters costs).
func rowsExamined(tb testing.TB, conn *sql.Conn, q string, args ...any) int64 {
	tb.Helper()
	ctx := context.Background()
	base := sessionReads(tb, conn)
	overhead := sessionReads(tb, conn) - base
	before := sessionReads(tb, conn)
	rows, err := conn.QueryContext(ctx, q, args...)
	if err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
	cols, err := rows.Columns()
	if err != nil {
		tb.Fatal(err)
	}
	vals := make([]any, len(cols))
	for i := range vals {
		vals[i] = new(sql.RawBytes)
	}
	for rows.Next() {
		if err := rows.Scan(vals...); err != nil {
			tb.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	rows.Close()
	return sessionReads(tb, conn) - before - overhead
}

// digitsSQL numbers 0..99,999 without a sequence table (MySQL 8.0 has none).
const digitsSQL = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
	"UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"

func numbersSQL() string {
	return "SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n FROM " +
		digitsSQL + " a, " + digitsSQL + " b, " + digitsSQL + " c, " + digitsSQL + " e, " + digitsSQL + " f"
}

// mustInsertReservations writes n one-line reservations of k numbered
// from 0 (tokens prefix-N) with status at expires, as traffic leaves them:
// the lines of a reserved one hold their unit (taken from k's unpooled
// count, as a reserve past the pool would), the others hold nothing.
func mustInsertReservations(tb testing.TB, s *mysqlres.Store, k tandem.Key, prefix string, status tandem.Status, n int, expires time.Time) {
	tb.Helper()
	mustInsertReservationsAs(tb, s, k, prefix, status, n, expires, true)
}

// mustInsertReservationsAs is mustInsertReservations, with the optimizer's
// statistics refreshed afterwards (analyze) or left as they were.
func mustInsertReservationsAs(tb testing.TB, s *mysqlres.Store, k tandem.Key, prefix string, status tandem.Status, n int, expires time.Time, analyze bool) {
	tb.Helper()
	ctx := context.Background()
	expires = expires.UTC().Truncate(time.Microsecond)
	nums := "(" + numbersSQL() + ") x WHERE x.n < ?"
	statusSQL, held := "ELT(1 + x.n % 3, 'claimed', 'released', 'expired')", 0
	if status == tandem.StatusReserved {
		statusSQL, held = "'reserved'", 1
	}
	stmts := []struct {
		q    string
		args []any
	}{
		{"INSERT INTO reservations (shop_id, cart_token, status, fingerprint, expires_at, created_at, updated_at) " +
			"SELECT ?, CONCAT(?, x.n), " + statusSQL + ", '', ?, ?, ? FROM " + nums,
			[]any{k.ShopID, prefix, expires, expires.Add(-time.Minute), expires.Add(-time.Minute), n}},
		{"INSERT INTO reservation_lines (shop_id, cart_token, line_no, inventory_item_id, inventory_group_id, quantity, held) " +
			"SELECT ?, CONCAT(?, x.n), 0, ?, ?, 1, ? FROM " + nums,
			[]any{k.ShopID, prefix, k.ItemID, k.GroupID, held, n}},
		{"UPDATE ledger SET unpooled = unpooled - ? WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?",
			[]any{held * n, k.ShopID, k.ItemID, k.GroupID}},
		// The optimizer's statistics, as InnoDB's background recount would
		// leave them some time after the rows came.
		{"ANALYZE TABLE reservations, reservation_lines", nil},
	}
	if !analyze {
		stmts = stmts[:len(stmts)-1]
	}
	for _, st := range stmts {
		if _, err := s.DB().ExecContext(ctx, st.q, st.args...); err != nil {
			tb.Fatalf("%s: %v", st.q, err)
		}
	}
}

// mustFreezeEmptyStatistics gives s's tables the optimizer's statistics of
// empty tables, kept (no background recount) until they are analyzed: what
// the optimizer believes of the tables right after a backfill filled them.
func mustFreezeEmptyStatistics(tb testing.TB, s *mysqlres.Store) {
	tb.Helper()
	for _, table := range []string{"reservations", "reservation_lines", "unit_pool", "ledger"} {
		for _, q := range []string{"ALTER TABLE " + table + " STATS_AUTO_RECALC = 0", "ANALYZE TABLE " + table} {
			if _, err := s.DB().ExecContext(context.Background(), q); err != nil {
				tb.Fatalf("%s: %v", q, err)
			}
		}
	}
}

// TestAuditPagesWithStaleStatistics: a page of the invariant checks reads
// its own shops' holds, not the pod's, while the optimizer still believes
// the tables empty (as after a backfill: InnoDB's background recount comes
// seconds later). MariaDB read every held line of the pod for each page of
// one shop through the ref on held = 1 alone, and joined the held flags'
// reservations through every ended one.
func TestAuditPagesWithStaleStatistics(t *testing.T) {
	const shops, perShop, poolCap = 40, 500, 10
	ctx := context.Background()
	s := MustOpenStore(t, func(s *mysqlres.Store) { s.PoolCap = poolCap })
	mustFreezeEmptyStatistics(t, s)
	for shop := int64(1); shop <= shops; shop++ {
		k := tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}
		mustSetOnHand(t, s, k, 2*perShop)
		mustInsertReservationsAs(t, s, k, "held-", tandem.StatusReserved, perShop, s.Now().Add(time.Hour), false)
		mustInsertReservationsAs(t, s, k, "ended-", tandem.StatusClaimed, perShop, s.Now().Add(-time.Hour), false)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A page of one shop in the middle: its holds, position and pool rows,
	// a few times over (joins, groupings, temporary tables).
	lo, hi := int64(shops/2-1), int64(shops/2)
	most := int64(15 * (perShop + 1 + poolCap))
	for _, st := range []struct {
		name string
		q    string
		args []any
	}{
		{"ListCounters", mysqlres.ListCountersSQL, []any{lo, hi}},
		{"Conservation", mysqlres.ConservationSQL, []any{lo, hi}},
		{"Orphans", mysqlres.OrphansSQL, []any{lo, hi, lo, hi}},
		{"HeldFlags", mysqlres.HeldFlagsSQL, []any{lo, hi}},
	} {
		if n := rowsExamined(t, conn, st.q, st.args...); n > most {
			t.Errorf("%s: a page of one shop of %d examined %d rows, want at most %d (the pod has %d holds)", st.name, shops, n, most, shops*perShop)
		}
	}
	MustHaveNoViolations(t, s)
}

// TestAuditReadsActiveRows checks that the audit's reads and a position's
// held sum examine rows in proportion to the active holds, the positions
// and the pool rows: what they examine does not grow when ended
// reservations are added (100,000 of them next to 40 holds; 40,000 next
// to 20,000 holds of the same position), and the holds of one position
// are not read once per position (5,000 holds of one position among 50).
func TestAuditReadsActiveRows(t *testing.T) {
	const positions, poolCap = 52, 10
	for _, tc := range []struct {
		name          string
		active, ended int
	}{
		{"EndedReservations", 40, 100_000},
		{"HotPosition", 5_000, 0},
		// Most lines of the table are the hot position's, held or not:
		// the held lines' range and a scan of the shop's lines look alike
		// to the optimizer's estimates, and so do the ended reservations'
		// range and the held lines.
		{"HotPositionAndEnded", 20_000, 40_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := MustOpenStore(t, func(s *mysqlres.Store) { s.PoolCap = poolCap })
			hot := key(100, 1)
			onHand := int64(10_000 + tc.active)
			mustSetOnHand(t, s, hot, onHand)
			mustSetOnHand(t, s, key(101, 1), 1000)
			for item := int64(1000); item < 1000+positions-2; item++ {
				mustSetOnHand(t, s, key(item, 1), 1)
			}
			for i := range 40 {
				if _, err := s.Reserve(ctx, reserve1(fmt.Sprintf("active-%d", i), 100+int64(i%2), 1, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.active > 40 {
				mustInsertReservations(t, s, hot, "hot-", tandem.StatusReserved, tc.active-40, s.Now().Add(time.Hour))
			}
			conn, err := s.DB().Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A position's held sum reads that position's held lines; the
			// others read each active line, position and pool row a few
			// times (joins, groupings and their temporary tables), not
			// once per position.
			hotHeld := int64(tc.active - 20)
			most := int64(15 * (tc.active + positions + positions*poolCap))
			// The invariant checks' page of every shop.
			lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
			statements := []struct {
				name string
				q    string
				args []any
				most int64
			}{
				{"ListCounters", mysqlres.ListCountersSQL, []any{lo, hi}, most},
				{"Conservation", mysqlres.ConservationSQL, []any{lo, hi}, most},
				{"Orphans", mysqlres.OrphansSQL, []any{lo, hi, lo, hi}, most},
				{"HeldFlags", mysqlres.HeldFlagsSQL, []any{lo, hi}, most},
				{"ReservedHeldFirstPage", mysqlres.ReservedHeldSQL, []any{mysqlres.ActiveHoldsPage}, most},
				{"ActiveHoldsFirstPage", mysqlres.ActiveHoldsFirstSQL, []any{mysqlres.ActiveHoldsPage}, most},
				{"ActiveHoldsNextPage", mysqlres.ActiveHoldsNextSQL, []any{s.Now(), s.Now(), 1, 1, "active-1", mysqlres.ActiveHoldsPage}, most},
				{"Counters", mysqlres.CountersSQL, []any{hot.ShopID, hot.ItemID, hot.GroupID, hot.ShopID, hot.ItemID, hot.GroupID}, 2*hotHeld + 100},
				{"HeldUnits", fmt.Sprintf(mysqlres.HeldSQL, "ledger"), []any{hot.ShopID, hot.ItemID, hot.GroupID}, 2*hotHeld + 100},
				// The expiry reaper's read, with a time of the wall clock
				// (nanoseconds) as ExpireDue gets it: nothing is due, so it
				// examines next to nothing, whatever the active holds.
				{"ExpireDue", mysqlres.DueReservationsSQL, []any{time.Now().Add(time.Nanosecond), 100}, 100},
			}
			examined := make([]int64, len(statements))
			for i, st := range statements {
				examined[i] = rowsExamined(t, conn, st.q, st.args...)
			}
			if tc.ended > 0 {
				mustInsertReservations(t, s, hot, "ended-", tandem.StatusClaimed, tc.ended, s.Now().Add(-time.Hour))
			}
			for i, st := range statements {
				n := rowsExamined(t, conn, st.q, st.args...)
				if n > st.most {
					t.Errorf("%s: got %d rows examined (%d active holds, %d ended), want at most %d", st.name, n, tc.active, tc.ended, st.most)
				}
				// What the ended reservations add: nothing but the odd
				// index page boundary.
				if grown := n - examined[i]; grown > int64(tc.ended/100+100) {
					t.Errorf("%s: got %d rows examined with %d ended reservations, %d without: want no growth", st.name, n, tc.ended, examined[i])
				}
			}

			// The answers are those of the active holds alone.
			holds, err := s.ActiveHolds(ctx)
			if err != nil || len(holds) != tc.active {
				t.Fatalf("ActiveHolds got %d holds, %v, want %d", len(holds), err, tc.active)
			}
			// Paced (the sweep's listing), the pages rest in between and
			// read the same holds.
			paced, err := s.ActiveHolds(tandem.WithPace(ctx, 0.5))
			if err != nil || !reflect.DeepEqual(paced, holds) {
				t.Fatalf("paced ActiveHolds got %d holds, %v; want the %d of the listing at full speed", len(paced), err, len(holds))
			}
			if c := mustCounters(t, s, hot); c.Reserved != int64(tc.active-20) || c.Available != onHand-int64(tc.active-20) {
				t.Fatalf("got %+v, want reserved %d", c, tc.active-20)
			}
		})
	}
}

// TestCheckInvariantsHeldFlags checks that the audit finds the lines held
// while their reservation is not reserved, and the reverse.
func TestCheckInvariantsHeldFlags(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, token, corrupt, repair, want string
	}{
		{"ReservedNotHeld", "active", "UPDATE reservation_lines SET held = 0 WHERE cart_token = 'active'",
			"UPDATE reservation_lines SET held = 1 WHERE cart_token = 'active'", "reservation reserved has 0 of 1 lines held"},
		{"ReleasedHeld", "gone", "UPDATE reservation_lines SET held = 1 WHERE cart_token = 'gone'",
			"UPDATE reservation_lines SET held = 0 WHERE cart_token = 'gone'", "reservation released has 1 of 1 lines held"},
		{"HeldWithoutLedger", "active", "UPDATE reservation_lines SET inventory_item_id = 999 WHERE cart_token = 'active'",
			"UPDATE reservation_lines SET inventory_item_id = 100 WHERE cart_token = 'active'", "held units without a ledger row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := MustOpenStore(t)
			mustSetOnHand(t, s, key(100, 1), 10)
			for _, token := range []string{"active", "gone"} {
				if _, err := s.Reserve(ctx, reserve1(token, 100, 1, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Release(ctx, 1, "gone"); err != nil {
				t.Fatal(err)
			}
			mustInsertReservations(t, s, key(100, 1), "ended-", tandem.StatusClaimed, 1000, s.Now().Add(-time.Hour))
			if _, err := s.DB().ExecContext(ctx, tc.corrupt); err != nil {
				t.Fatal(err)
			}
			vs, err := s.CheckInvariants(ctx)
			if _, rerr := s.DB().ExecContext(ctx, tc.repair); rerr != nil {
				t.Fatal(rerr)
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vs {
				got = append(got, v.CartToken+": "+v.Message)
				if strings.Contains(v.Message, tc.want) {
					return
				}
			}
			t.Fatalf("got violations %q, want one saying %q", got, tc.want)
		})
	}
}

// TestRebuildRefreshesStatistics: holds copied in bulk refresh the
// optimizer's statistics of the tables they fill, as the copy goes: the
// background recount comes seconds after the copy (never, here: it is off),
// and the audit that follows a copy would plan on empty tables.
func TestRebuildRefreshesStatistics(t *testing.T) {
	const shops, perShop = 20, 600
	ctx := context.Background()
	s := MustOpenStore(t)
	mustFreezeEmptyStatistics(t, s)
	expires := s.Now().Add(time.Hour)
	for shop := int64(1); shop <= shops; shop++ {
		k := tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}
		mustSetOnHand(t, s, k, perShop)
		holds := make([]tandem.Reservation, perShop)
		for i := range holds {
			holds[i] = tandem.Reservation{ShopID: shop, CartToken: fmt.Sprintf("h-%d", i), Status: tandem.StatusReserved,
				ExpiresAt: expires, Lines: []tandem.Line{{ItemID: 1, Quantity: 1, GroupID: 1}}}
		}
		if _, err := s.RebuildShops(ctx, []int64{shop}, holds); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"reservations", "reservation_lines"} {
		var n int64
		err := s.DB().QueryRowContext(ctx, "SELECT n_rows FROM mysql.innodb_table_stats WHERE database_name = DATABASE() AND table_name = ?", table).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		// Refreshed once 10,000 holds were written: InnoDB's estimate of
		// them, within its sampling.
		if n < 5_000 {
			t.Errorf("%s: the optimizer's statistics say %d rows after %d holds were copied, want those of the first 10,000 at least", table, n, shops*perShop)
		}
	}
	MustHaveNoViolations(t, s)
}
