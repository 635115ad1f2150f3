package openapitest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/internal/openapitest"
)

// TestCheck shows that the validator tells a documented exchange from one
// the document does not allow (the control of the checks that rely on it).
func TestCheck(t *testing.T) {
	v, err := openapitest.Shared()
	if err != nil {
		t.Fatal(err)
	}
	json := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	pod := `{"pod":"pod-a","mode":"shadow","source_of_truth":"redis","shadow":"mysql","kill_switch":false,"shops":"1-3",` +
		`"updated_at":"2026-11-30T10:00:00Z","gates":{"comparisons":1,"divergence_rate":0,"last_audit_clean":true,"passing":false,"failed_gates":["min_comparisons"]}}`
	errJSON := `{"error":{"code":"invalid_request","message":"bad","details":{}}}`
	tests := []struct {
		name, method, target, reqBody string
		status                        int
		header                        http.Header
		body                          string
		wantErr                       string // "" for a documented exchange
	}{
		{"PodOK", "GET", "/admin/pods/pod-a", "", 200, json, pod, ""},
		{"PodMissingField", "GET", "/admin/pods/pod-a", "", 200, json, `{"pod":"pod-a"}`, "does not allow"},
		{"PodWrongType", "GET", "/admin/pods/pod-a", "", 200, json, strings.Replace(pod, `"kill_switch":false`, `"kill_switch":"no"`, 1), "does not allow"},
		{"UndocumentedStatus", "GET", "/admin/pods/pod-a", "", 418, json, errJSON, "does not allow"},
		{"BadRequestRefused", "PUT", "/admin/pods/pod-a/mode", `{"mode":"nope","reason":"x"}`, 400, json, errJSON, ""},
		{"BadRequestAccepted", "PUT", "/admin/pods/pod-a/mode", `{"mode":"nope","reason":"x"}`, 200, json, pod, "calls invalid"},
		{"UnknownPathError", "GET", "/nothing", "", 404, json, errJSON, ""},
		{"UnknownPathNotError", "GET", "/nothing", "", 404, json, `{}`, "without the error JSON"},
		{"UndocumentedRoute", "GET", "/admin/secret", "", 200, json, `{}`, "no operation documents it"},
		{"DashboardAsset", "GET", "/app.js", "", 200, http.Header{"Content-Type": {"text/javascript"}}, "x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.reqBody))
			if tt.reqBody != "" {
				r.Header.Set("Content-Type", "application/json")
			}
			err := v.Check(r, []byte(tt.reqBody), tt.status, tt.header, []byte(tt.body))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
}
