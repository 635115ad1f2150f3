package web_test

import (
	"bytes"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/openapitest"
	"github.com/tandemhq/tandem/web"
)

// openAPI is the part of an OpenAPI 3 document the test reads.
type openAPI struct {
	OpenAPI    string                          `yaml:"openapi"`
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Schemas   map[string]any `yaml:"schemas"`
		Responses map[string]any `yaml:"responses"`
	} `yaml:"components"`
}

type openAPIOperation struct {
	Tags      []string       `yaml:"tags"`
	Summary   string         `yaml:"summary"`
	Responses map[string]any `yaml:"responses"`
	// Security is nil when the operation takes the document's.
	Security *[]map[string][]string `yaml:"security"`
}

var httpMethods = map[string]bool{"get": true, "put": true, "post": true, "delete": true, "patch": true, "head": true, "options": true}

func loadOpenAPI(t *testing.T) (openAPI, map[string]any) {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("got openapi %q, want 3.x", doc.OpenAPI)
	}
	return doc, raw
}

// operations returns the operations of doc by "METHOD /path".
func operations(t *testing.T, doc openAPI) map[string]openAPIOperation {
	t.Helper()
	ops := map[string]openAPIOperation{}
	for path, item := range doc.Paths {
		for method, node := range item {
			if !httpMethods[method] {
				continue // parameters, servers, summary
			}
			var op openAPIOperation
			if err := node.Decode(&op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return ops
}

// TestOpenAPIMatchesRoutes checks that openapi.yaml documents exactly the
// routes of each API, tagged with the API that serves them.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc, _ := loadOpenAPI(t)
	documented := map[string][]string{}
	for route, op := range operations(t, doc) {
		if len(op.Tags) != 1 {
			t.Fatalf("%s: got tags %v, want exactly one of checkout, admin", route, op.Tags)
		}
		documented[op.Tags[0]] = append(documented[op.Tags[0]], route)
	}
	checkout, _ := newCheckout(t)
	admin, _ := newAdmin(t)
	for api, h := range map[string]http.Handler{"checkout": checkout, "admin": admin} {
		t.Run(api, func(t *testing.T) {
			got := documented[api]
			sort.Strings(got)
			want := web.Routes(h)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got documented %v,\nwant the routes %v", got, want)
			}
		})
	}
}

// TestOpenAPIComplete checks that every operation answers something, that
// every $ref resolves and that the error codes are the contract's.
func TestOpenAPIComplete(t *testing.T) {
	doc, raw := loadOpenAPI(t)
	t.Run("EveryOperationHasA2xx", func(t *testing.T) {
		for route, op := range operations(t, doc) {
			ok := false
			for status := range op.Responses {
				ok = ok || strings.HasPrefix(status, "2")
			}
			if !ok {
				t.Errorf("%s: got no 2xx response, want one", route)
			}
		}
	})
	t.Run("RefsResolve", func(t *testing.T) {
		var walk func(v any)
		n := 0
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, x := range v {
					if k == "$ref" {
						n++
						ref, _ := x.(string)
						if !resolves(raw, ref) {
							t.Errorf("got unresolved $ref %q", ref)
						}
						continue
					}
					walk(x)
				}
			case []any:
				for _, x := range v {
					walk(x)
				}
			}
		}
		walk(raw)
		if n == 0 {
			t.Fatal("got no $ref, want the document to use components")
		}
	})
	t.Run("ErrorCodes", func(t *testing.T) {
		errSchema := doc.Components.Schemas["Error"].(map[string]any)
		codes := errSchema["properties"].(map[string]any)["error"].(map[string]any)["properties"].(map[string]any)["code"].(map[string]any)["enum"].([]any)
		var got []string
		for _, c := range codes {
			got = append(got, c.(string))
		}
		want := []string{tandem.EINVALID, tandem.EUNAUTHORIZED, tandem.EFORBIDDEN, tandem.ENOTFOUND, tandem.EUNKNOWNSHOP,
			tandem.EUNKNOWNPOD, tandem.EINSUFFICIENT, tandem.ECONFLICT, tandem.ETRANSITIONREFUSED,
			tandem.EALREADYCLAIMED, tandem.EGONE, tandem.EPAYLOADTOOLARGE, tandem.EUNSUPPORTEDMEDIATYPE,
			tandem.EUNAVAILABLE, tandem.EINTERNAL}
		sort.Strings(got)
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got error codes %v, want %v", got, want)
		}
	})
}

// resolves reports whether a local $ref such as "#/components/schemas/X"
// names something in doc.
func resolves(doc map[string]any, ref string) bool {
	if !strings.HasPrefix(ref, "#/") {
		return false
	}
	var cur any = doc
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return cur != nil
}

// TestOpenAPIValid loads openapi.yaml with kin-openapi and validates it as
// an OpenAPI 3 document (schemas, defaults, patterns, examples).
func TestOpenAPIValid(t *testing.T) {
	if _, err := openapitest.Load(web.OpenAPI); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	onDisk, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, web.OpenAPI) {
		t.Fatal("got an embedded document that differs from openapi.yaml, want the same")
	}
}

// TestOpenAPIServed checks that the admin API serves the document at
// /openapi.yaml without a token.
func TestOpenAPIServed(t *testing.T) {
	h, _ := newAdmin(t)
	w := do(t, h, req{method: "GET", target: "/openapi.yaml"})
	if w.Code != http.StatusOK {
		t.Fatalf("got %d, want 200 without a token", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/yaml") {
		t.Errorf("got Content-Type %q, want application/yaml", ct)
	}
	if !bytes.Equal(w.Body.Bytes(), web.OpenAPI) {
		t.Error("got a body that is not the document")
	}
}

// TestOpenAPILimits checks that the request limits openapi.yaml states are
// the root's (tandem.MaxTTL and the others), the one rule the server
// enforces.
func TestOpenAPILimits(t *testing.T) {
	_, raw := loadOpenAPI(t)
	schemas := raw["components"].(map[string]any)["schemas"].(map[string]any)
	field := func(schema string, path ...string) any {
		var v any = schemas[schema]
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%s: no %s", schema, strings.Join(path, "."))
			}
			v = m[p]
		}
		return v
	}
	for _, c := range []struct {
		schema string
		path   []string
		want   int
	}{
		{"ReserveRequest", []string{"properties", "ttl_seconds", "minimum"}, int(tandem.MinTTL / time.Second)},
		{"ReserveRequest", []string{"properties", "ttl_seconds", "maximum"}, int(tandem.MaxTTL / time.Second)},
		{"ReserveRequest", []string{"properties", "lines", "maxItems"}, tandem.MaxLines},
		{"LineRequest", []string{"properties", "quantity", "maximum"}, tandem.MaxQuantity},
		{"LineRequest", []string{"properties", "group_ids", "maxItems"}, tandem.MaxGroups},
		{"CartToken", []string{"maxLength"}, tandem.MaxCartTokenLen},
		{"OnHandRequest", []string{"properties", "on_hand", "maximum"}, tandem.MaxOnHand},
	} {
		if got := field(c.schema, c.path...); got != c.want {
			t.Errorf("%s.%s: got %v, want %d", c.schema, strings.Join(c.path, "."), got, c.want)
		}
	}
}
