package server

import (
	"regexp"
	"strings"
	"testing"
)

// goTypeWords are what a config error must never show: Go type names and
// YAML tags are the implementation's words, not the operator's.
var goTypeWords = regexp.MustCompile(`main\.|server\.[A-Z]|time\.Duration|\bint64\b|\bfloat64\b|\bint\b|\bbool\b|\bstring\b|!!|unmarshal|reflect|struct`)

func TestConfigErrorsInUsersWords(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"DurationInWords", "rollout:\n  gate_window: \"15 minutes\"\n",
			`config: line 2: rollout.gate_window: "15 minutes" is not a duration (e.g. 15m`},
		{"DurationWithoutUnit", "shadow:\n  timeout: 250\n",
			`shadow.timeout: "250" is not a duration (e.g. 15m, 250ms, 1h30m); give a unit, such as 250ms`},
		{"DurationWithoutUnitFitsTheRange", "rollout:\n  gate_window: 15\n",
			`rollout.gate_window: "15" is not a duration (e.g. 15m, 250ms, 1h30m); give a unit, such as 15s or 15m`},
		{"DurationWithoutUnitNoUnitFits", "shadow:\n  timeout: 99999\n",
			`shadow.timeout: "99999" is not a duration (e.g. 15m, 250ms, 1h30m); give a unit and a value in 1ms..30s`},
		{"PodNameMissing", "pods:\n  - shops: [1]\n    mysql_dsn: \"root@tcp(127.0.0.1:3306)/x\"\n",
			"config: line 2: pods[0].name: missing: every pod needs a name"},
		{"PodDSNMissing", "pods:\n  - name: a\n    shops: [1]\n",
			"config: line 2: pods[0].mysql_dsn: missing: pod a's MySQL DSN"},
		{"PodShopsMissing", "pods:\n  - name: a\n    mysql_dsn: \"root@tcp(127.0.0.1:3306)/x\"\n",
			"config: line 2: pods[0].shops: missing: at least one shop id or range"},
		{"ControlDSNEmpty", "control:\n  mysql_dsn: \"\"\n",
			"config: line 2: control.mysql_dsn: missing: the control database's MySQL DSN"},
		{"PodDSNWrongHasItsLine", "pods:\n  - name: a\n    shops: [1]\n    mysql_dsn: nonsense\n",
			"config: line 4: pods[0].mysql_dsn: not a MySQL DSN"},
		{"DurationAsList", "reservation:\n  default_ttl: [1m]\n",
			"reservation.default_ttl: want a duration (e.g. 15m), got a list"},
		{"UnknownKeySuggestsClosest", "rollout:\n  gate_windw: 15m\n",
			"config: line 2: unknown key rollout.gate_windw (did you mean gate_window?)"},
		{"UnknownTopLevelKeySuggests", "admin_listn: 127.0.0.1:1\n",
			"unknown key admin_listn (did you mean admin_listen?)"},
		{"UnknownPodKeySuggests", "pods:\n  - name: a\n    mysql_dns: x\n",
			"unknown key pods[0].mysql_dns (did you mean mysql_dsn?)"},
		{"UnknownKeyFarFromAnyListsKnown", "reservation:\n  pool_size: 3\n",
			"unknown key reservation.pool_size (known keys here: default_ttl, pool_cap, reaper_interval)"},
		{"NotAWholeNumber", "reservation:\n  pool_cap: lots\n",
			`reservation.pool_cap: "lots" is not a whole number`},
		{"FractionIsNotAWholeNumber", "shadow:\n  max_inflight: 2.5\n",
			`shadow.max_inflight: "2.5" is not a whole number`},
		{"NotANumber", "rollout:\n  gate_max_divergence_rate: low\n",
			`rollout.gate_max_divergence_rate: "low" is not a number`},
		{"NotABool", "rollout:\n  gate_require_audit: maybe\n",
			`rollout.gate_require_audit: "maybe" is not true or false`},
		{"SectionIsAValue", "rollout: fast\n",
			`rollout: want a mapping of keys, got a single value "fast"`},
		{"PodsIsAMapping", "pods:\n  name: a\n",
			"pods: want a list, got a mapping of keys"},
		{"PodIsAValue", "pods: [pod-a]\n",
			`pods[0]: want a mapping of keys, got a single value "pod-a"`},
		{"ShopsIsAMapping", "pods:\n  - name: a\n    shops: {first: 1}\n",
			"line 3: pods[0].shops: want a list, got a mapping of keys"},
		{"ShopIsAList", "pods:\n  - name: a\n    shops: [[1, 2]]\n",
			"pods[0].shops[0]: want a text value, got a list"},
		{"TextIsAList", "listen: [a, b]\n",
			"listen: want a text value, got a list"},
		{"TopLevelIsAValue", "hello\n",
			`the top level: want a mapping of keys, got a single value "hello"`},
		{"KeyTwice", "listen: a:1\nlisten: b:2\n",
			"line 2: listen: given twice (first on line 1)"},
		{"SyntaxError", "rollout:\n  gate_window: [15m\n",
			"config: line 1: did not find expected ',' or ']'"},
		{"RecursiveAlias", "pods: &a [*a]\n",
			"pods[0]: want a mapping of keys, got a list"},
		{"RangeStillNamesTheKey", "reservation:\n  default_ttl: 2h\n",
			"config: line 2: reservation.default_ttl: must be 1s..1h, got 2h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(tt.src))
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q,\nwant it to contain %q", err, tt.want)
			}
			if m := goTypeWords.FindString(err.Error()); m != "" {
				t.Errorf("got %q, which shows %q; want the operator's words only", err, m)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"gate_windw", "gate_window", 1}, {"kitten", "sitting", 3}, {"abc", "", 3}} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q): got %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
