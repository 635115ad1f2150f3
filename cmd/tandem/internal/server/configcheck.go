package server

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tandemhq/tandem"
)

// configError is a config file mistake told in the operator's words: the
// key path (rollout.gate_window, pods[1].shops), what is wrong and, when the
// parser knows it, the line. It never names a Go type.
type configError struct {
	line int
	path string
	msg  string
}

func (e *configError) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.line)
	}
	if e.path != "" {
		b.WriteString(e.path)
		b.WriteString(": ")
	}
	b.WriteString(e.msg)
	return b.String()
}

// durationRanges are the bounds Validate holds the bounded durations to;
// a bare number for one of them is read in the unit that fits.
var durationRanges = map[string][2]time.Duration{
	"reservation.default_ttl":     {tandem.MinTTL, tandem.MaxTTL},
	"reservation.reaper_interval": {10 * time.Millisecond, time.Minute},
	"shadow.timeout":              {time.Millisecond, 30 * time.Second},
	"rollout.gate_window":         {time.Second, 24 * time.Hour},
	"rollout.abort_window":        {time.Second, time.Hour},
}

// unitHint suggests how to write a bare number v (f) given for the
// duration key path: with each unit that lands it in the key's range
// ("250ms" for shadow.timeout: 250, not "250s", which it refuses), at most
// two of them; seconds or minutes for an unbounded key.
func unitHint(path, v string, f float64) string {
	r, bounded := durationRanges[path]
	var fits []string
	for _, u := range []struct {
		name string
		d    time.Duration
	}{{"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}} {
		d := time.Duration(f * float64(u.d))
		if bounded && (d < r[0] || d > r[1]) || !bounded && u.name != "s" && u.name != "m" {
			continue
		}
		if fits = append(fits, v+u.name); len(fits) == 2 {
			break
		}
	}
	if len(fits) == 0 {
		return fmt.Sprintf("give a unit and a value in %s..%s", shortDuration(r[0]), shortDuration(r[1]))
	}
	return "give a unit, such as " + strings.Join(fits, " or ")
}

// shortDuration writes d as the config would (1m, not 1m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// checkRange holds a bounded duration of durationRanges to its range.
func checkRange(key string, d time.Duration) error {
	r := durationRanges[key]
	if d < r[0] || d > r[1] {
		return bad(key, "must be %s..%s, got %s", shortDuration(r[0]), shortDuration(r[1]), shortDuration(d))
	}
	return nil
}

// lineOf returns the line of the key path (pods[1].mysql_dsn) in doc, or
// of the nearest enclosing value present when the key is absent, 0 when
// none is known.
func lineOf(doc *yaml.Node, path string) int {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n == nil || n.Kind == 0 {
		return 0
	}
	line := 0
	for _, seg := range pathSegments(path) {
		next, at := child(n, seg)
		if next == nil {
			break
		}
		n, line = next, at
	}
	return line
}

// child returns the value of key seg (a name, or [i] in a list) under n
// and the line it starts on: the key's line for a mapping.
func child(n *yaml.Node, seg string) (*yaml.Node, int) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if i, err := strconv.Atoi(strings.Trim(seg, "[]")); err == nil && strings.HasPrefix(seg, "[") {
		if n.Kind == yaml.SequenceNode && i < len(n.Content) {
			return n.Content[i], n.Content[i].Line
		}
		return nil, 0
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				return n.Content[i+1], n.Content[i].Line
			}
		}
	}
	return nil, 0
}

// pathSegments splits pods[1].mysql_dsn into pods, [1], mysql_dsn.
func pathSegments(path string) []string {
	var out []string
	for _, part := range strings.Split(path, ".") {
		for part != "" {
			i := strings.Index(part[1:], "[")
			if i < 0 {
				out = append(out, part)
				break
			}
			out = append(out, part[:i+1])
			part = part[i+1:]
		}
	}
	return out
}

// maxConfigNodes bounds the values a config may expand to through YAML
// aliases, so that a hostile file cannot make the check run for ever.
const maxConfigNodes = 1 << 18

var durationType = reflect.TypeOf(time.Duration(0))

// configChecker walks a parsed YAML document along the shape of Config and
// reports the first key it does not know, or the first value that is not
// of the kind the key wants, before yaml.v3 gets to say it in Go terms.
type configChecker struct {
	visited int
}

// checkConfigYAML checks a parsed document against the shape of Config.
func checkConfigYAML(doc *yaml.Node) error {
	if doc == nil || doc.Kind == 0 {
		return nil // an empty file: the defaults
	}
	c := &configChecker{}
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	return c.check(n, reflect.TypeOf(Config{}), "")
}

func (c *configChecker) check(n *yaml.Node, t reflect.Type, path string) error {
	if c.visited++; c.visited > maxConfigNodes {
		return &configError{line: n.Line, msg: "too many values (the file's aliases expand too far)"}
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return &configError{line: n.Line, path: path, msg: "an alias to nothing"}
		}
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // key present without a value: the default stays
	}
	want := describeKind(t)
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return c.wrongKind(n, path, want)
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			hint := ""
			if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
				hint = "; " + unitHint(path, n.Value, f)
			}
			return &configError{line: n.Line, path: path,
				msg: fmt.Sprintf("%s is not a duration (e.g. 15m, 250ms, 1h30m)%s", quoteValue(n.Value), hint)}
		}
		return nil
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return c.wrongKind(n, path, want)
		}
		return c.checkMapping(n, t, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return c.wrongKind(n, path, want)
		}
		for i, item := range n.Content {
			if err := c.check(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return c.wrongKind(n, path, want)
	}
	var err error
	switch t.Kind() {
	case reflect.String:
		return nil
	case reflect.Bool:
		var v bool
		err = n.Decode(&v)
	case reflect.Int, reflect.Int64:
		// yaml.v3 would truncate 2.5 to 2; a count is whole or wrong.
		var v int64
		if err = n.Decode(&v); err == nil && n.ShortTag() != "!!int" {
			err = errors.New("not a whole number")
		}
	case reflect.Float64:
		var v float64
		if err = n.Decode(&v); err == nil && n.ShortTag() != "!!int" && n.ShortTag() != "!!float" {
			err = errors.New("not a number")
		}
	default:
		return fmt.Errorf("config: %s: no check for this key (a bug)", path)
	}
	if err != nil {
		return &configError{line: n.Line, path: path, msg: fmt.Sprintf("%s is not %s", quoteValue(n.Value), want)}
	}
	return nil
}

func (c *configChecker) checkMapping(n *yaml.Node, t reflect.Type, path string) error {
	fields := yamlFields(t)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return &configError{line: k.Line, path: path, msg: "a key must be a plain name"}
		}
		key := join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			return &configError{line: k.Line, path: key, msg: fmt.Sprintf("given twice (first on line %d)", line)}
		}
		seen[k.Value] = k.Line
		ft, known := fields[k.Value]
		if !known {
			return &configError{line: k.Line, msg: unknownKey(key, k.Value, fields)}
		}
		if err := c.check(v, ft, key); err != nil {
			return err
		}
	}
	return nil
}

func (c *configChecker) wrongKind(n *yaml.Node, path, want string) error {
	got := "a single value " + quoteValue(n.Value)
	switch n.Kind {
	case yaml.MappingNode:
		got = "a mapping of keys"
	case yaml.SequenceNode:
		got = "a list"
	}
	where := path
	if where == "" {
		where = "the top level"
	}
	return &configError{line: n.Line, msg: fmt.Sprintf("%s: want %s, got %s", where, want, got)}
}

// unknownKey says that key is not one of fields and suggests the closest
// known name, or lists them when none is close.
func unknownKey(key, name string, fields map[string]reflect.Type) string {
	known := make([]string, 0, len(fields))
	for f := range fields {
		known = append(known, f)
	}
	sort.Strings(known)
	best, bestD := "", 1<<30
	for _, f := range known {
		if d := editDistance(strings.ToLower(name), f); d < bestD {
			best, bestD = f, d
		}
	}
	if best != "" && (bestD <= 2 || bestD*3 <= len(best) || strings.Contains(best, strings.ToLower(name)) && len(name) >= 3) {
		return fmt.Sprintf("unknown key %s (did you mean %s?)", key, best)
	}
	return fmt.Sprintf("unknown key %s (known keys here: %s)", key, strings.Join(known, ", "))
}

// yamlFields returns the keys of a config struct and the type each wants.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// describeKind says what a key of type t wants, in the operator's words.
func describeKind(t reflect.Type) string {
	if t == durationType {
		return "a duration (e.g. 15m)"
	}
	switch t.Kind() {
	case reflect.Struct:
		return "a mapping of keys"
	case reflect.Slice:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	}
	return "a text value"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// quoteValue quotes a value for a message, shortened when long.
func quoteValue(v string) string {
	if r := []rune(v); len(r) > 40 {
		v = string(r[:40]) + "..."
	}
	return strconv.Quote(v)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// yamlSyntaxError rewords an error of the YAML parser or decoder: the
// parser's own messages name the line and no Go type; anything that would
// name one (a decoder type error the checker did not foresee) is told
// without it.
func yamlSyntaxError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines := make([]string, 0, len(te.Errors))
		for _, e := range te.Errors {
			line, _, _ := strings.Cut(e, ":")
			lines = append(lines, line)
		}
		return fmt.Errorf("config: %s: a value of the wrong kind", strings.Join(lines, ", "))
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if strings.Contains(msg, "!!") || strings.Contains(msg, "unmarshal") {
		line, _, _ := strings.Cut(msg, ":")
		if !strings.HasPrefix(line, "line ") {
			line = "the file"
		}
		return fmt.Errorf("config: %s: not valid YAML for this config", line)
	}
	return fmt.Errorf("config: %s", msg)
}
