package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/tandemhq/tandem"
)

// POST /admin/alerts/killswitch is a receiver of Alertmanager's webhook
// (payload version 4): a firing alert engages the kill switch of the pods
// its `pod` label names, so that an alert on the pods' own metrics moves
// them back to Redis without waiting for an operator, as LaunchDarkly's
// guarded rollouts and Flagger's rollback on alerts do.
//
// - A resolved alert never disengages: whether MySQL is fit to answer
//   again is an operator's call (tandemctl unkill).
// - A firing alert without a pod label is ignored and said so in the
//   answer: an alert never engages every pod (tandemctl kill --all does).
// - Unknown pods are listed in the answer; the other alerts still act,
//   since Alertmanager sends a group of alerts at once and retries the
//   whole group on a failure.
// - Alertmanager sends no reason: the audit log's reason is derived from
//   the alert ("alert TandemDivergence firing: <summary annotation>"),
//   the actor is X-Actor, else "alertmanager".

// AlertActor is the actor of the kill switch changes an alert makes.
const AlertActor = "alertmanager"

// alertmanagerPayload is the part of Alertmanager's webhook body that
// tandem reads; other fields are accepted and ignored.
type alertmanagerPayload struct {
	Version string               `json:"version"`
	Status  string               `json:"status"`
	Alerts  *[]alertmanagerAlert `json:"alerts"`
}

type alertmanagerAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    string            `json:"startsAt"`
}

// Alert statuses.
const (
	alertFiring   = "firing"
	alertResolved = "resolved"
)

// ignoredAlert is an alert that changed nothing, and why.
type ignoredAlert struct {
	Alert  string `json:"alert"`
	Status string `json:"status"`
	Why    string `json:"why"`
}

// alertAnswer is the answer of POST /admin/alerts/killswitch.
type alertAnswer struct {
	// Engaged are the pods this call engaged.
	Engaged []string `json:"engaged"`
	// AlreadyEngaged are named pods whose kill switch was engaged before.
	AlreadyEngaged []string `json:"already_engaged"`
	// UnknownPods are pod labels that name no pod.
	UnknownPods []string `json:"unknown_pods"`
	// Refused are pods that cannot fall back (mysql_only).
	Refused []tandem.Refusal `json:"refused"`
	Ignored []ignoredAlert   `json:"ignored"`
	// KillSwitch is the kill switch after the call.
	KillSwitch *tandem.KillSwitchState `json:"kill_switch"`
}

// decodeAlerts reads an Alertmanager payload: the admin API's content
// type, size and one-value checks, but unknown fields accepted (the
// payload has many, and gains more across versions), and every alert
// firing or resolved.
func decodeAlerts(w http.ResponseWriter, r *http.Request) ([]alertmanagerAlert, error) {
	var raw json.RawMessage
	if err := decodeJSON(w, r, &raw); err != nil {
		return nil, err
	}
	var p alertmanagerPayload
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, decodeError(err)
	}
	if p.Alerts == nil {
		return nil, invalid("alerts is required: want Alertmanager's webhook payload (version 4)")
	}
	for i, a := range *p.Alerts {
		if a.Status != alertFiring && a.Status != alertResolved {
			return nil, invalid("alerts[%d].status must be firing or resolved, got %q", i, a.Status)
		}
	}
	return *p.Alerts, nil
}

// alertReason is the audit log's reason for what a firing alert does.
func alertReason(a alertmanagerAlert) string {
	name := a.Labels["alertname"]
	if name == "" {
		name = "(no alertname)"
	}
	reason := fmt.Sprintf("alert %s firing", name)
	if s := strings.TrimSpace(a.Annotations["summary"]); s != "" {
		reason += ": " + s
	}
	// truncate may add "…" to the bytes it keeps: keep the runes within
	// MaxReasonLen.
	return truncate(strings.ToValidUTF8(reason, "?"), MaxReasonLen-4)
}

// alertActor is X-Actor, else AlertActor.
func alertActor(r *http.Request) (string, error) {
	actor := strings.TrimSpace(r.Header.Get("X-Actor"))
	if actor == "" {
		actor = AlertActor
	}
	if utf8.RuneCountInString(actor) > MaxActorLen || !utf8.ValidString(actor) {
		return "", invalid("X-Actor must be at most %d characters of UTF-8", MaxActorLen)
	}
	if a := accessFrom(r.Context()); a != nil {
		a.actor = actor
	}
	return actor, nil
}

func (h *adminHandler) alertKillSwitch(w http.ResponseWriter, r *http.Request) {
	alerts, err := decodeAlerts(w, r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	actor, err := alertActor(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	st, err := h.svc.KillSwitch(r.Context())
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	engaged := map[string]bool{}
	for _, p := range st.Pods {
		engaged[p] = true
	}
	ans := alertAnswer{Engaged: []string{}, AlreadyEngaged: []string{}, UnknownPods: []string{},
		Refused: []tandem.Refusal{}, Ignored: []ignoredAlert{}}
	seen := map[string]bool{}
	for _, a := range alerts {
		name := a.Labels["alertname"]
		pod := strings.TrimSpace(a.Labels["pod"])
		switch {
		case a.Status == alertResolved:
			ans.Ignored = append(ans.Ignored, ignoredAlert{Alert: name, Status: a.Status,
				Why: "a resolved alert never disengages the kill switch: an operator does (tandemctl unkill)"})
			continue
		case pod == "":
			ans.Ignored = append(ans.Ignored, ignoredAlert{Alert: name, Status: a.Status,
				Why: "no pod label: an alert engages only the pods its pod label names"})
			continue
		case seen[pod]:
			continue
		}
		seen[pod] = true
		if engaged[pod] {
			ans.AlreadyEngaged = append(ans.AlreadyEngaged, pod)
			continue
		}
		if validatePodName(pod) != nil {
			ans.UnknownPods = append(ans.UnknownPods, pod)
			continue
		}
		got, err := h.svc.EngageKillSwitch(r.Context(), []string{pod}, tandem.Change{Actor: actor, Reason: alertReason(a)})
		switch code := tandem.ErrorCode(err); {
		case err == nil && len(got.Refused) > 0:
			ans.Refused = append(ans.Refused, got.Refused...)
		case err == nil:
			ans.Engaged = append(ans.Engaged, pod)
			engaged[pod] = true
		case code == tandem.EUNKNOWNPOD || code == tandem.EINVALID:
			ans.UnknownPods = append(ans.UnknownPods, pod)
		default:
			// The kill switch could not be written: Alertmanager sends
			// the group again, and what was engaged shows as such then.
			writeError(w, r, h.logger, err)
			return
		}
	}
	if st, err = h.svc.KillSwitch(r.Context()); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	ans.KillSwitch = killSwitchJSON(st)
	writeJSON(w, http.StatusOK, ans)
}
