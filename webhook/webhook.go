// Package webhook notifies operators' chat and paging tools of control
// actions (rollout plan steps, pauses, aborts, kill switch changes,
// automatic aborts) with a JSON POST whose body Slack's incoming webhooks
// accept: a "text" field, plus the action's fields for other receivers.
// Delivery never blocks the caller: Notify queues, a worker posts to every
// URL with a timeout and retries with backoff, and a full queue drops.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// Defaults of the exported fields.
const (
	DefaultTimeout = 5 * time.Second
	DefaultRetries = 3
	DefaultBackoff = 500 * time.Millisecond
	DefaultQueue   = 256
)

// Message is the body of every POST.
type Message struct {
	// Text is the one line a chat shows.
	Text   string    `json:"text"`
	Action string    `json:"action"`
	Actor  string    `json:"actor"`
	Pod    string    `json:"pod,omitempty"`
	Reason string    `json:"reason"`
	Before string    `json:"before,omitempty"`
	After  string    `json:"after,omitempty"`
	At     time.Time `json:"at"`
}

// NewMessage returns the message of a control action.
func NewMessage(e tandem.AuditLogEntry) Message {
	text := fmt.Sprintf("tandem: %s by %s", e.Action, e.Actor)
	if e.Pod != "" {
		text += " on " + e.Pod
	}
	if e.Before != "" || e.After != "" {
		text += fmt.Sprintf(" (%s -> %s)", e.Before, e.After)
	}
	if e.Reason != "" {
		text += ": " + e.Reason
	}
	return Message{Text: text, Action: e.Action, Actor: e.Actor, Pod: e.Pod, Reason: e.Reason,
		Before: e.Before, After: e.After, At: e.At.UTC()}
}

// Notifier posts control actions to URLs. Set the exported fields before
// Open; Notify is safe for concurrent use.
type Notifier struct {
	URLs []string
	// Timeout bounds one POST.
	Timeout time.Duration
	// Retries is how many times a failed POST is tried again, waiting
	// Backoff, then twice as long, and so on.
	Retries int
	Backoff time.Duration
	// Queue is how many messages wait at most; more are dropped.
	Queue int
	// Client sends the POSTs; nil takes a client with Timeout.
	Client *http.Client
	// OnError is told about deliveries that failed for good and drops.
	OnError func(error)

	dropped atomic.Int64
	queue   chan Message
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
}

// Open starts the worker.
func (n *Notifier) Open() {
	if n.Timeout <= 0 {
		n.Timeout = DefaultTimeout
	}
	if n.Retries < 0 {
		n.Retries = 0
	} else if n.Retries == 0 {
		n.Retries = DefaultRetries
	}
	if n.Backoff <= 0 {
		n.Backoff = DefaultBackoff
	}
	if n.Queue <= 0 {
		n.Queue = DefaultQueue
	}
	if n.Client == nil {
		n.Client = &http.Client{Timeout: n.Timeout}
	}
	n.queue = make(chan Message, n.Queue)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(1)
	go n.run()
}

// Close stops the worker, dropping what is still queued; safe twice.
func (n *Notifier) Close() error {
	n.once.Do(func() {
		if n.cancel != nil {
			n.cancel()
			n.wg.Wait()
		}
	})
	return nil
}

// Notify queues the action for every URL and returns at once; it reports
// false when the queue is full and the message was dropped.
func (n *Notifier) Notify(e tandem.AuditLogEntry) bool {
	if len(n.URLs) == 0 || n.queue == nil {
		return true
	}
	select {
	case n.queue <- NewMessage(e):
		return true
	default:
		n.dropped.Add(1)
		n.report(fmt.Errorf("webhook queue full: dropped %s", e.Action))
		return false
	}
}

// Dropped returns how many messages a full queue dropped.
func (n *Notifier) Dropped() int64 { return n.dropped.Load() }

func (n *Notifier) report(err error) {
	if n.OnError != nil {
		n.OnError(err)
	}
}

func (n *Notifier) run() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case m := <-n.queue:
			body, err := json.Marshal(m)
			if err != nil {
				n.report(err)
				continue
			}
			for _, url := range n.URLs {
				if err := n.deliver(url, body); err != nil && n.ctx.Err() == nil {
					n.report(fmt.Errorf("webhook %s: %s: %w", url, m.Action, err))
				}
			}
		}
	}
}

// deliver posts body to url, again after a failure, up to Retries times.
func (n *Notifier) deliver(url string, body []byte) error {
	wait := n.Backoff
	var err error
	for attempt := 0; attempt <= n.Retries; attempt++ {
		if attempt > 0 {
			select {
			case <-n.ctx.Done():
				return n.ctx.Err()
			case <-time.After(wait):
			}
			wait *= 2
		}
		if err = n.post(url, body); err == nil {
			return nil
		}
	}
	return err
}

func (n *Notifier) post(url string, body []byte) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.Timeout)
	defer cancel()
	return post(ctx, n.Client, url, body)
}

// post sends body to url as JSON and returns nil on a 2xx answer, else an
// error saying what the receiver answered (with the start of its body,
// where receivers say why) or why it could not be asked.
func post(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerShown))
		if text := strings.Join(strings.Fields(string(b)), " "); text != "" {
			return fmt.Errorf("answered %s: %s", resp.Status, text)
		}
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// maxAnswerShown is how much of a refusing receiver's body an error shows.
const maxAnswerShown = 200
