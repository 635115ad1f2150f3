package server

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
)

// TestCrashPlanTakeover runs two real `tandem serve` processes on one
// control plane, starts the rollout plan over three pods of different
// sizes, SIGKILLs the instance that drives it mid-plan, and checks that the
// other takes the lease and takes every pod to mysql.
func TestCrashPlanTakeover(t *testing.T) {
	testenv.RequireIntegration(t)
	bin := mustBuildTandem(t)
	_, prefix := testenv.MustRedis(t)
	control := testenv.MustCreateDatabase(t)
	var pods strings.Builder
	names := []string{}
	for i, shops := range []string{"1", "10-12", "20-29"} {
		name := testenv.RandomName(fmt.Sprintf("plan%d-", i))
		names = append(names, name)
		fmt.Fprintf(&pods, "  - name: %s\n    shops: [%q]\n    mode: redis\n    mysql_dsn: %q\n    redis_addr: %s\n    redis_prefix: %q\n",
			name, shops, testenv.MustCreateDatabase(t), testenv.RedisAddr(), prefix+name+":")
	}
	var servers []*crashServer
	var clients []*crashHTTP
	for i := range 2 {
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
  gate_min_comparisons: 0
  gate_max_p99_factor: 0
  abort_divergence_rate: 0
pods:
%s`, strings.TrimPrefix(c.checkout, "http://"), strings.TrimPrefix(c.admin, "http://"),
			control, testenv.RedisAddr(), prefix+"control:", pods.String())
		path := filepath.Join(t.TempDir(), fmt.Sprintf("tandem-%d.yaml", i))
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, mustStartServe(t, bin, path, c, fmt.Sprintf("serve-%d.log", i)))
		clients = append(clients, c)
	}

	clients[0].mustAdm(t, http.MethodPost, "/admin/plan/start",
		map[string]any{"reason": "takeover drill", "shadow_soak": "3s", "mysql_soak": "1s"}, http.StatusOK)
	// Wait for the driver to be mid-plan: the first pod soaking.
	var driver string
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := clients[0].mustAdm(t, http.MethodGet, "/admin/plan", nil, http.StatusOK)
		driver, _ = p["driver"].(string)
		if driver != "" && strings.Contains(fmt.Sprint(p["pods"]), "shadow_soak") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no driver mid-plan within 30s: %v", p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Which process is it? The instances list names its admin address.
	killed := -1
	for _, in := range clients[0].mustAdm(t, http.MethodGet, "/admin/instances", nil, http.StatusOK)["instances"].([]any) {
		in := in.(map[string]any)
		for i, c := range clients {
			if in["id"] == driver && "http://"+in["addr"].(string) == c.admin {
				killed = i
			}
		}
	}
	if killed < 0 {
		t.Fatalf("driver %q is neither instance", driver)
	}
	servers[killed].kill()
	alive := clients[1-killed]

	deadline = time.Now().Add(90 * time.Second)
	for {
		p := alive.mustAdm(t, http.MethodGet, "/admin/plan", nil, http.StatusOK)
		if p["phase"] == "done" {
			if p["driver"] == driver {
				t.Errorf("got driver %v at the end, want the survivor", p["driver"])
			}
			break
		}
		if p["phase"] == "aborted" || time.Now().After(deadline) {
			t.Fatalf("the plan did not finish on the survivor: %v\n%s", p, servers[1-killed].output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, name := range names {
		if st := alive.mustAdm(t, http.MethodGet, "/admin/pods/"+name, nil, http.StatusOK); st["mode"] != "mysql" {
			t.Errorf("%s: got mode %v, want mysql", name, st["mode"])
		}
	}
}
