package server

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// configReference is the configuration reference the test holds to
// Config.
const configReference = "../../../../docs/configuration.md"

// docKeyRow matches a row of the reference's key table: | `key` | default | meaning |.
var docKeyRow = regexp.MustCompile("^\\| `([a-z0-9_.\\[\\]]+)` \\| ([^|]*) \\|")

// docConfigKeys returns the keys of the reference's table with their
// default cells, backticks removed.
func docConfigKeys(t *testing.T, doc string) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, line := range strings.Split(doc, "\n") {
		m := docKeyRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := keys[m[1]]; dup {
			t.Errorf("%s: key %s has two rows, want one", configReference, m[1])
		}
		keys[m[1]] = strings.TrimSpace(strings.ReplaceAll(m[2], "`", ""))
	}
	return keys
}

// configKeyValues walks v by its yaml tags and returns every key path
// (pods[].name for the fields of a list of mappings) with its value as
// the reference writes it: durations as 250ms, "" for an empty value.
func configKeyValues(v reflect.Value, path string, out map[string]string) {
	if v.Type() == reflect.TypeOf(time.Duration(0)) {
		out[path] = shortDuration(time.Duration(v.Int()))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			configKeyValues(v.Field(i), join(path, name), out)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct {
			elem := reflect.New(v.Type().Elem()).Elem()
			if v.Len() > 0 {
				elem = v.Index(0)
			}
			configKeyValues(elem, path+"[]", out)
			return
		}
		var items []string
		for i := 0; i < v.Len(); i++ {
			items = append(items, fmt.Sprint(v.Index(i).Interface()))
		}
		out[path] = strings.Join(items, ", ")
	case reflect.Float32, reflect.Float64:
		out[path] = strconv.FormatFloat(v.Float(), 'g', -1, 64)
	default:
		out[path] = fmt.Sprint(v.Interface())
	}
}

// TestConfigReferenceDocumented holds docs/configuration.md to Config:
// every key of the config file has one row, every row is a key, and each
// default cell starts with the value a config that names only a pod
// gets. Values a pod must give read "(required...)", empty ones any words.
func TestConfigReferenceDocumented(t *testing.T) {
	raw, err := os.ReadFile(configReference)
	if err != nil {
		t.Fatal(err)
	}
	documented := docConfigKeys(t, string(raw))
	// The smallest valid file: one pod with what it must give. Validate
	// fills the pod's defaults.
	required := map[string]string{"pods[].name": "pod-a", "pods[].shops": "1", "pods[].mysql_dsn": "root@tcp(127.0.0.1:3306)/tandem_pod_a", "pods[].redis_addr": "127.0.0.1:6379"}
	cfg, err := ParseConfig(strings.NewReader(`pods: [{name: pod-a, shops: [1], mysql_dsn: "root@tcp(127.0.0.1:3306)/tandem_pod_a", redis_addr: "127.0.0.1:6379"}]`))
	if err != nil {
		t.Fatal(err)
	}
	actual := map[string]string{}
	configKeyValues(reflect.ValueOf(cfg), "", actual)
	if len(actual) < 50 {
		t.Fatalf("got %d config keys, want every key of Config (%v)", len(actual), actual)
	}
	var keys []string
	for k := range actual {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		cell, ok := documented[key]
		switch want := strings.ReplaceAll(actual[key], "pod-a", "<pod>"); {
		case !ok:
			t.Errorf("%s: got no row for key %s, want one with its default %q", configReference, key, want)
		case required[key] != "":
			if !strings.HasPrefix(cell, "(required") {
				t.Errorf("%s: %s: got default %q, want (required...)", configReference, key, cell)
			}
		case want == "":
			if cell == "" {
				t.Errorf("%s: %s: got an empty default, want words such as (none)", configReference, key)
			}
		case cell != want && !strings.HasPrefix(cell, want+" "):
			t.Errorf("%s: %s: got default %q, want %q (DefaultConfig and Validate)", configReference, key, cell, want)
		}
	}
	for key := range documented {
		if _, ok := actual[key]; !ok {
			t.Errorf("%s: got a row for %s, which is no key of the config file", configReference, key)
		}
	}
	t.Run("Example", func(t *testing.T) {
		_, example, ok := strings.Cut(string(raw), "```yaml\n")
		example, _, _ = strings.Cut(example, "```")
		if !ok {
			t.Fatalf("%s: got no yaml example, want the minimal file", configReference)
		}
		if _, err := ParseConfig(strings.NewReader(example)); err != nil {
			t.Errorf("%s: the example does not load: %v", configReference, err)
		}
	})
}
