package mysqlres_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
)

func TestLedger(t *testing.T) {
	ctx := context.Background()
	t.Run("DeductCartExactlyOnce", func(t *testing.T) {
		s := MustOpenStore(t)
		l := s.Ledger()
		if err := l.SetOnHand(ctx, key(100, 1), 10); err != nil {
			t.Fatal(err)
		}
		lines := []tandem.Line{{ItemID: 100, Quantity: 3, GroupID: 1}}
		for i, want := range []bool{true, false} {
			applied, err := l.DeductCart(ctx, 1, "c", lines)
			if err != nil || applied != want {
				t.Fatalf("DeductCart #%d got %v, %v, want %v", i+1, applied, err, want)
			}
		}
		if v, err := l.OnHand(ctx, key(100, 1)); err != nil || v != 7 {
			t.Fatalf("got on_hand %d, %v, want 7", v, err)
		}
		all, err := l.ListOnHand(ctx)
		if err != nil || len(all) != 1 || all[key(100, 1)] != 7 {
			t.Fatalf("ListOnHand got %v, %v, want {1/100/1: 7}", all, err)
		}
	})
	t.Run("DeductCartSettlesHold", func(t *testing.T) {
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 1), 10)
		if _, err := s.Reserve(ctx, reserve1("c", 100, 3, 1)); err != nil {
			t.Fatal(err)
		}
		// Another store (Redis) claimed the cart and deducts through the
		// ledger: this store's hold is settled, not kept.
		applied, err := s.Ledger().DeductCart(ctx, 1, "c", []tandem.Line{{ItemID: 100, Quantity: 3, GroupID: 1}})
		if err != nil || !applied {
			t.Fatalf("got %v, %v, want applied", applied, err)
		}
		if c := mustCounters(t, s, key(100, 1)); c.OnHand != 7 || c.Reserved != 0 || c.Available != 7 {
			t.Fatalf("got %+v, want on_hand 7 reserved 0", c)
		}
		res, err := s.Claim(ctx, 1, "c")
		if err != nil || !res.Replayed {
			t.Fatalf("Claim got %+v, %v, want replayed", res, err)
		}
		if c := mustCounters(t, s, key(100, 1)); c.OnHand != 7 {
			t.Fatalf("after claim got on_hand %d, want 7 (deducted once)", c.OnHand)
		}
	})
	t.Run("ClaimAfterDeductElsewhere", func(t *testing.T) {
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 1), 10)
		mustSetOnHand(t, s, key(100, 2), 10)
		// Deducted elsewhere while a hold of the same cart in another
		// group was landing here (the deduction did not see it), then
		// claimed here: no second deduction.
		if _, err := s.Reserve(ctx, reserve1("c", 100, 2, 1)); err != nil {
			t.Fatal(err)
		}
		if err := mysqlres.DeductUnseen(ctx, s, 1, "c", []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 2}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, 1, "c"); err != nil {
			t.Fatal(err)
		}
		if c := mustCounters(t, s, key(100, 1)); c.OnHand != 10 || c.Available != 10 {
			t.Fatalf("group 1 got %+v, want on_hand 10 available 10", c)
		}
		if c := mustCounters(t, s, key(100, 2)); c.OnHand != 8 {
			t.Fatalf("group 2 got %+v, want on_hand 8", c)
		}
	})
	t.Run("UnconditionalSetBelowHolds", func(t *testing.T) {
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 1), 5)
		if _, err := s.Reserve(ctx, reserve1("c", 100, 3, 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.Ledger().SetOnHand(ctx, key(100, 1), 1); err != nil {
			t.Fatal(err)
		}
		vs, err := s.CheckInvariants(ctx)
		if err != nil || len(vs) != 1 || !strings.Contains(vs[0].Message, "unpooled is -2") {
			t.Fatalf("got violations %+v, %v, want the debt of 2 reported", vs, err)
		}
		// Releasing the hold pays the debt back.
		if _, err := s.Release(ctx, 1, "c"); err != nil {
			t.Fatal(err)
		}
		if c := mustCounters(t, s, key(100, 1)); c.OnHand != 1 || c.Available != 1 {
			t.Fatalf("got %+v, want on_hand 1 available 1", c)
		}
	})
}

func TestRebuild(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t, func(s *mysqlres.Store) { s.PoolCap = 5 })
	mustSetOnHand(t, s, key(100, 1), 20)
	mustSetOnHand(t, s, key(200, 1), 4)
	if _, err := s.Reserve(ctx, reserve1("old", 100, 3, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, reserve1("done", 200, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, 1, "done"); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(5 * time.Minute).UTC().Truncate(time.Microsecond)
	holds := []tandem.Reservation{
		{CartToken: "r1", ShopID: 1, ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 100, Quantity: 4, GroupID: 1}}},
		{CartToken: "r2", ShopID: 1, ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 100, Quantity: 1, GroupID: 1}, {ItemID: 200, Quantity: 2, GroupID: 1}}},
	}
	n, err := s.Rebuild(ctx, holds)
	if err != nil || n != 2 {
		t.Fatalf("Rebuild got %d, %v, want 2 positions", n, err)
	}
	MustHaveNoViolations(t, s)
	if c := mustCounters(t, s, key(100, 1)); c.Reserved != 5 || c.Available != 15 {
		t.Fatalf("item 100 got %+v, want reserved 5 available 15", c)
	}
	if c := mustCounters(t, s, key(200, 1)); c.OnHand != 3 || c.Reserved != 2 {
		t.Fatalf("item 200 got %+v, want on_hand 3 reserved 2", c)
	}
	active, err := s.ActiveHolds(ctx)
	if err != nil || len(active) != 2 || active[0].CartToken != "r1" || len(active[1].Lines) != 2 || !active[0].ExpiresAt.Equal(exp) {
		t.Fatalf("ActiveHolds got %+v, %v, want r1 and r2", active, err)
	}
	if _, err := s.Get(ctx, 1, "old"); tandem.ErrorCode(err) != tandem.ENOTFOUND {
		t.Fatalf("got %v for a hold the rebuild dropped, want not_found", err)
	}
	if got, err := s.Get(ctx, 1, "done"); err != nil || got.Status != tandem.StatusClaimed {
		t.Fatalf("got %+v, %v, want the claimed cart kept", got, err)
	}
	retry, err := s.Reserve(ctx, reserve1("r1", 100, 4, 2, 1))
	if err != nil || !retry.Replayed {
		t.Fatalf("retry of a backfilled hold got %+v, %v, want replayed", retry, err)
	}
	if _, err := s.Claim(ctx, 1, "r2"); err != nil {
		t.Fatal(err)
	}
	if c := mustCounters(t, s, key(200, 1)); c.OnHand != 1 || c.Reserved != 0 {
		t.Fatalf("item 200 after claim got %+v, want on_hand 1", c)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := MustOpenStore(t, func(s *mysqlres.Store) { s.Registerer = reg })
	mustSetOnHand(t, s, key(100, 1), 3)
	if _, err := s.Reserve(context.Background(), reserve1("c", 100, 1, 1)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]bool{}
	var pool bool
	for _, mf := range mfs {
		switch mf.GetName() {
		case "tandem_mysql_conn_hold_seconds":
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					tags[lp.GetValue()] = m.GetHistogram().GetSampleCount() > 0
				}
			}
		case "tandem_mysql_pool_max_open_connections":
			pool = mf.GetMetric()[0].GetGauge().GetValue() == float64(mysqlres.DefaultMaxOpenConns)
		}
	}
	if !tags["reserve"] || !tags["ledger"] {
		t.Fatalf("got conn_tag samples %v, want reserve and ledger", tags)
	}
	if !pool {
		t.Fatalf("got no pool max_open_connections gauge of %d", mysqlres.DefaultMaxOpenConns)
	}
}

// TestStatementsCarryConnTag checks that every SQL statement constant of
// the package starts with its sqlcommenter caller tag.
func TestStatementsCarryConnTag(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var checked int
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					text, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					if !looksLikeStatement(text) {
						continue
					}
					checked++
					if !strings.HasPrefix(text, "/* conn_tag=") {
						t.Errorf("%s: const %s = %q does not start with /* conn_tag=", f, vs.Names[i].Name, text)
					}
				}
			}
		}
	}
	if checked < 30 {
		t.Fatalf("got %d statement constants checked, want at least 30", checked)
	}
}

func looksLikeStatement(s string) bool {
	body := s
	if strings.HasPrefix(body, "/*") {
		if i := strings.Index(body, "*/"); i >= 0 {
			body = body[i+2:]
		}
	}
	body = strings.TrimSpace(body)
	for _, kw := range []string{"SELECT ", "INSERT ", "UPDATE ", "DELETE ", "CREATE "} {
		if strings.HasPrefix(body, kw) {
			return true
		}
	}
	return false
}
