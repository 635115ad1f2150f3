package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EPlanConfirmWebhooks: a plan whose config names a confirm webhook
// promotes a pod only once the webhook answers 2xx; a refusal and a
// timeout keep the pod in shadow, and PLAN says why.
func TestE2EPlanConfirmWebhooks(t *testing.T) {
	testenv.RequireIntegration(t)
	// answer is what the receiver does: a status, or 0 to hold the call
	// until the caller gives up.
	var answer atomic.Int32
	answer.Store(http.StatusServiceUnavailable)
	got := make(chan obj, 1024)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p obj
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		io.Copy(io.Discard, r.Body)
		select {
		case got <- p:
		default:
		}
		status := int(answer.Load())
		if status == 0 {
			<-r.Context().Done()
			return
		}
		http.Error(w, "canary analysis: error budget spent", status)
	}))
	defer srv.Close()

	cfg, _ := MustConfig(t)
	cfg.Rollout.GateMinComparisons = 0
	cfg.Rollout.GateMaxP99Factor = 0
	cfg.Rollout.AbortDivergenceRate = 0
	cfg.Rollout.Plan.ConfirmWebhooks = []string{srv.URL + "/confirm"}
	in := MustRunMain(t, cfg, func(m *server.Main) { m.PlanInterval = 50 * time.Millisecond })
	podA := cfg.Pods[0].Name

	p := in.Admin.must(http.MethodPost, "/admin/plan/start",
		obj{"reason": "e2e confirm", "shadow_soak": "0s", "mysql_soak": "1h", "confirm_timeout": "300ms"}, http.StatusOK)
	if s, _ := p["settings"].(obj); !slices.Equal(strs(s["confirm_webhooks"]), []string{srv.URL + "/confirm"}) || s["confirm_timeout"] != "300ms" {
		t.Fatalf("got settings %v, want the configured webhook and 300ms", s)
	}
	waitFor := func(what, want string) {
		t.Helper()
		eventually(t, "PLAN waiting on "+what, func() bool {
			p = in.Admin.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)
			w, _ := p["waiting"].(string)
			pod, _ := asSlice(p["pods"])[0].(obj)
			pw, _ := pod["waiting"].(string)
			return strings.Contains(w, want) && strings.Contains(pw, want)
		})
		if st := podStatus(in.Admin, podA); st["mode"] != "shadow" {
			t.Fatalf("got %s in %v while its confirm webhook %s, want shadow", podA, st["mode"], what)
		}
	}
	waitFor("refuses", "confirm webhook "+srv.URL+"/confirm answered 503 Service Unavailable: canary analysis: error budget spent")
	answer.Store(0)
	waitFor("times out", "confirm webhook "+srv.URL+"/confirm timed out after 300ms")

	answer.Store(http.StatusOK)
	eventually(t, podA+" promoted once the webhook answers 200", func() bool {
		return podStatus(in.Admin, podA)["mode"] == "mysql"
	})
	promo := <-got
	gates, _ := promo["gates"].(obj)
	if promo["pod"] != podA || promo["from"] != "shadow" || promo["to"] != "mysql" || promo["plan_id"] == "" ||
		promo["driver"] != in.Main.InstanceID || promo["at"] == nil || len(asSlice(gates["checks"])) == 0 {
		t.Errorf("got promotion %v, want %s shadow -> mysql with plan, driver, gate checks and time", promo, podA)
	}
	if !auditLogHasActor(in.Admin, "set_mode", podA, "plan", "mysql") {
		t.Errorf("the audit log lacks the plan's promotion of %s", podA)
	}
}

// alertmanagerPayload is an Alertmanager webhook body (version 4) with the
// alerts.
func alertmanagerPayload(alerts ...obj) obj {
	return obj{"version": "4", "receiver": "tandem-killswitch", "status": "firing", "alerts": alerts,
		"groupLabels": obj{}, "commonLabels": obj{}, "commonAnnotations": obj{}, "externalURL": "http://alertmanager:9093",
		"groupKey": "{}/{tandem_killswitch=\"true\"}:{}", "truncatedAlerts": 0}
}

func firingAlert(status, name, pod, summary string) obj {
	labels := obj{"alertname": name, "severity": "page", "tandem_killswitch": "true"}
	if pod != "" {
		labels["pod"] = pod
	}
	return obj{"status": status, "labels": labels, "annotations": obj{"summary": summary},
		"startsAt": "2026-11-30T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
		"generatorURL": "http://prometheus:9090/graph", "fingerprint": "0123456789abcdef"}
}

// TestE2EAlertKillSwitch: Alertmanager's webhook, sent over HTTP with the
// admin token, engages the kill switch of the pod its firing alert names,
// written to the audit log by alertmanager with the alert as the reason; a
// resolved alert leaves it engaged; the viewer token and bad JSON change
// nothing.
func TestE2EAlertKillSwitch(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg, func(m *server.Main) { m.ViewerToken = e2eViewerToken })
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name
	// Alertmanager sends no X-Actor.
	am := &apiClient{tb: t, base: in.AdminURL, token: in.AdminToken}
	viewer := &apiClient{tb: t, base: in.AdminURL, token: e2eViewerToken}
	const path = "/admin/alerts/killswitch"
	firing := firingAlert("firing", "TandemMySQLSourceOfTruthFailing", podA, "Pod "+podA+": 3% of MySQL answers fail")
	engaged := func() []string {
		return strs(in.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)["pods"])
	}

	t.Run("ViewerIsForbidden", func(t *testing.T) {
		viewer.mustErr(http.MethodPost, path, alertmanagerPayload(firing), http.StatusForbidden, "forbidden")
		(&apiClient{tb: t, base: in.AdminURL}).mustErr(http.MethodPost, path, alertmanagerPayload(firing), http.StatusUnauthorized, "unauthorized")
		if e := engaged(); len(e) != 0 {
			t.Fatalf("got %v engaged, want none", e)
		}
	})
	t.Run("BadJSONChangesNothing", func(t *testing.T) {
		st, v := am.raw(http.MethodPost, path, "application/json", []byte(`{"alerts":[{"status":"firing","labels":{"pod":"`+podA+`"}`))
		checkErr(t, "bad JSON", st, v, http.StatusBadRequest, "invalid_request")
		if e := engaged(); len(e) != 0 {
			t.Fatalf("got %v engaged, want none", e)
		}
	})
	t.Run("FiringEngages", func(t *testing.T) {
		got := am.must(http.MethodPost, path, alertmanagerPayload(firing,
			firingAlert("firing", "TandemMySQLSourceOfTruthFailing", "pod-nowhere", ""),
			firingAlert("firing", "TandemFleetWide", "", "no pod label")), http.StatusOK)
		if !slices.Equal(strs(got["engaged"]), []string{podA}) || !slices.Equal(strs(got["unknown_pods"]), []string{"pod-nowhere"}) ||
			len(asSlice(got["ignored"])) != 1 {
			t.Fatalf("got %v, want %s engaged, pod-nowhere unknown, one alert ignored", got, podA)
		}
		if e := engaged(); !slices.Equal(e, []string{podA}) {
			t.Fatalf("got %v engaged, want [%s]", e, podA)
		}
		if st := podStatus(in.Admin, podA); st["kill_switch"] != true || st["source_of_truth"] != "redis" {
			t.Errorf("got %v, want %s killed on redis", st, podA)
		}
		// The kill switch writes its audit entries in the background (it
		// works while the control database is down).
		var entry obj
		eventually(t, "the engagement in the audit log", func() bool {
			for _, e := range asSlice(in.Admin.must(http.MethodGet, "/admin/audit-log?limit=100", nil, http.StatusOK)["entries"]) {
				if e := e.(obj); e["action"] == "killswitch_engage" && e["pod"] == podA {
					entry = e
					return true
				}
			}
			return false
		})
		if entry["actor"] != "alertmanager" || entry["reason"] != "alert TandemMySQLSourceOfTruthFailing firing: Pod "+podA+": 3% of MySQL answers fail" {
			t.Errorf("got audit entry %v, want actor alertmanager and the alert's name and summary as reason", entry)
		}
	})
	t.Run("ResolvedNeverDisengages", func(t *testing.T) {
		resolved := firingAlert("resolved", "TandemMySQLSourceOfTruthFailing", podA, "")
		resolved["endsAt"] = "2026-11-30T10:05:00Z"
		got := am.must(http.MethodPost, path, alertmanagerPayload(resolved), http.StatusOK)
		if len(strs(got["engaged"])) != 0 || len(asSlice(got["ignored"])) != 1 {
			t.Fatalf("got %v, want nothing engaged and the resolved alert ignored", got)
		}
		if e := engaged(); !slices.Equal(e, []string{podA}) {
			t.Fatalf("got %v engaged, want [%s] still", e, podA)
		}
		if auditLogHas(in.Admin, "killswitch_disengage", podA, "") {
			t.Error("got a killswitch_disengage in the audit log")
		}
	})
	t.Run("OtherPodUntouched", func(t *testing.T) {
		if st := podStatus(in.Admin, podB); st["kill_switch"] != false {
			t.Errorf("got %v, want %s not killed", st, podB)
		}
	})
}
