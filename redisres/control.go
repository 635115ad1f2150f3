package redisres

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
)

// Kill-switch keys under a KillSwitchChannel's prefix.
const (
	// killSwitchKey is a hash: engaged pod -> JSON of the change that
	// engaged it (tandem.AuditLogEntry).
	killSwitchKey = "killswitch"
	// killSwitchTopic is the pub/sub channel told of every change.
	killSwitchTopic = "killswitch:changed"
)

// KillSwitchChannel keeps the kill switch in the control Redis, not in
// MySQL, so that it works while MySQL is down: a hash of the engaged pods
// and a pub/sub channel that every instance subscribes to. It implements
// killswitch.Channel. Engaging writes every pod and publishes in one
// MULTI/EXEC; a pod already engaged keeps its first engagement (HSETNX).
type KillSwitchChannel struct {
	rdb   redis.UniversalClient
	key   string
	topic string
}

// NewKillSwitchChannel returns a channel on rdb whose key and pub/sub
// channel start with prefix (e.g. "tandem:").
func NewKillSwitchChannel(rdb redis.UniversalClient, prefix string) *KillSwitchChannel {
	return &KillSwitchChannel{rdb: rdb, key: prefix + killSwitchKey, topic: prefix + killSwitchTopic}
}

// Engage marks each entry's pod engaged unless it already is, and tells
// every instance. Returns EUNAVAILABLE when Redis cannot be written.
func (c *KillSwitchChannel) Engage(ctx context.Context, entries []tandem.AuditLogEntry) error {
	values := make(map[string]string, len(entries))
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("redisres: encode kill switch entry: %w", err)
		}
		values[e.Pod] = string(b)
	}
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for pod, v := range values {
			p.HSetNX(ctx, c.key, pod, v)
		}
		p.Publish(ctx, c.topic, "engage")
		return nil
	})
	return controlError("engage kill switch", err)
}

// Disengage clears the pods and tells every instance. Returns EUNAVAILABLE.
func (c *KillSwitchChannel) Disengage(ctx context.Context, pods []string) error {
	if len(pods) == 0 {
		return nil
	}
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, c.key, pods...)
		p.Publish(ctx, c.topic, "disengage")
		return nil
	})
	return controlError("disengage kill switch", err)
}

// Engaged returns the entry that engaged each engaged pod, by pod name.
// Returns EUNAVAILABLE.
func (c *KillSwitchChannel) Engaged(ctx context.Context) ([]tandem.AuditLogEntry, error) {
	m, err := c.rdb.HGetAll(ctx, c.key).Result()
	if err != nil {
		return nil, controlError("read kill switch", err)
	}
	out := make([]tandem.AuditLogEntry, 0, len(m))
	for pod, v := range m {
		var e tandem.AuditLogEntry
		if err := json.Unmarshal([]byte(v), &e); err != nil {
			// A pod whose entry cannot be read is still engaged: the
			// switch only ever errs toward Redis.
			e = tandem.AuditLogEntry{Reason: "unreadable kill switch entry"}
		}
		e.Pod = pod
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out, nil
}

// Watch subscribes to change notifications: the returned channel receives a
// value after each (coalesced when the reader is behind) and is closed when
// ctx ends. go-redis resubscribes after a lost connection; notifications
// sent meanwhile are lost, which the Switch's polling covers.
func (c *KillSwitchChannel) Watch(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	ps := c.rdb.Subscribe(ctx, c.topic)
	go func() {
		defer close(out)
		defer ps.Close()
		msgs := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-msgs:
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}

func controlError(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("redisres: %s: %w: %w", what, &tandem.Error{Code: tandem.EUNAVAILABLE, Message: "the control Redis cannot be reached"}, err)
}
