package server_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
)

// TestE2EBackfillTransition enters shadow through the admin API while the
// backfill is held: 202 with POD.transition, a PUT of redis cancels it, and
// once the copy is let go the mode applies with the request's reason.
func TestE2EBackfillTransition(t *testing.T) {
	cfg, _ := MustConfig(t)
	podB := cfg.Pods[1].Name
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	in := MustRunMain(t, cfg, func(m *server.Main) {
		m.BeforeBackfill = func(ctx context.Context, pod string) error {
			entered <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	api, admin := in.Checkout, in.Admin
	api.must(http.MethodPut, inventoryPath(shopB, 100, 1), obj{"on_hand": 5}, http.StatusOK)
	api.must(http.MethodPost, "/v1/reservations", cart("c-bf", shopB, line(100, 2, 1)), http.StatusCreated)
	path := "/admin/pods/" + podB + "/mode"

	t.Run("AnswersAccepted", func(t *testing.T) {
		admin.tb = t
		got := admin.must(http.MethodPut, path, obj{"mode": "shadow", "reason": "first try"}, http.StatusAccepted)
		<-entered
		tr, _ := got["transition"].(obj)
		if got["mode"] != "redis" || tr == nil || tr["to"] != "shadow" || tr["phase"] != "backfill" || tr["started_at"] == nil {
			t.Fatalf("got %v, want mode redis with a backfill to shadow", got)
		}
		if st := podStatus(admin, podB); st["transition"] == nil || st["mode"] != "redis" {
			t.Errorf("got %v, want the transition in GET while it runs", st)
		}
	})

	t.Run("RedisCancels", func(t *testing.T) {
		admin.tb = t
		got := admin.must(http.MethodPut, path, obj{"mode": "redis", "reason": "not now"}, http.StatusOK)
		if got["mode"] != "redis" || got["transition"] != nil {
			t.Fatalf("got %v, want redis and no transition", got)
		}
		if !auditLogHas(admin, "backfill_cancel", podB, "not now") {
			t.Error("the audit log has no backfill_cancel")
		}
	})

	t.Run("AppliesWhenDone", func(t *testing.T) {
		admin.tb = t
		admin.must(http.MethodPut, path, obj{"mode": "shadow", "reason": "second try"}, http.StatusAccepted)
		<-entered
		close(release)
		eventually(t, podB+" in shadow", func() bool {
			st := podStatus(admin, podB)
			return st["mode"] == "shadow" && st["transition"] == nil
		})
		if !auditLogHas(admin, "set_mode", podB, "second try") {
			t.Error("the audit log has no set_mode with the request's reason")
		}
		inv := api.must(http.MethodGet, inventoryPath(shopB, 100, 1), nil, http.StatusOK)
		stores, _ := inv["stores"].(obj)
		if my, _ := stores["mysql"].(obj); my == nil || num(my["reserved"]) != 2 {
			t.Errorf("got stores %v, want MySQL holding the 2 reserved before the copy", stores)
		}
	})
}
