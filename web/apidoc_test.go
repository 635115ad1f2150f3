package web_test

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/web"
)

// apiDoc is the API reference the test holds to openapi.yaml.
const apiDoc = "../docs/api.md"

var (
	// apiDocEndpoint matches an endpoint row: | `METHOD /path` | token | summary |.
	apiDocEndpoint = regexp.MustCompile("^\\| `([A-Z]+) (/[^`]*)` \\| ([a-z]+) \\| (.+) \\|$")
	// apiDocErrorCode matches an error code row: | `code` | status | when |.
	apiDocErrorCode = regexp.MustCompile("^\\| `([a-z_]+)` \\| ([0-9]{3}) \\|")
)

// apiDocRow is an endpoint row of docs/api.md.
type apiDocRow struct {
	api, token, summary string
}

// readAPIDoc returns the endpoint rows of docs/api.md by "METHOD /path",
// with the API of the section they are in, and the error codes with
// their statuses.
func readAPIDoc(t *testing.T) (map[string]apiDocRow, map[string]int) {
	t.Helper()
	b, err := os.ReadFile(apiDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows, codes := map[string]apiDocRow{}, map[string]int{}
	api := ""
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			api = ""
			switch {
			case strings.HasPrefix(h, "Checkout API"):
				api = "checkout"
			case strings.HasPrefix(h, "Admin API"):
				api = "admin"
			}
		}
		if m := apiDocEndpoint.FindStringSubmatch(line); m != nil {
			route := m[1] + " " + m[2]
			if _, dup := rows[route]; dup {
				t.Errorf("%s: %s has two rows, want one", apiDoc, route)
			}
			rows[route] = apiDocRow{api: api, token: m[3], summary: m[4]}
		}
		if m := apiDocErrorCode.FindStringSubmatch(line); m != nil {
			codes[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	return rows, codes
}

// wantToken is the token column an operation's security calls for: none
// for an empty list, api for the checkout API (the document's apiToken),
// and for the admin token viewer on a GET (the adminToken scheme: GET
// operations also take the viewer token), admin otherwise.
func wantToken(route string, op openAPIOperation) string {
	switch {
	case op.Security != nil && len(*op.Security) == 0:
		return "none"
	case op.Tags[0] == "checkout":
		return "api"
	case strings.HasPrefix(route, "GET "):
		return "viewer"
	}
	return "admin"
}

// TestAPIDocMatchesOpenAPI holds docs/api.md to openapi.yaml: every
// operation has one row in its API's table, with its token and its
// summary, every row is an operation, and the error codes are the
// document's with the server's statuses.
func TestAPIDocMatchesOpenAPI(t *testing.T) {
	doc, _ := loadOpenAPI(t)
	ops := operations(t, doc)
	rows, codes := readAPIDoc(t)
	if len(ops) < 30 {
		t.Fatalf("got %d operations in openapi.yaml, want both APIs", len(ops))
	}
	var routes []string
	for route := range ops {
		routes = append(routes, route)
	}
	sort.Strings(routes)
	for _, route := range routes {
		op := ops[route]
		want := apiDocRow{api: op.Tags[0], token: wantToken(route, op), summary: op.Summary}
		got, ok := rows[route]
		switch {
		case !ok:
			t.Errorf("%s: got no row for %s, want | `%s` | %s | %s | in the %s API's table", apiDoc, route, route, want.token, want.summary, want.api)
		case got != want:
			t.Errorf("%s: %s: got %+v, want %+v (openapi.yaml)", apiDoc, route, got, want)
		}
	}
	for route := range rows {
		if _, ok := ops[route]; !ok {
			t.Errorf("%s: got a row for %s, which openapi.yaml does not document", apiDoc, route)
		}
	}
	t.Run("ErrorCodes", func(t *testing.T) {
		errSchema := doc.Components.Schemas["Error"].(map[string]any)
		enum := errSchema["properties"].(map[string]any)["error"].(map[string]any)["properties"].(map[string]any)["code"].(map[string]any)["enum"].([]any)
		if len(enum) < 10 {
			t.Fatalf("got %d error codes in openapi.yaml, want the contract's", len(enum))
		}
		documented := map[string]bool{}
		for _, c := range enum {
			code := c.(string)
			documented[code] = true
			status, ok := codes[code]
			switch {
			case !ok:
				t.Errorf("%s: got no row for error code %s, want one", apiDoc, code)
			case status != web.ErrorStatusCode(code):
				t.Errorf("%s: %s: got status %d, want %d (the server's)", apiDoc, code, status, web.ErrorStatusCode(code))
			}
		}
		for code := range codes {
			if !documented[code] {
				t.Errorf("%s: got a row for error code %s, which openapi.yaml does not list", apiDoc, code)
			}
		}
	})
}
