// Package openapitest checks HTTP exchanges against tandem's OpenAPI
// document (web.OpenAPI), so that tests which drive a real handler or a
// real server find every place where the document and the answers
// disagree.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/tandemhq/tandem/web"
)

// Load parses and validates an OpenAPI document.
func Load(doc []byte) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	t, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := t.Validate(loader.Context, openapi3.EnableSchemaDefaultsValidation(),
		openapi3.EnableSchemaPatternValidation(), openapi3.EnableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	return t, nil
}

// Validator checks exchanges against a document.
type Validator struct {
	router routers.Router
}

var (
	once      sync.Once
	shared    *Validator
	sharedErr error
)

// Shared returns a Validator of web.OpenAPI, built once per test binary.
func Shared() (*Validator, error) {
	once.Do(func() {
		// Non-JSON answers of the admin API: the page and the document.
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/yaml", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/jsonl", openapi3filter.FileBodyDecoder)
		shared, sharedErr = New(web.OpenAPI)
	})
	return shared, sharedErr
}

// New returns a Validator of doc. Its servers are ignored: tests serve on
// whatever address they bound.
func New(doc []byte) (*Validator, error) {
	t, err := Load(doc)
	if err != nil {
		return nil, err
	}
	t.Servers = openapi3.Servers{{URL: "/"}}
	for _, item := range t.Paths.Map() {
		item.Servers = nil
	}
	r, err := gorillamux.NewRouter(t)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return &Validator{router: r}, nil
}

// Check validates one exchange: the request that was sent (with its body)
// and the answer's status, header and body.
//
// An answer must be documented for its operation and status, and match its
// schema. A request the document calls invalid is allowed (tests send bad
// input on purpose), but then the server must have refused it with a 4xx.
// A path no operation documents may only be answered 401, 404 or 405 with
// the error JSON, or be one of the dashboard's static files.
func (v *Validator) Check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	ctx := context.Background()
	r := req.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	if r.URL.Host == "" {
		r.URL = &url.URL{Scheme: "http", Host: "tandem.test", Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	}
	route, params, err := v.router.FindRoute(r)
	if err != nil {
		switch {
		case status == http.StatusUnauthorized || status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
			// Unknown paths and methods (under /admin/ without a token: 401).
			return checkErrorJSON(body)
		case staticAsset(req, status, header):
			return nil
		}
		return fmt.Errorf("%s %s answered %d, but no operation documents it: %v", req.Method, req.URL.Path, status, err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if reqErr := openapi3filter.ValidateRequest(ctx, in); reqErr != nil && (status < 400 || status > 499) {
		return fmt.Errorf("%s %s answered %d to a request the document calls invalid: %v", req.Method, req.URL.Path, status, reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("%s %s answered %d %s, which the document does not allow: %v",
			req.Method, req.URL.Path, status, snippet(body), err)
	}
	return nil
}

// staticAsset reports whether an answer is one of the dashboard's static
// files (app.js, style.css), which the document's GET / describes as served
// at their names.
func staticAsset(req *http.Request, status int, header http.Header) bool {
	ct := header.Get("Content-Type")
	return req.Method == http.MethodGet && status == http.StatusOK && path.Ext(req.URL.Path) != "" &&
		!strings.HasPrefix(req.URL.Path, "/admin/") && !strings.HasPrefix(req.URL.Path, "/v1/") &&
		!strings.HasPrefix(ct, "application/json")
}

// checkErrorJSON checks that an answer is the error JSON of every non-2xx
// answer: {"error": {"code", "message", "details"?}}.
func checkErrorJSON(body []byte) error {
	var e struct {
		Error *struct {
			Code    string         `json:"code"`
			Message *string        `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == nil || e.Error.Details == nil {
		return errors.New("an undocumented path answered without the error JSON: " + snippet(body))
	}
	return nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
