package faulttest_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/controldb"
	"github.com/tandemhq/tandem/internal/faultproxy"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/killswitch"
	"github.com/tandemhq/tandem/redisres"
)

// The kill switch is needed most when MySQL is down: engaging it must work,
// and reach every instance, while the control database cannot be reached
// (its audit-log write is best effort).
func TestKillSwitch_ControlMySQLDown(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Listen(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cfg.Addr = proxy.Addr()
	store := controldb.NewStore(controldb.Config{DSN: cfg.FormatDSN()})
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	rdb, prefix := testenv.MustRedis(t)
	open := func() *killswitch.Switch {
		sw := killswitch.New(killswitch.Config{Pods: []string{"pod-a", "pod-b"}, Channel: redisres.NewKillSwitchChannel(rdb, prefix),
			AuditLog: store, PollInterval: 50 * time.Millisecond})
		if err := sw.Open(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sw.Close() })
		return sw
	}
	a, b := open(), open()

	proxy.Down() // the control database is gone
	if err := store.Ping(ctx); err == nil {
		t.Fatal("control database still answers through a cut proxy")
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Engage(ctx, []string{"pod-a"}, tandem.Change{Actor: "oncall", Reason: "MySQL is down"})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("engage with MySQL down: %v", err)
		}
	case <-time.After(30 * time.Second): // a bound that proves no hang, not a latency target
		t.Fatal("engage hung while MySQL was down")
	}
	if !a.Engaged("pod-a") {
		t.Error("pod-a not engaged on the instance that engaged it")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !b.Engaged("pod-a") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !b.Engaged("pod-a") {
		t.Fatal("the other instance never saw the kill switch while MySQL was down")
	}
	if b.Engaged("pod-b") {
		t.Error("pod-b engaged too, want only pod-a")
	}

	// Once MySQL answers again, changes are recorded in the audit log.
	proxy.Restore()
	if _, err := a.Disengage(ctx, []string{"pod-a"}, tandem.Change{Actor: "oncall", Reason: "MySQL is back"}); err != nil {
		t.Fatal(err)
	}
	// The audit-log write is asynchronous and best effort: poll for it.
	// (The engage, written while MySQL was down, may land too, late.)
	var entries []tandem.AuditLogEntry
	recorded := func() bool {
		for _, e := range entries {
			if e.Action == killswitch.ActionDisengage && e.Pod == "pod-a" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !recorded(); time.Sleep(20 * time.Millisecond) {
		entries, _ = store.AuditLog(ctx, 10)
	}
	if !recorded() {
		t.Errorf("audit log after restore: got %+v, want the disengage recorded", entries)
	}
}
