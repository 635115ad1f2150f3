package web_test

import (
	"context"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// switchAdmin is a fakeAdmin whose kill switch keeps its state: pod-a
// (shadow), pod-b (mysql) and pod-c (mysql_only, which cannot fall back).
type switchAdmin struct {
	*fakeAdmin
	mu      sync.Mutex
	engaged map[string]tandem.KillSwitchEngagement
	// down makes every engagement fail as a control plane that cannot be
	// written.
	down bool
}

func (f *switchAdmin) EngageKillSwitch(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	f.record("EngageKillSwitch", podCall{Pod: strings.Join(pods, ","), Change: ch})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, tandem.Errorf(tandem.EUNAVAILABLE, "the kill switch cannot be written")
	}
	var refused []tandem.Refusal
	for _, p := range pods {
		switch p {
		case "pod-a", "pod-b":
		case "pod-c":
			refused = append(refused, tandem.Refusal{Pod: p, Reason: "mysql_only cannot fall back"})
			continue
		default:
			return nil, tandem.Errorf(tandem.EUNKNOWNPOD, "unknown pod %q", p)
		}
		f.engaged[p] = tandem.KillSwitchEngagement{Pod: p, Since: at, Actor: ch.Actor, Reason: ch.Reason}
	}
	st := f.state()
	st.Refused = append([]tandem.Refusal{}, refused...)
	return st, nil
}

func (f *switchAdmin) KillSwitch(ctx context.Context) (*tandem.KillSwitchState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state(), nil
}

func (f *switchAdmin) state() *tandem.KillSwitchState {
	st := &tandem.KillSwitchState{Pods: []string{}}
	for p, e := range f.engaged {
		st.Pods = append(st.Pods, p)
		st.Engagements = append(st.Engagements, e)
		since := e.Since
		st.Since, st.Reason = &since, e.Reason
	}
	sort.Strings(st.Pods)
	st.Engaged = len(st.Pods) > 0
	return st
}

func newSwitchAdmin(t *testing.T) (http.Handler, *switchAdmin) {
	t.Helper()
	f := &switchAdmin{fakeAdmin: &fakeAdmin{}, engaged: map[string]tandem.KillSwitchEngagement{}}
	s := &web.AdminServer{Admin: f, Token: adminToken, ViewerToken: viewerToken, Dashboard: testDashboard}
	return s.Handler(), f
}

// alertmanagerBody is a payload as Alertmanager 0.27 sends it, with the
// fields tandem does not read.
func alertmanagerBody(alerts ...string) string {
	return `{"receiver":"tandem-killswitch","status":"firing","alerts":[` + strings.Join(alerts, ",") + `],
	"groupLabels":{"alertname":"TandemDivergenceRateHigh"},"commonLabels":{"severity":"page"},
	"commonAnnotations":{},"externalURL":"http://alertmanager:9093","version":"4",
	"groupKey":"{}:{alertname=\"TandemDivergenceRateHigh\"}","truncatedAlerts":0}`
}

func alert(status, name, pod, summary string) string {
	labels := `"alertname":"` + name + `","severity":"page"`
	if pod != "" {
		labels += `,"pod":"` + pod + `"`
	}
	return `{"status":"` + status + `","labels":{` + labels + `},"annotations":{"summary":"` + summary + `"},
	"startsAt":"2026-11-30T10:00:00Z","endsAt":"0001-01-01T00:00:00Z",
	"generatorURL":"http://prometheus:9090/graph","fingerprint":"c3f1a2b4d5e6f708"}`
}

func strList(v any) []string {
	out := []string{}
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

func TestAlertKillSwitch(t *testing.T) {
	const target = "/admin/alerts/killswitch"
	firingA := alert("firing", "TandemDivergenceRateHigh", "pod-a", "pod-a diverges at 2%")

	t.Run("NoTokenIs401", func(t *testing.T) {
		h, f := newSwitchAdmin(t)
		mustError(t, do(t, h, req{method: "POST", target: target, body: alertmanagerBody(firingA)}), http.StatusUnauthorized, tandem.EUNAUTHORIZED)
		if len(f.engaged) != 0 {
			t.Fatalf("got %v engaged, want none", f.engaged)
		}
	})

	t.Run("ViewerTokenIs403", func(t *testing.T) {
		h, f := newSwitchAdmin(t)
		mustError(t, do(t, h, req{method: "POST", target: target, token: viewerToken, body: alertmanagerBody(firingA)}), http.StatusForbidden, tandem.EFORBIDDEN)
		if len(f.engaged) != 0 || len(f.Names()) != 0 {
			t.Fatalf("got %v engaged and calls %v, want none", f.engaged, f.Names())
		}
	})

	t.Run("BadPayloadIs400AndChangesNothing", func(t *testing.T) {
		for name, body := range map[string]string{
			"MalformedJSON": `{"alerts":[`,
			"NoAlerts":      `{"version":"4","status":"firing"}`,
			"AlertsNotList": `{"alerts":{"status":"firing"}}`,
			// A valid alert in the same batch does not act either.
			"BadStatus": alertmanagerBody(firingA, alert("pending", "X", "pod-b", "")),
		} {
			t.Run(name, func(t *testing.T) {
				h, f := newSwitchAdmin(t)
				mustError(t, do(t, h, req{method: "POST", target: target, token: adminToken, body: body}), http.StatusBadRequest, tandem.EINVALID)
				if len(f.engaged) != 0 {
					t.Fatalf("got %v engaged, want none", f.engaged)
				}
			})
		}
	})

	t.Run("FiringEngagesThePodsOfItsLabel", func(t *testing.T) {
		h, f := newSwitchAdmin(t)
		got := mustJSON(t, do(t, h, req{method: "POST", target: target, token: adminToken, body: alertmanagerBody(
			firingA,
			alert("firing", "TandemMySQLErrorsHigh", "pod-b", ""),
			alert("firing", "TandemDivergenceRateHigh", "pod-z", "no such pod"),
			alert("firing", "TandemFleetDown", "", "every pod"),
			alert("firing", "TandemDivergenceRateHigh", "pod-c", "mysql_only"),
		)}), http.StatusOK)
		if e := strList(got["engaged"]); !reflect.DeepEqual(e, []string{"pod-a", "pod-b"}) {
			t.Errorf("got engaged %v, want [pod-a pod-b]", e)
		}
		if u := strList(got["unknown_pods"]); !reflect.DeepEqual(u, []string{"pod-z"}) {
			t.Errorf("got unknown_pods %v, want [pod-z]", u)
		}
		if r := got["refused"].([]any); len(r) != 1 || r[0].(map[string]any)["pod"] != "pod-c" {
			t.Errorf("got refused %v, want pod-c", r)
		}
		if ig := got["ignored"].([]any); len(ig) != 1 || !strings.Contains(ig[0].(map[string]any)["why"].(string), "no pod label") {
			t.Errorf("got ignored %v, want the alert without a pod label", ig)
		}
		if ks := got["kill_switch"].(map[string]any); ks["engaged"] != true {
			t.Errorf("got kill_switch %v, want engaged", ks)
		}
		a, b := f.engaged["pod-a"], f.engaged["pod-b"]
		if a.Actor != web.AlertActor || a.Reason != "alert TandemDivergenceRateHigh firing: pod-a diverges at 2%" {
			t.Errorf("got pod-a engaged by %q for %q, want alertmanager and the alert's name and summary", a.Actor, a.Reason)
		}
		if b.Reason != "alert TandemMySQLErrorsHigh firing" {
			t.Errorf("got pod-b's reason %q, want the alert's name", b.Reason)
		}
	})

	t.Run("ResolvedNeverDisengages", func(t *testing.T) {
		h, f := newSwitchAdmin(t)
		mustJSON(t, do(t, h, req{method: "POST", target: target, token: adminToken, body: alertmanagerBody(firingA)}), http.StatusOK)
		got := mustJSON(t, do(t, h, req{method: "POST", target: target, token: adminToken, body: alertmanagerBody(
			alert("resolved", "TandemDivergenceRateHigh", "pod-a", "pod-a diverges at 2%"))}), http.StatusOK)
		if _, ok := f.engaged["pod-a"]; !ok {
			t.Fatal("pod-a was disengaged by a resolved alert")
		}
		for _, name := range f.Names() {
			if name == "DisengageKillSwitch" {
				t.Fatal("got a DisengageKillSwitch call")
			}
		}
		if ig := got["ignored"].([]any); len(ig) != 1 || ig[0].(map[string]any)["status"] != "resolved" || len(strList(got["engaged"])) != 0 {
			t.Errorf("got %v, want the resolved alert ignored and nothing engaged", got)
		}
	})

	t.Run("RepeatedAlertKeepsTheFirstEngagement", func(t *testing.T) {
		h, f := newSwitchAdmin(t)
		mustJSON(t, do(t, h, req{method: "POST", target: target, token: adminToken, body: alertmanagerBody(firingA)}), http.StatusOK)
		got := mustJSON(t, do(t, h, req{method: "POST", target: target, token: adminToken, body: alertmanagerBody(firingA, firingA)}), http.StatusOK)
		if a := strList(got["already_engaged"]); !reflect.DeepEqual(a, []string{"pod-a"}) {
			t.Errorf("got already_engaged %v, want [pod-a]", a)
		}
		n := 0
		for _, name := range f.Names() {
			if name == "EngageKillSwitch" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("got %d engagements, want 1 (Alertmanager repeats firing alerts)", n)
		}
	})

	t.Run("ActorFromHeader", func(t *testing.T) {
		h, f := newSwitchAdmin(t)
		mustJSON(t, do(t, h, req{method: "POST", target: target, token: adminToken, body: alertmanagerBody(firingA),
			header: map[string]string{"X-Actor": "alertmanager-eu"}}), http.StatusOK)
		if a := f.engaged["pod-a"].Actor; a != "alertmanager-eu" {
			t.Errorf("got actor %q, want alertmanager-eu", a)
		}
	})

	t.Run("KillSwitchUnwritableIs503", func(t *testing.T) {
		h, f := newSwitchAdmin(t)
		f.down = true
		mustError(t, do(t, h, req{method: "POST", target: target, token: adminToken, body: alertmanagerBody(firingA)}), http.StatusServiceUnavailable, tandem.EUNAVAILABLE)
	})
}
