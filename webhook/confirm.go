package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/tandemhq/tandem"
)

// Confirmer asks the rollout plan's confirm webhooks whether a pod may be
// promoted, as Flagger's confirm-promotion webhooks do: a JSON POST of the
// tandem.Promotion (the pod, the move and the gate values it passed) that
// only a 2xx answer confirms. It posts once per call and never retries:
// the plan asks again on its next turn. Safe for concurrent use.
type Confirmer struct {
	// Client sends the POSTs; nil takes http.DefaultClient. The caller's
	// context bounds each call.
	Client *http.Client
}

// Confirm posts p to rawURL and returns nil when the receiver answers
// 2xx. Otherwise the error says what it answered ("answered 503 Service
// Unavailable: ..."), or why it could not be asked; a call cut short by
// ctx's deadline returns an error that is context.DeadlineExceeded.
func (c *Confirmer) Confirm(ctx context.Context, rawURL string, p tandem.Promotion) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	err = post(ctx, client, rawURL, body)
	// The caller names the URL; the transport's error repeats it.
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
