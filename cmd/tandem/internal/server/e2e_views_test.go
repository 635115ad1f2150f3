package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EViewsSayWhatIsTrue runs tandemctl against a real server through
// the states whose views used to contradict them: a pod with no comparison
// and no audit, an aborted plan, a killed pod in mysql, and two pods killed
// at different times by different people for different reasons.
func TestE2EViewsSayWhatIsTrue(t *testing.T) {
	testenv.RequireIntegration(t)
	bin := mustBuildTandemctl(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg, func(m *server.Main) { m.PlanInterval = 50 * time.Millisecond })
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name // shadow, redis
	ctl := func(t *testing.T, args ...string) string {
		t.Helper()
		r := runCtl(t, bin, in.AdminURL, in.AdminToken, args...)
		if r.code != 0 {
			t.Fatalf("tandemctl %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	lineOf := func(t *testing.T, out, prefix string) string {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("got no line starting with %q in\n%s", prefix, out)
		return ""
	}

	t.Run("NoDataIsNotApplicable", func(t *testing.T) {
		// pod B is in redis: nothing compared, never audited.
		row := lineOf(t, ctl(t, "pods"), podB+" ")
		if !strings.Contains(row, " n/a ") || !strings.Contains(row, "no audit yet") || strings.Contains(row, "not clean") || strings.Contains(row, "0.000%") {
			t.Errorf("got pods row %q, want DIV_RATE n/a and AUDIT no audit yet", row)
		}
		row = lineOf(t, ctl(t, "report"), podB+" ")
		if strings.Contains(row, "0.00ms") || strings.Contains(row, "0.000%") || strings.Count(row, "n/a") != 6 {
			t.Errorf("got report row %q, want n/a for the rate, the contention and the four latencies", row)
		}
	})

	t.Run("AbortedPlanShowsNoSoak", func(t *testing.T) {
		in.Admin.tb = t
		in.Admin.must(http.MethodPost, "/admin/plan/start", obj{"reason": "views", "shadow_soak": "1h", "mysql_soak": "1h"}, http.StatusOK)
		poll(t, "pod A soaking in shadow", 20*time.Millisecond, func() bool {
			return strings.Contains(ctl(t, "plan"), "more soak")
		})
		out := ctl(t, "plan", "abort", "--reason", "views")
		if strings.Contains(out, "more soak") || strings.Contains(out, "soaking") || strings.Contains(out, podA+" gates:") {
			t.Errorf("got plan after abort\n%s\nwant no soak and no gates of an aborted pod", out)
		}
		if row := lineOf(t, out, "1 "); !strings.Contains(row, " aborted ") {
			t.Errorf("got plan row %q, want pod A aborted", row)
		}
		p := in.Admin.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)
		for _, pp := range asSlice(p["pods"]) {
			pp := pp.(obj)
			for _, c := range asSlice(pp["gates"].(obj)["checks"]) {
				if c.(obj)["gate"] == "min_soak" && pp["step"] == "aborted" {
					t.Errorf("got %v on aborted %v, want no min_soak", c, pp["pod"])
				}
			}
		}
	})

	t.Run("KillSwitchPerPod", func(t *testing.T) {
		ctl(t, "kill", "--pods", podB, "--reason", "b first", "--actor", "erin")
		ctl(t, "kill", "--pods", podA, "--reason", "a second", "--actor", "frank")
		// --json is the documented KILLSWITCH, unchanged, with each pod's
		// engagement besides.
		var ks struct {
			Engaged     bool     `json:"engaged"`
			Pods        []string `json:"pods"`
			Since       string   `json:"since"`
			Reason      string   `json:"reason"`
			Engagements []struct {
				Pod   string    `json:"pod"`
				Since time.Time `json:"since"`
			} `json:"engagements"`
		}
		if err := json.Unmarshal([]byte(ctl(t, "--json", "killswitch")), &ks); err != nil {
			t.Fatal(err)
		}
		if !ks.Engaged || len(ks.Pods) != 2 || ks.Since == "" || ks.Reason != "a second" || len(ks.Engagements) != 2 {
			t.Fatalf("got --json %+v, want engaged, both pods, the earliest since, the latest reason and both engagements", ks)
		}
		since := map[string]string{}
		for _, e := range ks.Engagements {
			since[e.Pod] = e.Since.UTC().Format("2006-01-02T15:04:05Z")
		}
		out := ctl(t, "killswitch")
		a, b := lineOf(t, out, podA+" "), lineOf(t, out, podB+" ")
		if !strings.Contains(a, since[podA]+"  frank") || !strings.HasSuffix(a, "a second") ||
			!strings.Contains(b, since[podB]+"  erin") || !strings.HasSuffix(b, "b first") {
			t.Errorf("got kill switch\n%s\nwant each pod with its own since (%v), actor and reason", out, since)
		}
		if strings.Contains(out, "reason:") || strings.Contains(out, "since:") {
			t.Errorf("got a switch-wide since or reason in\n%s\nwant each pod's own only", out)
		}
	})

	t.Run("KilledPodGatesNotApplicable", func(t *testing.T) {
		out := ctl(t, "pods")
		for _, pod := range []string{podA, podB} {
			if row := lineOf(t, out, pod+" "); !strings.Contains(row, "n/a (killed)") || strings.Contains(row, " pass ") {
				t.Errorf("got pods row %q, want gates n/a for a killed pod", row)
			}
		}
	})

	t.Run("PlanCountsByEffectiveSourceOfTruth", func(t *testing.T) {
		in.Admin.tb = t
		ctl(t, "unkill", "--pods", podA, "--reason", "promote by hand")
		in.Admin.must(http.MethodPut, "/admin/pods/"+podA+"/mode", obj{"mode": "mysql", "reason": "views", "force": true}, http.StatusOK)
		if !strings.Contains(ctl(t, "plan"), "on mysql:    1 of 2 pods as source of truth\n") {
			t.Fatalf("got plan\n%s\nwant pod A counted on MySQL", ctl(t, "plan"))
		}
		ctl(t, "kill", "--pods", podA, "--reason", "mysql errors")
		out := ctl(t, "plan")
		if !strings.Contains(out, "on mysql:    0 of 2 pods as source of truth (killed, served by Redis: "+podA+")\n") {
			t.Errorf("got plan\n%s\nwant pod A, killed in mysql, counted on Redis", out)
		}
		if row := lineOf(t, out, "1 "); !strings.Contains(row, " mysql ") || !strings.Contains(row, "redis (killed)") {
			t.Errorf("got plan row %q, want mode mysql, source of truth redis (killed)", row)
		}
	})
}
