package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/testenv"
)

func freeTestAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestDemo: the demo binds its ports before it touches data, uses names no
// other config uses, drops only databases that carry its marker, and a
// second run while one runs fails at once and changes nothing. The test
// runs it under names of its own, so that it never touches a real demo.
func TestDemo(t *testing.T) {
	rdb, _ := testenv.MustRedis(t) // checks the servers; the demo finds them on their default ports
	ctx := context.Background()
	listen, adminListen := freeTestAddr(t), freeTestAddr(t)
	names := Names{DBPrefix: testenv.RandomName("tandem_test_demo_") + "_", RedisPrefix: testenv.RandomName("tt-demo-") + ":"}
	rootCfg, _ := mysql.ParseDSN(testenv.RootDSN())
	rootCfg.DBName = ""
	root, err := sql.Open("mysql", rootCfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	dbs := []string{names.DBPrefix + "control", names.DBPrefix + "a", names.DBPrefix + "b", names.DBPrefix + "c"}
	t.Cleanup(func() {
		for _, db := range dbs {
			root.Exec("DROP DATABASE IF EXISTS `" + db + "`")
		}
		root.Close()
		testenv.DeletePrefix(t, rdb, names.RedisPrefix)
	})
	newDemo := func(t *testing.T) *server.Main {
		m := server.NewMain()
		m.Demo, m.Prepare = true, (&Demo{Names: names}).SetUp
		m.Config.Listen, m.Config.AdminListen = listen, adminListen
		m.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
		m.Stdout, m.Stderr = io.Discard, io.Discard
		m.AdminToken = "demo-test-token"
		t.Cleanup(func() { m.Close() })
		return m
	}
	dbExists := func(db string) bool {
		var n int
		root.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", db).Scan(&n)
		return n == 1
	}

	t.Run("ForeignDatabaseIsNeverDropped", func(t *testing.T) {
		foreign := dbs[2]
		if _, err := root.Exec("CREATE DATABASE `" + foreign + "`"); err != nil {
			t.Fatal(err)
		}
		if _, err := root.Exec("CREATE TABLE `" + foreign + "`.precious (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		m := newDemo(t)
		err := m.Run(ctx)
		if err == nil || !strings.Contains(err.Error(), "not the demo's") || !strings.Contains(err.Error(), foreign) {
			t.Fatalf("got %v, want a refusal naming %s", err, foreign)
		}
		var n int
		if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'precious'", foreign).Scan(&n); err != nil || n != 1 {
			t.Errorf("got the foreign database's table gone (%v), want it kept", err)
		}
		if dbExists(dbs[0]) {
			t.Errorf("got %s created, want nothing changed", dbs[0])
		}
		m.Close()
		root.Exec("DROP DATABASE `" + foreign + "`")
	})

	first := newDemo(t) // lives until the end of the whole test
	t.Run("RunsOnItsOwnNames", func(t *testing.T) {
		sentinel := testenv.RandomName("tandem:pod-sentinel-") + ":k"
		rdb.Set(ctx, sentinel, "someone else's", time.Hour)
		t.Cleanup(func() { rdb.Del(context.Background(), sentinel) })
		if err := first.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if p := first.Config.Control.RedisPrefix; !strings.HasPrefix(p, names.RedisPrefix) {
			t.Errorf("got control prefix %q, want one under %q", p, names.RedisPrefix)
		}
		for _, p := range first.Config.Pods {
			if !strings.HasPrefix(p.RedisPrefix, names.RedisPrefix) {
				t.Errorf("got pod prefix %q, want one under %q", p.RedisPrefix, names.RedisPrefix)
			}
		}
		if rdb.Exists(ctx, sentinel).Val() != 1 {
			t.Error("got a key outside the demo's prefix deleted")
		}
		for _, db := range dbs {
			var n int
			root.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", db, demoMarkerTable).Scan(&n)
			if n != 1 {
				t.Errorf("got %s without the demo's marker table", db)
			}
		}
	})
	if first.AdminAddr == "" {
		t.FailNow()
	}

	t.Run("TrafficGoesThroughTheCheckoutAPI", func(t *testing.T) {
		buyers := StartTraffic(first)
		t.Cleanup(buyers.Stop) // before the demo's Close
		// StartTraffic returns once it has stocked every position of its
		// catalogue (3 shops x 9 items x 2 groups) through the API.
		if got := checkoutRequests(t, first.Gatherer(), "PUT"); got < 54 {
			t.Errorf("got %d PUT /v1/inventory counted by the buyer metrics, want at least 54", got)
		}
		// The buyers' first cart comes 33 ms later; the deadline only
		// bounds a failure.
		for deadline := time.Now().Add(time.Minute); checkoutRequests(t, first.Gatherer(), "POST") == 0; {
			if time.Now().After(deadline) {
				t.Fatal("gave up waiting for a POST /v1/reservations counted by the buyer metrics")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	admin := func(t *testing.T, method, path, body string) (int, map[string]any) {
		t.Helper()
		var r io.Reader
		if body != "" {
			r = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, "http://"+first.AdminAddr+path, r)
		req.Header.Set("Authorization", "Bearer demo-test-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}

	t.Run("SecondRunFailsAtOnceAndChangesNothing", func(t *testing.T) {
		if st, _ := admin(t, "POST", "/admin/killswitch", `{"reason":"state to keep","pods":["pod-b"]}`); st != 200 {
			t.Fatalf("got %d engaging through the first demo", st)
		}
		second := newDemo(t)
		err := second.Run(ctx)
		if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("got %v, want the port in use and nothing changed", err)
		}
		st, v := admin(t, "GET", "/admin/killswitch", "")
		if st != 200 || v["engaged"] != true {
			t.Errorf("got %d %v from the first demo, want it serving with its kill switch still engaged", st, v)
		}
	})
}

// checkoutRequests counts the checkout API's requests of method that the
// buyer metrics (tandem_http_request_duration_seconds{api="checkout"}) saw.
func checkoutRequests(t *testing.T, g prometheus.Gatherer, method string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != "tandem_http_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["api"] == "checkout" && labels["method"] == method {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}
