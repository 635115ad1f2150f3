package bench_test

import (
	"reflect"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/bench"
)

func TestModePath(t *testing.T) {
	for _, tc := range []struct {
		from, to tandem.Mode
		want     []tandem.Mode
	}{
		{tandem.ModeRedis, tandem.ModeRedis, nil},
		{tandem.ModeRedis, tandem.ModeShadow, []tandem.Mode{tandem.ModeShadow}},
		{tandem.ModeRedis, tandem.ModeMySQL, []tandem.Mode{tandem.ModeShadow, tandem.ModeMySQL}},
		{tandem.ModeMySQL, tandem.ModeRedis, []tandem.Mode{tandem.ModeShadow, tandem.ModeRedis}},
		{tandem.ModeMySQLOnly, tandem.ModeShadow, []tandem.Mode{tandem.ModeMySQL, tandem.ModeShadow}},
		{tandem.ModeShadow, tandem.ModeMySQLOnly, []tandem.Mode{tandem.ModeMySQL, tandem.ModeMySQLOnly}},
		{tandem.ModeRedis, "postgres", nil},
	} {
		t.Run(string(tc.from)+"To"+string(tc.to), func(t *testing.T) {
			if got := bench.ModePath(tc.from, tc.to); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDialAddr(t *testing.T) {
	for _, tc := range []struct{ listen, want string }{
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"0.0.0.0:8080", "127.0.0.1:8080"},
		{":8081", "127.0.0.1:8081"},
		{"[::]:8081", "127.0.0.1:8081"},
		{"10.0.0.5:80", "10.0.0.5:80"},
	} {
		if got := bench.DialAddr(tc.listen); got != tc.want {
			t.Errorf("dialAddr(%q): got %q, want %q", tc.listen, got, tc.want)
		}
	}
}
