package web

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3 document of both APIs, served without a token
// at GET /openapi.yaml on the admin listener. Tests check it against the
// routes and the real answers.
//
//go:embed openapi.yaml
var OpenAPI []byte

// openAPIDocument serves OpenAPI; it holds no data and no secret.
func openAPIDocument(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/yaml; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Access-Control-Allow-Origin", "*") // API browsers on other origins may read it
	_, _ = w.Write(OpenAPI)
}
