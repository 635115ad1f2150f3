package redisres

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
)

// Kill-switch keys under a KillSwitchChannel's prefix.
const (
	// killSwitchKey is a hash: engaged pod -> JSON of the change that
	// engaged it (tandem.AuditLogEntry), and "cleared:<pod>" -> when the
	// pod was last disengaged (Unix microseconds). One key, so that every
	// write is atomic on a Redis Cluster too.
	killSwitchKey = "killswitch"
	// killSwitchTopic is the pub/sub channel told of every change.
	killSwitchTopic = "killswitch:changed"
	// clearedField prefixes the clear mark of a pod (pod names hold no colon).
	clearedField = "cleared:"
)

// restoreScript writes engagements back unless the pod is engaged already
// or was cleared at or after the engagement: KEYS[1] the hash; ARGV
// triples of pod, entry JSON, engagement time (Unix microseconds, exact in
// a Lua number). It returns how many it wrote.
var restoreScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 3 do
  local c = redis.call('HGET', KEYS[1], 'cleared:' .. ARGV[i])
  if not c or tonumber(c) < tonumber(ARGV[i + 2]) then
    n = n + redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return n
`)

// KillSwitchChannel keeps the kill switch in the control Redis, so that it
// works while MySQL is down: a hash of the engaged pods and a pub/sub
// channel that every instance subscribes to. It implements
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
	values, err := encodeEntries(entries)
	if err != nil {
		return err
	}
	_, err = c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for pod, v := range values {
			p.HSetNX(ctx, c.key, pod, v)
		}
		p.Publish(ctx, c.topic, "engage")
		return nil
	})
	return controlError("engage kill switch", err)
}

func encodeEntries(entries []tandem.AuditLogEntry) (map[string]string, error) {
	values := make(map[string]string, len(entries))
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("redisres: encode kill switch entry: %w", err)
		}
		values[e.Pod] = string(b)
	}
	return values, nil
}

// Disengage clears the pods, marks them cleared at at, and tells every
// instance. Returns EUNAVAILABLE.
func (c *KillSwitchChannel) Disengage(ctx context.Context, pods []string, at time.Time) error {
	if len(pods) == 0 {
		return nil
	}
	marks := make([]any, 0, 2*len(pods))
	for _, p := range pods {
		marks = append(marks, clearedField+p, strconv.FormatInt(at.UnixMicro(), 10))
	}
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, c.key, pods...)
		p.HSet(ctx, c.key, marks...)
		p.Publish(ctx, c.topic, "disengage")
		return nil
	})
	return controlError("disengage kill switch", err)
}

// Load returns the engaged pods (sorted) and their clear marks. Returns
// EUNAVAILABLE.
func (c *KillSwitchChannel) Load(ctx context.Context) ([]tandem.AuditLogEntry, map[string]time.Time, error) {
	m, err := c.rdb.HGetAll(ctx, c.key).Result()
	if err != nil {
		return nil, nil, controlError("read kill switch", err)
	}
	engaged := make([]tandem.AuditLogEntry, 0, len(m))
	cleared := map[string]time.Time{}
	for field, v := range m {
		if pod, ok := strings.CutPrefix(field, clearedField); ok {
			if us, err := strconv.ParseInt(v, 10, 64); err == nil {
				cleared[pod] = time.UnixMicro(us).UTC()
			}
			continue
		}
		var e tandem.AuditLogEntry
		if err := json.Unmarshal([]byte(v), &e); err != nil {
			// A pod whose entry cannot be read is still engaged: the
			// switch only ever errs toward Redis.
			e = tandem.AuditLogEntry{Reason: "unreadable kill switch entry"}
		}
		e.Pod = field
		engaged = append(engaged, e)
	}
	sort.Slice(engaged, func(i, j int) bool { return engaged[i].Pod < engaged[j].Pod })
	return engaged, cleared, nil
}

// Engaged returns the entry that engaged each engaged pod, by pod name.
// Returns EUNAVAILABLE.
func (c *KillSwitchChannel) Engaged(ctx context.Context) ([]tandem.AuditLogEntry, error) {
	engaged, _, err := c.Load(ctx)
	return engaged, err
}

// Restore writes engagements back that Redis lost (restart, FLUSHDB, or
// made while it was down), unless a pod is engaged already or was cleared
// at or after its engagement. It does not notify: every instance already
// counts them engaged. Returns EUNAVAILABLE.
func (c *KillSwitchChannel) Restore(ctx context.Context, entries []tandem.AuditLogEntry) error {
	if len(entries) == 0 {
		return nil
	}
	args := make([]any, 0, 3*len(entries))
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("redisres: encode kill switch entry: %w", err)
		}
		args = append(args, e.Pod, string(b), e.At.UnixMicro())
	}
	return controlError("restore kill switch", restoreScript.Run(ctx, c.rdb, []string{c.key}, args...).Err())
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
