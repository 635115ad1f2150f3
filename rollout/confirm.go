package rollout

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// External analysis, as Flagger's confirm-promotion webhooks do it: before
// the plan moves a pod toward MySQL, every confirm webhook of the plan is
// sent the pod's Promotion and must answer 2xx. Anything else, or no
// answer within the timeout, keeps the pod where it is, says why, and the
// plan asks again on its next turn; the gates keep being judged meanwhile
// (a gate failing after it passed still aborts).
//
// The calls run in the background, never in the plan's turn: a turn only
// starts them and reads their answer, so the driver renews its lease and
// holds no lock while a receiver takes its time.

// DefaultConfirmTimeout bounds one confirm webhook call.
const DefaultConfirmTimeout = 10 * time.Second

// MaxConfirmWebhooks is how many confirm webhooks a plan may have.
const MaxConfirmWebhooks = 10

// ActionPlanConfirm is told to OnChange only: the confirm webhooks
// answered a pod's promotion (After is "confirmed", else Reason says why
// not).
const ActionPlanConfirm = "plan_confirm"

// Confirmer asks one confirm webhook about a promotion; webhook's
// Confirmer implements it.
type Confirmer interface {
	// Confirm returns nil when the receiver at url answered 2xx; an
	// error that is context.DeadlineExceeded when ctx ran out first.
	Confirm(ctx context.Context, url string, p tandem.Promotion) error
}

// confirmRun is one asking of a pod's confirm webhooks.
type confirmRun struct {
	// key is the plan, from and to it asked about.
	key  string
	done bool
	// refused says why the webhooks did not confirm ("" when they did).
	refused string
	// at is when it finished.
	at time.Time
	// before is the refusal of the asking before, shown while this one runs.
	before string
}

// confirmed reports whether p's promotion from -> to was confirmed by
// every confirm webhook of the plan. When it was not (yet), it starts the
// asking if none runs and says in p.Waiting why the pod waits. A
// confirmation serves one promotion, within LeaseDuration of its answer.
func (pd *planDriver) confirmed(d *planDoc, p *planPod, from, to tandem.Mode) bool {
	urls := d.Settings.ConfirmWebhooks
	if len(urls) == 0 {
		return true
	}
	if pd.confirmer == nil || pd.life.ctx.Err() != nil {
		p.Waiting = "confirm webhooks are set but this instance cannot call them"
		return false
	}
	key := fmt.Sprintf("%s %s %s", d.ID, from, to)
	now := pd.now()
	pd.confirmMu.Lock()
	defer pd.confirmMu.Unlock()
	r := pd.confirms[p.Pod]
	before := ""
	if r != nil && r.key == key {
		switch {
		case !r.done:
			p.Waiting = waitingForConfirm(r.before, len(urls))
			return false
		case r.refused == "" && now.Sub(r.at) <= pd.leaseDuration:
			delete(pd.confirms, p.Pod)
			return true
		}
		before = r.refused
	}
	pd.confirms[p.Pod] = &confirmRun{key: key, before: before}
	set := d.Settings
	promo := tandem.Promotion{Pod: p.Pod, From: from, To: to, PlanID: d.ID, Driver: pd.instanceID,
		Gates: pd.gates.PlanGates(p.Pod, from, p.Since, soakOf(set, from)), At: now.UTC()}
	if from == tandem.ModeShadow && set.RehearsalSpeed > 0 {
		promo.Gates = withCheck(promo.Gates, rehearsalCheck(*p, set))
	}
	pd.life.start(func() { pd.askConfirm(key, promo, urls, confirmTimeout(set)) })
	p.Waiting = waitingForConfirm(before, len(urls))
	return false
}

func waitingForConfirm(refused string, n int) string {
	if refused != "" {
		return refused + "; asking again"
	}
	return fmt.Sprintf("waiting for the answer of %d confirm webhook(s)", n)
}

// soakOf is the soak of the mode a promotion leaves.
func soakOf(set PlanSettings, from tandem.Mode) time.Duration {
	if from == tandem.ModeMySQL {
		return set.MySQLSoak
	}
	return set.ShadowSoak
}

func confirmTimeout(set PlanSettings) time.Duration {
	if set.ConfirmTimeout <= 0 {
		return DefaultConfirmTimeout
	}
	return set.ConfirmTimeout
}

// askConfirm posts promo to every URL at once, each call bounded by
// timeout, and records the first refusal in URL order (none when all
// answered 2xx).
func (pd *planDriver) askConfirm(key string, promo tandem.Promotion, urls []string, timeout time.Duration) {
	refusals := make([]string, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(pd.life.ctx, timeout)
			defer cancel()
			err := pd.confirmer.Confirm(ctx, u, promo)
			switch {
			case err == nil:
			case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
				refusals[i] = fmt.Sprintf("confirm webhook %s timed out after %s", redactURL(u), timeout)
			default:
				refusals[i] = fmt.Sprintf("confirm webhook %s %s", redactURL(u), err)
			}
		}()
	}
	wg.Wait()
	refused := ""
	for _, r := range refusals {
		if r != "" {
			refused = r
			break
		}
	}
	if pd.life.ctx.Err() != nil {
		return
	}
	pd.confirmMu.Lock()
	if r := pd.confirms[promo.Pod]; r != nil && r.key == key && !r.done {
		r.done, r.refused, r.at = true, refused, pd.now()
	}
	pd.confirmMu.Unlock()
	e := tandem.AuditLogEntry{At: pd.now().UTC(), Actor: ActorPlan, Action: ActionPlanConfirm, Pod: promo.Pod,
		Reason: "every confirm webhook answered 2xx", Before: fmt.Sprintf("%s -> %s", promo.From, promo.To), After: "confirmed"}
	if refused != "" {
		e.Reason, e.After = refused, "not confirmed"
	}
	pd.changed(e)
}

// validateConfirm checks a plan's confirm webhooks and their timeout.
func validateConfirm(urls []string, timeout time.Duration) error {
	if len(urls) > MaxConfirmWebhooks {
		return tandem.Errorf(tandem.EINVALID, "confirm_webhooks: at most %d URLs, got %d", MaxConfirmWebhooks, len(urls))
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return tandem.Errorf(tandem.EINVALID, "confirm_webhooks must be http(s) URLs, got %q", raw)
		}
	}
	if timeout < 0 || timeout > MaxConfirmTimeout {
		return tandem.Errorf(tandem.EINVALID, "confirm_timeout must be 0..%s (0 takes %s), got %s", MaxConfirmTimeout, DefaultConfirmTimeout, timeout)
	}
	return nil
}

// MaxConfirmTimeout is the longest confirm_timeout.
const MaxConfirmTimeout = 5 * time.Minute

// redactURL hides the password of a URL that carries one.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}

func redactURLs(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redactURL(u)
	}
	return out
}
