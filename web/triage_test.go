package web_test

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

func i64(v int64) *int64 { return &v }

// triageDivs is three refusals of one position, one elsewhere and a drift.
func triageDivs() []tandem.Divergence {
	refusal := func(id int64, at time.Time, item int64) tandem.Divergence {
		return tandem.Divergence{ID: id, At: at, Pod: "pod-a", Op: tandem.OpReserve, Kind: tandem.KindOutcomeMismatch,
			CartToken: "c-1", ShopID: 1, SourceOfTruth: tandem.StoreRedis,
			Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: tandem.EINSUFFICIENT, Message: "item 7: 0 available"},
			Shadow: tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.StatusOf(tandem.StatusReserved),
				Lines: []tandem.Line{{ItemID: item, Quantity: 1, GroupID: 2}}}}
	}
	drift := tandem.Drift{ShopID: 1, ItemID: 9, GroupID: 2, LedgerOnHand: 15, RedisAvailable: i64(0), MySQLAvailable: i64(15)}
	r, m := tandem.DriftOutcomes(drift)
	return []tandem.Divergence{
		refusal(5, at.Add(4*time.Second), 7),
		{ID: 4, At: at.Add(3 * time.Second), Pod: "pod-a", Op: tandem.OpAudit, Kind: tandem.KindStateDrift,
			ShopID: 1, SourceOfTruth: "ledger", Primary: r, Shadow: m, Position: &drift},
		refusal(3, at.Add(2*time.Second), 8),
		refusal(2, at.Add(time.Second), 7),
		refusal(1, at, 7),
	}
}

func TestDivergenceTriage(t *testing.T) {
	t.Run("SummaryGroupsByPosition", func(t *testing.T) {
		h, f := newAdmin(t, withViewer)
		f.Divs = triageDivs()
		got := mustJSON(t, do(t, h, req{method: "GET", target: "/admin/divergences/summary?pod=pod-a&since=1h", token: viewerToken}), http.StatusOK)
		flt := f.Last().(tandem.DivergenceFilter)
		if flt.Pod != "pod-a" || flt.Limit != web.SummarySample || time.Since(flt.Since) < 59*time.Minute {
			t.Fatalf("got filter %+v, want pod-a, the summary sample, an hour back", flt)
		}
		groups := got["groups"].([]any)
		if len(groups) != 3 || got["sampled"] != 5.0 || got["truncated"] != false {
			t.Fatalf("got %d groups of %v (truncated %v), want 3 of 5", len(groups), got["sampled"], got["truncated"])
		}
		g := groups[0].(map[string]any)
		pos := g["position"].(map[string]any)
		if g["count"] != 3.0 || g["kind"] != "outcome_mismatch" || pos["inventory_item_id"] != 7.0 || pos["group_id"] != 2.0 {
			t.Fatalf("got first group %v, want the 3 refusals of item 7 group 2", g)
		}
		if g["first_seen"] != at.Format(time.RFC3339) || g["last_seen"] != at.Add(4*time.Second).Format(time.RFC3339) {
			t.Fatalf("got seen %v..%v, want %v..%v", g["first_seen"], g["last_seen"], at, at.Add(4*time.Second))
		}
		ex := g["example"].(map[string]any)
		if ex["id"] != 5.0 || !strings.Contains(ex["explanation"].(string), "redis refused (insufficient_inventory): item 7: 0 available, but mysql reserved") {
			t.Fatalf("got example %v, want the newest (5) explained", ex)
		}
	})
	t.Run("DriftExplained", func(t *testing.T) {
		h, f := newAdmin(t)
		f.Divs = triageDivs()
		got := mustJSON(t, do(t, h, req{method: "GET", target: "/admin/divergences?kind=state_drift", token: adminToken}), http.StatusOK)
		d := got["divergences"].([]any)[1].(map[string]any)
		want := "state drift: item 9 group 2: ledger on_hand 15, redis available=0, mysql available=15"
		if d["explanation"] != want || d["position"] == nil {
			t.Fatalf("got %v, want explanation %q and the position", d, want)
		}
	})
	t.Run("CSV", func(t *testing.T) {
		h, f := newAdmin(t)
		f.Divs = triageDivs()
		w := do(t, h, req{method: "GET", target: "/admin/divergences?format=csv", token: adminToken})
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/csv") {
			t.Fatalf("got %d %s, want 200 text/csv", w.Code, w.Header().Get("Content-Type"))
		}
		rows, err := csv.NewReader(w.Body).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 6 || rows[0][0] != "id" || rows[0][len(rows[0])-1] != "explanation" {
			t.Fatalf("got %d rows, header %v, want a header and 5 rows", len(rows), rows[0])
		}
		if drift := rows[2]; drift[4] != "state_drift" || drift[7] != "9" || drift[8] != "2" {
			t.Fatalf("got drift row %v, want item 9 group 2", drift)
		}
	})
	t.Run("JSONLines", func(t *testing.T) {
		h, f := newAdmin(t)
		f.Divs = triageDivs()
		w := do(t, h, req{method: "GET", target: "/admin/divergences?format=jsonl", token: adminToken})
		lines := strings.Split(strings.TrimSpace(w.Body.String()), "\n")
		if w.Code != http.StatusOK || len(lines) != 5 {
			t.Fatalf("got %d with %d lines, want 200 with 5", w.Code, len(lines))
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &d); err != nil || d["id"] != 5.0 || d["explanation"] == "" {
			t.Fatalf("got first line %s (%v), want divergence 5 with its explanation", lines[0], err)
		}
	})
	t.Run("BadQueries", func(t *testing.T) {
		h, f := newAdmin(t)
		for _, target := range []string{
			"/admin/divergences?format=xml",
			"/admin/divergences?since=yesterday",
			"/admin/divergences/summary?since=-1h",
			"/admin/divergences/summary?kind=bogus",
			"/admin/divergences/summary?pod=pod%20a",
			"/admin/history?pod=pod%20a",
		} {
			mustError(t, do(t, h, req{method: "GET", target: target, token: adminToken}), http.StatusBadRequest, tandem.EINVALID)
		}
		if names := f.Names(); len(names) != 0 {
			t.Fatalf("got calls %v, want none", names)
		}
	})
	t.Run("SummaryUnavailable", func(t *testing.T) {
		h, f := newAdmin(t)
		f.Err = tandem.Errorf(tandem.EUNAVAILABLE, "control database down")
		mustError(t, do(t, h, req{method: "GET", target: "/admin/divergences/summary", token: adminToken}), http.StatusServiceUnavailable, tandem.EUNAVAILABLE)
	})
}

type fakeHistory map[string][]tandem.ReportSample

func (f fakeHistory) History(pod string) []tandem.ReportSample { return f[pod] }

func TestEffectiveConfig(t *testing.T) {
	t.Run("ViewerReads", func(t *testing.T) {
		h, _ := newAdmin(t, withViewer, func(s *web.AdminServer) {
			s.Config = func() any { return map[string]any{"rollout": map[string]any{"abort_divergence_rate": 0.05}} }
		})
		got := mustJSON(t, do(t, h, req{method: "GET", target: "/admin/config", token: viewerToken}), http.StatusOK)
		if got["rollout"].(map[string]any)["abort_divergence_rate"] != 0.05 {
			t.Fatalf("got %v, want the rollout thresholds", got)
		}
	})
	t.Run("NotPublished", func(t *testing.T) {
		h, _ := newAdmin(t)
		mustError(t, do(t, h, req{method: "GET", target: "/admin/config", token: adminToken}), http.StatusNotFound, tandem.ENOTFOUND)
	})
	t.Run("NeedsAToken", func(t *testing.T) {
		h, _ := newAdmin(t)
		mustError(t, do(t, h, req{method: "GET", target: "/admin/config"}), http.StatusUnauthorized, tandem.EUNAUTHORIZED)
	})
}

func TestHistory(t *testing.T) {
	h, _ := newAdmin(t, func(s *web.AdminServer) {
		s.History = fakeHistory{"pod-a": {{At: at, Report: tandem.Report{Pod: "pod-a", Mode: tandem.ModeShadow, Window: "15m", DivergenceRate: 0.02}}}}
	})
	got := mustJSON(t, do(t, h, req{method: "GET", target: "/admin/history?pod=pod-a", token: adminToken}), http.StatusOK)
	s := got["samples"].([]any)
	if len(s) != 1 || s[0].(map[string]any)["divergence_rate"] != 0.02 || s[0].(map[string]any)["at"] == nil {
		t.Fatalf("got %v, want one sample with at and the report's fields", got)
	}
	got = mustJSON(t, do(t, h, req{method: "GET", target: "/admin/history?pod=pod-z", token: adminToken}), http.StatusOK)
	if s := got["samples"].([]any); len(s) != 0 {
		t.Fatalf("got %v, want no samples of an unknown pod", got)
	}
}
