package bench_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/bench"
	"github.com/tandemhq/tandem/rollout"
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

// A backfill that fails leaves the pod in redis mode: the cell's mode
// change says so with the audit log's reason, rather than waiting for a
// mode that will not come.
func TestSetModeFailedBackfill(t *testing.T) {
	asked := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/admin/pods/bench":
			json.NewEncoder(w).Encode(tandem.PodStatus{Pod: "bench", Mode: tandem.ModeRedis})
		case r.Method == http.MethodPut && r.URL.Path == "/admin/pods/bench/mode":
			close(asked)
			w.WriteHeader(http.StatusAccepted)
			json.NewEncoder(w).Encode(tandem.PodStatus{Pod: "bench", Mode: tandem.ModeRedis,
				Transition: &tandem.Transition{To: tandem.ModeShadow, Phase: tandem.TransitionBackfill}})
		case r.Method == http.MethodGet && r.URL.Path == "/admin/audit-log":
			var entries []tandem.AuditLogEntry
			select {
			case <-asked:
				entries = append(entries, tandem.AuditLogEntry{At: time.Now(), Action: rollout.ActionBackfillEnd, Pod: "bench",
					Before: "redis", After: "failed: list redis holds: i/o timeout"})
			default:
			}
			json.NewEncoder(w).Encode(map[string]any{"entries": entries})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := bench.SetMode(ctx, strings.TrimPrefix(srv.URL, "http://"), "token", "bench", tandem.ModeShadow)
	if err == nil || !strings.Contains(err.Error(), "failed: list redis holds: i/o timeout") {
		t.Fatalf("got %v, want the backfill's failure", err)
	}
}
