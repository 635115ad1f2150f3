package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EWebhooks: plan changes and kill switch changes reach a local
// receiver configured in rollout.plan.webhooks, as Slack-compatible JSON.
func TestE2EWebhooks(t *testing.T) {
	testenv.RequireIntegration(t)
	got := make(chan map[string]any, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		if err := json.NewDecoder(r.Body).Decode(&m); err == nil {
			got <- m
		}
	}))
	defer srv.Close()
	cfg, _ := MustConfig(t)
	cfg.Rollout.Plan.Webhooks = []string{srv.URL}
	in := MustRunMain(t, cfg)
	in.Admin.must(http.MethodPost, "/admin/plan/start", obj{"reason": "hooks"}, http.StatusOK)
	in.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "drill", "pods": []string{cfg.Pods[0].Name}}, http.StatusOK)
	seen := map[string]bool{}
	for !seen["plan_start"] || !seen["killswitch_engage"] {
		m := <-got
		if text, _ := m["text"].(string); text == "" {
			t.Fatalf("got %v, want a text field", m)
		}
		seen[m["action"].(string)] = true
	}
}
