package web_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tandemhq/tandem/internal/openapitest"
)

// checkOpenAPI checks an exchange of the handler tests against
// openapi.yaml (see openapitest.Validator.Check): the answers of the real
// handlers, over fake services, must be the ones the document describes.
func checkOpenAPI(tb testing.TB, r *http.Request, rq req, w *httptest.ResponseRecorder) {
	tb.Helper()
	if rq.anyStatus {
		var e errorJSON
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Details == nil {
			tb.Errorf("got %d %q, want the error JSON", w.Code, w.Body.String())
		}
		return
	}
	v, err := openapitest.Shared()
	if err != nil {
		tb.Fatalf("openapi.yaml: %v", err)
	}
	if err := v.Check(r, []byte(rq.body), w.Code, w.Header(), w.Body.Bytes()); err != nil {
		tb.Errorf("OpenAPI: %v", err)
	}
}
