package server_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/tandemhq/tandem/internal/openapitest"
	"github.com/tandemhq/tandem/internal/testenv"
)

// openAPITransport checks every exchange of the end-to-end tests against
// web/openapi.yaml: a request the document calls valid must get an answer
// it documents, with the documented shape. A disagreement fails the request
// (its test reports it), so the document and the real service cannot drift
// apart unnoticed.
type openAPITransport struct {
	next http.RoundTripper
}

func (t openAPITransport) RoundTrip(req *http.Request) (*http.Response, error) {
	v, err := openapitest.Shared()
	if err != nil {
		return nil, fmt.Errorf("web/openapi.yaml: %w", err)
	}
	var reqBody []byte
	if req.Body != nil {
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := v.Check(req, reqBody, resp.StatusCode, resp.Header, body); err != nil {
		return nil, fmt.Errorf("OpenAPI: %w", err)
	}
	return resp, nil
}

// TestE2EOpenAPIServed fetches the OpenAPI document from a running admin
// listener without a token and checks that it is a valid OpenAPI 3
// document.
func TestE2EOpenAPIServed(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	status, text := (&apiClient{tb: t, base: in.AdminURL}).getText("/openapi.yaml")
	if status != http.StatusOK {
		t.Fatalf("got %d without a token, want 200", status)
	}
	if _, err := openapitest.Load([]byte(text)); err != nil {
		t.Fatalf("got a served document that does not validate: %v", err)
	}
}
