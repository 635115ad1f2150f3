package server_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2ETriage: drift found twice at one position of a shadow pod is one
// group of the divergence summary, explained in words, exported as CSV and
// JSON lines; the effective config and the report history are served to a
// viewer.
func TestE2ETriage(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, rdb := MustConfig(t)
	cfg.Rollout.AbortDivergenceRate = 0.05
	in := MustRunMain(t, cfg, func(m *server.Main) {
		m.ViewerToken = e2eViewerToken
		m.HistoryInterval = 20 * time.Millisecond
	})
	adm, api := in.Admin, in.Checkout
	viewer := &apiClient{tb: t, base: in.AdminURL, token: e2eViewerToken}
	podA := cfg.Pods[0].Name // shadow, shops 1-9
	const shop, item, group = 3, 300, 1

	api.must(http.MethodPut, inventoryPath(shop, item, group), obj{"on_hand": 15}, http.StatusOK)
	api.must(http.MethodPost, "/v1/reservations", cart("triage-1", shop, line(item, 1, group)), http.StatusCreated)
	key := fmt.Sprintf("%s{%d}:item:%d:%d", cfg.Pods[0].RedisPrefix, shop, item, group)
	for i := range 2 {
		// Redis loses a unit behind tandem's back; the audit finds it and
		// recounts it, and records a state_drift each time.
		if err := rdb.HIncrBy(context.Background(), key, "available", -1).Err(); err != nil {
			t.Fatal(err)
		}
		a := adm.must(http.MethodPost, "/admin/pods/"+podA+"/audit", obj{"reason": fmt.Sprintf("triage %d", i)}, http.StatusOK)
		if len(asSlice(a["found"])) != 1 {
			t.Fatalf("got audit %v, want one position found", a)
		}
	}

	t.Run("SummaryGroupsTheDrift", func(t *testing.T) {
		viewer.tb = t
		var g obj
		eventually(t, "two state_drift of one position in the summary", func() bool {
			s := viewer.must(http.MethodGet, "/admin/divergences/summary?pod="+podA+"&kind=state_drift&since=1h", nil, http.StatusOK)
			for _, x := range asSlice(s["groups"]) {
				x := x.(obj)
				pos := x["position"].(obj)
				if num(pos["shop_id"]) == shop && num(pos["inventory_item_id"]) == item && num(pos["group_id"]) == group {
					g = x
				}
			}
			return g != nil && num(g["count"]) == 2
		})
		if g["op"] != "audit" || g["first_seen"] == g["last_seen"] {
			t.Errorf("got group %v, want op audit seen at two times", g)
		}
		ex := g["example"].(obj)
		want := fmt.Sprintf("state drift: item %d group %d: ledger on_hand 15", item, group)
		if e, _ := ex["explanation"].(string); !strings.HasPrefix(e, want) {
			t.Errorf("got explanation %q, want it to start %q", e, want)
		}
		future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		if s := viewer.must(http.MethodGet, "/admin/divergences/summary?since="+future, nil, http.StatusOK); len(asSlice(s["groups"])) != 0 {
			t.Errorf("got %v since an hour ahead, want no groups", s)
		}
		viewer.mustErr(http.MethodGet, "/admin/divergences/summary?pod=nope", nil, http.StatusNotFound, "unknown_pod")
		viewer.mustErr(http.MethodGet, "/admin/divergences/summary?since=soon", nil, http.StatusBadRequest, "invalid_request")
	})

	t.Run("Exports", func(t *testing.T) {
		adm.tb = t
		code, body := adm.getText("/admin/divergences?pod=" + podA + "&kind=state_drift&format=csv")
		rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		if code != http.StatusOK || err != nil || len(rows) < 3 {
			t.Fatalf("got %d, %d rows (%v), want 200 with a header and the two drifts:\n%s", code, len(rows), err, body)
		}
		if rows[0][len(rows[0])-1] != "explanation" || rows[1][4] != "state_drift" || rows[1][7] != fmt.Sprint(item) {
			t.Errorf("got header %v and row %v, want the drift of item %d with its explanation", rows[0], rows[1], item)
		}
		code, body = adm.getText("/admin/divergences?pod=" + podA + "&kind=state_drift&format=jsonl")
		lines := strings.Split(strings.TrimSpace(body), "\n")
		var d obj
		if code != http.StatusOK || len(lines) < 2 || json.Unmarshal([]byte(lines[0]), &d) != nil || d["position"] == nil || d["explanation"] == "" {
			t.Errorf("got %d:\n%s\nwant one drift per line with its position and explanation", code, body)
		}
		adm.mustErr(http.MethodGet, "/admin/divergences?format=xml", nil, http.StatusBadRequest, "invalid_request")
	})

	t.Run("EffectiveConfig", func(t *testing.T) {
		viewer.tb = t
		c := viewer.must(http.MethodGet, "/admin/config", nil, http.StatusOK)
		ro, _ := c["rollout"].(obj)
		sh, _ := c["shadow"].(obj)
		if ro["abort_divergence_rate"] != 0.05 || ro["gate_max_divergence_rate"] != cfg.Rollout.GateMaxDivergenceRate || sh["timeout"] != "250ms" {
			t.Errorf("got rollout %v shadow %v, want the abort at 0.05, the gate and timeout 250ms", ro, sh)
		}
		if pods := asSlice(c["pods"]); len(pods) != 2 || pods[0].(obj)["name"] != podA {
			t.Errorf("got pods %v, want both, %s first", pods, podA)
		}
	})

	t.Run("History", func(t *testing.T) {
		viewer.tb = t
		eventually(t, "two history samples of pod A", func() bool {
			h := viewer.must(http.MethodGet, "/admin/history?pod="+podA, nil, http.StatusOK)
			s := asSlice(h["samples"])
			return len(s) >= 2 && s[0].(obj)["pod"] == podA && s[0].(obj)["at"] != nil
		})
	})

	t.Run("Tandemctl", func(t *testing.T) {
		bin := mustBuildTandemctl(t)
		r := runCtl(t, bin, in.AdminURL, in.AdminToken, "divergences", "--group", "--pod", podA, "--kind", "state_drift")
		want := fmt.Sprintf("item %d group %d", item, group)
		if r.code != 0 || !strings.Contains(r.stdout, "COUNT") || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "ledger on_hand 15") {
			t.Errorf("divergences --group: exit %d\n%s%s\nwant a group of %s with its explanation", r.code, r.stdout, r.stderr, want)
		}
		r = runCtl(t, bin, in.AdminURL, in.AdminToken, "config")
		if r.code != 0 || !strings.Contains(r.stdout, "abort_divergence_rate: 0.05") {
			t.Errorf("config: exit %d\n%s%s\nwant the abort threshold", r.code, r.stdout, r.stderr)
		}
	})
}
