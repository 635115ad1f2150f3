package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/mysqlx"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// TestCrashBackfillResumes SIGKILLs `tandem serve` in the middle of a pod's
// bulk copy into MySQL (small batches, one worker, so that the copy is
// seen mid-way), restarts it on the same config and checks that the copy
// resumes after the checkpoint the control database kept, rather than
// from the first shop, and that the pod reaches shadow with both stores
// equal hold by hold and MySQL's invariants clean.
func TestCrashBackfillResumes(t *testing.T) {
	testenv.RequireIntegration(t)
	const shops, perShop = 400, 10
	bin := mustBuildTandem(t)
	rdb, prefix := testenv.MustRedis(t)
	control := testenv.MustCreateDatabase(t)
	pod := testenv.RandomName("resume-")
	dsn := testenv.MustCreateDatabase(t)
	podPrefix := prefix + pod + ":"
	c := &crashHTTP{checkout: "http://" + freeAddr(t), admin: "http://" + freeAddr(t),
		client: &http.Client{Timeout: 10 * time.Second}}
	config := fmt.Sprintf(`listen: %s
admin_listen: %s
control:
  mysql_dsn: %q
  redis_addr: %s
  redis_prefix: %q
rollout:
  audit_interval: 0s
backfill:
  batch_holds: %d
  workers: 1
pods:
  - name: %s
    shops: ["1-%d"]
    mode: redis
    mysql_dsn: %q
    redis_addr: %s
    redis_prefix: %q
`, strings.TrimPrefix(c.checkout, "http://"), strings.TrimPrefix(c.admin, "http://"),
		control, testenv.RedisAddr(), prefix+"control:", perShop, pod, shops, dsn, testenv.RedisAddr(), podPrefix)
	path := filepath.Join(t.TempDir(), "tandem.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	first := mustStartServe(t, bin, path, c, "serve-1.log")

	// The legacy holds, written into the pod's Redis as a legacy pod has
	// them (the server migrated the pod's MySQL, whose ledger both use).
	ctx := context.Background()
	my := mysqlres.NewStore(dsn)
	if err := my.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer my.Close()
	rs := redisres.NewStore(rdb, my.Ledger())
	rs.Prefix = podPrefix
	if err := rs.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	exp := time.Now().Add(time.Hour)
	var holds []tandem.Reservation
	for shop := int64(1); shop <= shops; shop++ {
		if err := my.Ledger().SetOnHand(ctx, tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}, 3*perShop); err != nil {
			t.Fatal(err)
		}
		for i := range perShop {
			holds = append(holds, tandem.Reservation{ShopID: shop, CartToken: fmt.Sprintf("legacy-%d", i), Status: tandem.StatusReserved,
				ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 1, Quantity: 1 + int64(i%2), GroupID: 1}}})
		}
	}
	if _, err := rs.Rebuild(ctx, holds); err != nil {
		t.Fatal(err)
	}

	// Enter shadow; SIGKILL once the copy has committed some batches and
	// not all.
	if a := c.adm(http.MethodPut, "/admin/pods/"+pod+"/mode", map[string]any{"mode": "shadow", "reason": "resume drill"}); a.status != http.StatusAccepted {
		t.Fatalf("PUT mode shadow: got status %d %v, want 202 (the copy outlasts the wait)", a.status, a.body)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := c.mustAdm(t, http.MethodGet, "/admin/pods/"+pod, nil, http.StatusOK)
		tr, _ := st["transition"].(map[string]any)
		if tr != nil && jsonNum(tr["checkpoint"]) > 0 && jsonNum(tr["copied"]) < jsonNum(tr["total"]) {
			break
		}
		if st["mode"] == "shadow" || time.Now().After(deadline) {
			t.Fatalf("never saw the copy mid-way: %v", st)
		}
	}
	first.kill()
	cfg, err := mysqlx.ParseDSN(control)
	if err != nil {
		t.Fatal(err)
	}
	db, err := mysqlx.OpenPool(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ckShop, ckCopied int
	if err := db.QueryRowContext(ctx, "SELECT checkpoint, checkpoint_copied FROM transitions WHERE pod = ?", pod).Scan(&ckShop, &ckCopied); err != nil {
		t.Fatalf("the transition's record after the kill: %v", err)
	}
	if ckShop <= 0 || ckShop >= shops || ckCopied <= 0 || ckCopied >= len(holds) {
		t.Fatalf("checkpoint after the kill: got shop %d with %d copied, want some of the %d shops", ckShop, ckCopied, shops)
	}
	t.Logf("killed with the copy committed up to shop %d (%d of %d holds)", ckShop, ckCopied, len(holds))

	second := mustStartServe(t, bin, path, c, "serve-2.log")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st := c.mustAdm(t, http.MethodGet, "/admin/pods/"+pod, nil, http.StatusOK)
		if st["mode"] == "shadow" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod did not reach shadow after the restart: %v\n%s", st, second.output())
		}
	}
	log, _ := os.ReadFile(second.log.Name())
	if want := fmt.Sprintf("resumed after shop %d with %d holds copied", ckShop, ckCopied); !strings.Contains(string(log), want) {
		t.Errorf("the restarted instance's control log does not say %q:\n%s", want, second.output())
	}

	// Both stores hold the same holds, hold by hold, and MySQL is sound.
	a, err := rs.ActiveHolds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := my.ActiveHolds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameHolds(a, b); err != nil {
		t.Error(err)
	}
	if len(a) != len(holds) {
		t.Errorf("redis holds after the copy: got %d, want the %d legacy ones", len(a), len(holds))
	}
	if v, err := my.CheckInvariants(ctx); err != nil || len(v) != 0 {
		t.Errorf("mysql invariants: got %v %v, want none violated", v, err)
	}
}

// sameHolds says how two listings of holds (ordered by shop and token)
// differ, nil when they hold the same carts with the same lines.
func sameHolds(a, b []tandem.Reservation) error {
	key := func(h tandem.Reservation) string { return fmt.Sprintf("%d/%s", h.ShopID, h.CartToken) }
	m := map[string]string{}
	for _, h := range a {
		m[key(h)] = fmt.Sprint(h.Lines)
	}
	var diffs []string
	for _, h := range b {
		k := key(h)
		if got, ok := m[k]; !ok || got != fmt.Sprint(h.Lines) {
			diffs = append(diffs, fmt.Sprintf("%s: redis %q, mysql %v", k, got, h.Lines))
		}
		delete(m, k)
	}
	for k, l := range m {
		diffs = append(diffs, fmt.Sprintf("%s: redis %s, mysql none", k, l))
	}
	if len(diffs) > 0 {
		if len(diffs) > 10 {
			diffs = append(diffs[:10], "...")
		}
		return fmt.Errorf("stores differ on %d carts:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
	return nil
}

func jsonNum(v any) float64 {
	f, _ := v.(float64)
	return f
}
