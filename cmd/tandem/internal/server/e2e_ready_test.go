package server_test

import (
	"context"
	"database/sql"
	"net/http"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/controldb"
	"github.com/tandemhq/tandem/mysqlres"
)

// mustOpenDB opens dsn directly, closed when t ends.
func mustOpenDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestE2EReadiness: /readyz checks the schema of the control and pod
// databases, not only that they answer; a missing table or migration is
// not ready, and each change of state is logged once.
func TestE2EReadiness(t *testing.T) {
	cfg, _ := MustConfig(t)
	core, logs := observer.New(zapcore.InfoLevel)
	in := MustRunMain(t, cfg, func(m *server.Main) { m.Logger = zap.New(core) })
	anon := &apiClient{tb: t, base: in.AdminURL}
	control, pod := mustOpenDB(t, cfg.Control.MySQLDSN), mustOpenDB(t, cfg.Pods[0].MySQLDSN)
	ctx := context.Background()
	deps := func(v obj) obj { d, _ := v["dependencies"].(obj); return d }

	t.Run("ReadyWithTheSchema", func(t *testing.T) {
		anon.tb = t
		v := anon.must(http.MethodGet, "/readyz", nil, http.StatusOK)
		if d := deps(v); d["control_mysql"] != "ok" || d[cfg.Pods[0].Name+"_mysql"] != "ok" {
			t.Errorf("got %v, want every dependency ok", d)
		}
	})

	t.Run("MissingControlTableIsNotReady", func(t *testing.T) {
		anon.tb = t
		if _, err := control.ExecContext(ctx, "DROP TABLE killswitch"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			e := anon.mustErr(http.MethodGet, "/readyz", nil, http.StatusServiceUnavailable, "unavailable")
			d, _ := e["details"].(obj)
			state, _ := deps(d)["control_mysql"].(string)
			if !strings.Contains(state, "missing table killswitch") {
				t.Errorf("got control_mysql %q, want the missing table named", state)
			}
		}
		lines := logs.FilterMessage("dependency not ready").FilterField(zap.String("dependency", "control_mysql")).All()
		if len(lines) != 1 {
			t.Errorf("got %d log lines for three probes of one state, want 1", len(lines))
		}
		// Put it back: forget the migration and migrate again.
		if _, err := control.ExecContext(ctx, "DELETE FROM "+controldb.MigrationsTable+" WHERE name = '007_killswitch.sql'"); err != nil {
			t.Fatal(err)
		}
		if err := controldb.NewStore(controldb.Config{DSN: cfg.Control.MySQLDSN}).Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		anon.must(http.MethodGet, "/readyz", nil, http.StatusOK)
		if n := logs.FilterMessage("dependency ready").FilterField(zap.String("dependency", "control_mysql")).Len(); n != 1 {
			t.Errorf("got %d 'dependency ready' lines, want 1", n)
		}
	})

	t.Run("PendingPodMigrationIsNotReady", func(t *testing.T) {
		anon.tb = t
		if _, err := pod.ExecContext(ctx, "DELETE FROM "+mysqlres.MigrationsTable+" WHERE name = '005_claims.sql'"); err != nil {
			t.Fatal(err)
		}
		e := anon.mustErr(http.MethodGet, "/readyz", nil, http.StatusServiceUnavailable, "unavailable")
		d, _ := e["details"].(obj)
		if state, _ := deps(d)[cfg.Pods[0].Name+"_mysql"].(string); !strings.Contains(state, "005_claims.sql not applied") {
			t.Errorf("got %q, want the pending migration named", state)
		}
		if err := mysqlres.NewStore(cfg.Pods[0].MySQLDSN).Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		anon.must(http.MethodGet, "/readyz", nil, http.StatusOK)
	})
}
