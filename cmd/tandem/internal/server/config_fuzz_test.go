package server

import (
	"strings"
	"testing"
)

// FuzzParseConfig feeds arbitrary YAML to the config loader: it never
// panics, whatever it accepts is a config that validates, and what it
// refuses is told without Go type names (unless the input itself holds
// such words, which the error may quote).
func FuzzParseConfig(f *testing.F) {
	f.Add(exampleConfig)
	f.Add("pods: []")
	f.Add("listen: [")
	f.Add(strings.Replace(exampleConfig, "10m", "-1s", 1))
	f.Add(strings.Replace(exampleConfig, "[1, 2, 3]", `["1-99999999999999999999"]`, 1))
	f.Add("pods:\n  - name: a\n    shops: [1]\n    mysql_dsn: x\n    redis_addr: y:1\n")
	f.Add("rollout:\n  gate_window: 15 minutes\n  gate_windw: 1m\n")
	f.Add("pods: &a [*a]\n")
	f.Add("shadow: {timeout: 900, max_inflight: 1.5}\n")
	f.Fuzz(func(t *testing.T, src string) {
		cfg, err := ParseConfig(strings.NewReader(src))
		if err != nil {
			if m := goTypeWords.FindString(err.Error()); m != "" && !goTypeWords.MatchString(src) {
				t.Fatalf("got error %q, which shows %q", err, m)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted a config that does not validate: %v", err)
		}
		if len(cfg.Pods) == 0 {
			t.Fatal("accepted a config without pods")
		}
	})
}
