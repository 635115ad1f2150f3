package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
)

func TestConfigRedacted(t *testing.T) {
	cfg := server.DefaultConfig()
	cfg.Control.MySQLDSN = "tandem:hunter2@tcp(db:3306)/tandem_control"
	cfg.Pods = []server.PodConfig{{Name: "pod-a", Shops: []string{"1-9"}, Mode: "shadow",
		MySQLDSN: "app:s3cr3t-pw@tcp(10.0.0.5:3306)/inventory?parseTime=true", RedisAddr: "10.0.0.6:6379"}}
	cfg.Rollout.Plan.Webhooks = []string{"https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://ops.example.com"}
	cfg.Rollout.Plan.ConfirmWebhooks = []string{"https://user:pw@confirm.example.com/ok?token=abc"}
	b, err := json.Marshal(cfg.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, secret := range []string{"hunter2", "s3cr3t-pw", "XXXXSECRET", "T000", "token=abc", "user:pw"} {
		if strings.Contains(got, secret) {
			t.Errorf("got %s, want no %q", got, secret)
		}
	}
	for _, want := range []string{`"tandem:REDACTED@tcp(db:3306)/tandem_control"`, `app:REDACTED@tcp(10.0.0.5:3306)/inventory`,
		`"https://hooks.slack.com/REDACTED"`, `"https://ops.example.com"`, `"timeout":"250ms"`, `"abort_divergence_rate":`} {
		if !strings.Contains(got, want) {
			t.Errorf("got %s, want %s in it", got, want)
		}
	}
	if cfg.Pods[0].MySQLDSN != "app:s3cr3t-pw@tcp(10.0.0.5:3306)/inventory?parseTime=true" {
		t.Errorf("got the config's own DSN changed to %q, want it untouched", cfg.Pods[0].MySQLDSN)
	}
}
