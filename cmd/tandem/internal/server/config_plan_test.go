package server_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
)

func TestConfigPlan(t *testing.T) {
	write := func(t *testing.T, plan string) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), "tandem.yaml")
		body := "rollout:\n  plan:\n" + plan + "pods:\n  - name: pod-a\n    shops: [1]\n    mysql_dsn: \"root@tcp(127.0.0.1:3306)/x\"\n    redis_addr: 127.0.0.1:6379\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("OK", func(t *testing.T) {
		cfg, err := server.LoadConfig(write(t, "    shadow_soak: 10m\n    mysql_soak: 20m\n    final_mode: mysql_only\n    parallel: 2\n    approval: true\n    webhooks: [\"http://127.0.0.1:9/hook\"]\n"+
			"    confirm_webhooks: [\"https://analysis.example/confirm\"]\n    confirm_timeout: 3s\n"+
			"    rehearsal: {speed: 3, p99_max: 40ms, server: \"root@tcp(127.0.0.1:3306)/\"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		want := server.PlanConfig{ShadowSoak: 10 * time.Minute, MySQLSoak: 20 * time.Minute, FinalMode: "mysql_only", Parallel: 2,
			Approval: true, Webhooks: []string{"http://127.0.0.1:9/hook"},
			ConfirmWebhooks: []string{"https://analysis.example/confirm"}, ConfirmTimeout: 3 * time.Second,
			Rehearsal: server.RehearsalConfig{Speed: 3, P99Max: 40 * time.Millisecond, Server: "root@tcp(127.0.0.1:3306)/"}}
		if !reflect.DeepEqual(cfg.Rollout.Plan, want) {
			t.Fatalf("got %+v, want %+v", cfg.Rollout.Plan, want)
		}
	})
	t.Run("Defaults", func(t *testing.T) {
		cfg, err := server.LoadConfig(write(t, "    approval: false\n"))
		if err != nil {
			t.Fatal(err)
		}
		if p := cfg.Rollout.Plan; p.ShadowSoak != 30*time.Minute || p.FinalMode != "mysql" || p.Parallel != 1 ||
			len(p.ConfirmWebhooks) != 0 || p.ConfirmTimeout != 10*time.Second || p.Rehearsal.Speed != 0 || p.Rehearsal.P99Max != 50*time.Millisecond {
			t.Fatalf("got %+v, want the documented defaults (30m, mysql, 1, no confirm webhooks, 10s, no rehearsal, 50ms)", p)
		}
	})
	for name, tc := range map[string]struct{ plan, want string }{
		"BadFinalMode":       {"    final_mode: redis\n", "rollout.plan.final_mode"},
		"BadParallel":        {"    parallel: 0\n", "rollout.plan.parallel"},
		"BadWebhook":         {"    webhooks: [\"ftp://x\"]\n", "rollout.plan.webhooks"},
		"BadConfirm":         {"    confirm_webhooks: [\"http://\"]\n", "rollout.plan.confirm_webhooks"},
		"BadConfirmTimeout":  {"    confirm_timeout: 0s\n", "rollout.plan.confirm_timeout"},
		"BadRehearsalSpeed":  {"    rehearsal: {speed: -1}\n", "rollout.plan.rehearsal.speed"},
		"BadRehearsalP99Max": {"    rehearsal: {speed: 2, p99_max: 0s}\n", "rollout.plan.rehearsal.p99_max"},
		"BadRehearsalServer": {"    rehearsal: {speed: 2, server: \"not a dsn\"}\n", "rollout.plan.rehearsal.server"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := server.LoadConfig(write(t, tc.plan))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
