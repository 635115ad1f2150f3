package server_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/tandemhq/tandem/capture"
	"github.com/tandemhq/tandem/internal/replay"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2ECapture records a pod's traffic on a real server, downloads the
// capture and rehearses it on a scratch database at equal speed.
func TestE2ECapture(t *testing.T) {
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	adm, api := in.Admin, in.Checkout
	podA := cfg.Pods[0].Name
	api.must(http.MethodPut, inventoryPath(shopA, 700, 1), obj{"on_hand": 5}, http.StatusOK)

	info := adm.must(http.MethodPost, "/admin/pods/"+podA+"/capture", obj{"reason": "e2e rehearsal", "duration": "1h", "max_ops": 8}, http.StatusOK)
	id := info["id"].(string)
	adm.mustErr(http.MethodPost, "/admin/pods/"+podA+"/capture", obj{"reason": "again", "duration": "1m"}, http.StatusConflict, "conflict")
	adm.mustErr(http.MethodGet, "/admin/captures/"+id, nil, http.StatusConflict, "conflict")
	for i := range 8 {
		api.call(http.MethodPost, "/v1/reservations", cart(fmt.Sprintf("e2e-cap-%d", i), shopA, line(700, 1, 1)))
	}
	var list obj
	eventually(t, "the capture ends at max_ops", func() bool {
		list = adm.must(http.MethodGet, "/admin/captures", nil, http.StatusOK)
		c := asSlice(list["captures"])[0].(obj)
		return c["state"] == "done"
	})
	c := asSlice(list["captures"])[0].(obj)
	if num(c["ops"]) != 8 || c["ended"] != "max_ops" || num(c["positions"]) == 0 {
		t.Fatalf("got capture %v, want 8 ops ended by max_ops with positions", c)
	}
	if !auditLogHas(adm, capture.ActionCaptureStart, podA, "e2e rehearsal") {
		t.Errorf("got no capture_start in the audit log")
	}

	req, _ := http.NewRequest(http.MethodGet, in.AdminURL+"/admin/captures/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+in.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f, err := capture.ReadFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("download: %d: %v", resp.StatusCode, err)
	}
	res, err := (&replay.Rehearsal{File: f, ServerDSN: testenv.RootDSN()}).Run(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.PerOp {
		if fmt.Sprint(s.Captured) != fmt.Sprint(s.Replayed) {
			t.Errorf("%s: got %v, want the capture's %v", s.Op, s.Replayed, s.Captured)
		}
	}
	if !res.Held || len(res.Violations) != 0 {
		t.Errorf("got %s, want held", res.Verdict())
	}
}
