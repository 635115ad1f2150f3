// Package killswitch moves pods back to Redis as their source of truth,
// fleet-wide and within a second, without the control database: the state
// lives behind a Channel (redisres implements it with a Redis hash and
// pub/sub), every instance subscribes and also polls it, and the hot path
// reads an immutable snapshot through an atomic pointer.
package killswitch

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tandemhq/tandem"
)

// Channel holds the shared kill-switch state and tells every instance when
// it changes. It must not depend on the control database.
type Channel interface {
	// Engage marks each entry's pod engaged, keeping the entry (when, who,
	// why) of a pod that already is, and notifies every instance.
	Engage(ctx context.Context, entries []tandem.AuditLogEntry) error
	// Disengage clears the pods and notifies every instance.
	Disengage(ctx context.Context, pods []string) error
	// Engaged returns the entry that engaged each engaged pod.
	Engaged(ctx context.Context) ([]tandem.AuditLogEntry, error)
	// Watch returns a channel that receives a value after every change
	// notification, until ctx ends, when it is closed. Notifications may be
	// lost; the Switch polls as well.
	Watch(ctx context.Context) <-chan struct{}
}

// ModeSource tells the persisted mode of a pod; rollout's Controller
// implements it.
type ModeSource interface {
	Mode(pod string) tandem.Mode
}

// AuditLog records changes in the control database's audit log.
type AuditLog interface {
	AppendAudit(ctx context.Context, e tandem.AuditLogEntry) error
}

// Actions written to the audit log.
const (
	ActionEngage    = "killswitch_engage"
	ActionDisengage = "killswitch_disengage"
)

// Defaults of the exported configuration fields.
const (
	DefaultPollInterval  = 250 * time.Millisecond
	DefaultAuditTimeout  = 5 * time.Second
	DefaultChangeTimeout = 3 * time.Second
)

// RefusedMySQLOnly is the reason a mysql_only pod is refused.
const RefusedMySQLOnly = "mysql_only: Redis is stale; resync and move to mysql first"

// MaxReasonLen is the longest reason a change may carry, in characters.
const MaxReasonLen = 500

// Switch is one instance's view of the kill switch. Set the exported fields
// before Open.
type Switch struct {
	// Pods lists every pod name; others are unknown.
	Pods []string
	// Channel holds and fans out the state.
	Channel Channel
	// Modes tells which pods are mysql_only (they cannot fall back); nil
	// refuses none.
	Modes ModeSource
	// AuditLog, when set, records every change, best effort: a failure to
	// record never holds back the change.
	AuditLog AuditLog
	// PollInterval is how often the state is read besides notifications.
	PollInterval time.Duration
	// Now returns the current time.
	Now func() time.Time
	// OnError is told about failures of the background work; nil ignores them.
	OnError func(error)

	state atomic.Pointer[snapshot]
	// mu serializes replacing the snapshot, so that a slow poll cannot put
	// back a state older than a change this instance just made.
	mu sync.Mutex

	initOnce  sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// snapshot is an immutable engaged set.
type snapshot struct {
	pods map[string]tandem.AuditLogEntry
}

var emptySnapshot = &snapshot{pods: map[string]tandem.AuditLogEntry{}}

// New returns a Switch over pods that keeps its state in ch.
func New(pods []string, ch Channel) *Switch {
	return &Switch{Pods: pods, Channel: ch}
}

func (s *Switch) init() {
	s.initOnce.Do(func() {
		if s.PollInterval <= 0 {
			s.PollInterval = DefaultPollInterval
		}
		if s.Now == nil {
			s.Now = time.Now
		}
		s.state.CompareAndSwap(nil, emptySnapshot)
		s.ctx, s.cancel = context.WithCancel(context.Background())
	})
}

// Open loads the current state and starts following its changes. It
// returns an error when the state cannot be read: an instance that does not
// know which pods are killed must not serve from MySQL.
func (s *Switch) Open(ctx context.Context) error {
	s.init()
	if err := s.Reload(ctx); err != nil {
		return fmt.Errorf("load kill switch state: %w", err)
	}
	notify := s.Channel.Watch(s.ctx)
	s.wg.Add(1)
	go s.follow(notify)
	return nil
}

// Close stops following changes; safe to call twice.
func (s *Switch) Close() error {
	s.init()
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

func (s *Switch) follow(notify <-chan struct{}) {
	defer s.wg.Done()
	t := time.NewTicker(s.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case _, ok := <-notify:
			if !ok {
				notify = nil
			}
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, DefaultChangeTimeout)
		if err := s.Reload(ctx); err != nil && s.ctx.Err() == nil && s.OnError != nil {
			s.OnError(fmt.Errorf("reload kill switch state: %w", err))
		}
		cancel()
	}
}

// Reload reads the shared state and applies it.
func (s *Switch) Reload(ctx context.Context) error {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(ctx)
}

func (s *Switch) reloadLocked(ctx context.Context) error {
	entries, err := s.Channel.Engaged(ctx)
	if err != nil {
		return err
	}
	next := &snapshot{pods: make(map[string]tandem.AuditLogEntry, len(entries))}
	for _, e := range entries {
		next.pods[e.Pod] = e
	}
	s.state.Store(next)
	return nil
}

// Engaged reports whether pod's kill switch is engaged. It reads memory
// only and is safe on the hot path.
func (s *Switch) Engaged(pod string) bool {
	snap := s.state.Load()
	if snap == nil {
		return false
	}
	_, ok := snap.pods[pod]
	return ok
}

// State returns the engaged pods (sorted), since the earliest engagement,
// and the reason of the latest.
func (s *Switch) State() tandem.KillSwitchState {
	s.init()
	snap := s.state.Load()
	st := tandem.KillSwitchState{Pods: make([]string, 0, len(snap.pods))}
	var latest time.Time
	for pod, e := range snap.pods {
		st.Pods = append(st.Pods, pod)
		if st.Since == nil || e.At.Before(*st.Since) {
			at := e.At
			st.Since = &at
		}
		if e.At.After(latest) || st.Reason == "" {
			latest, st.Reason = e.At, e.Reason
		}
	}
	sort.Strings(st.Pods)
	st.Engaged = len(st.Pods) > 0
	return st
}

// Engage moves pods (every pod when nil) to Redis as their source of
// truth. mysql_only pods cannot fall back and are listed under Refused.
// Returns EINVALID (reason, an empty list, blank or repeated names),
// EUNKNOWNPOD, EUNAVAILABLE (the channel cannot
// be written; nothing changed).
func (s *Switch) Engage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	s.init()
	pods, ch, err := s.validate(pods, ch)
	if err != nil {
		return nil, err
	}
	now := s.Now().UTC()
	var refused []tandem.Refusal
	var entries []tandem.AuditLogEntry
	for _, pod := range pods {
		if s.Modes != nil && s.Modes.Mode(pod) == tandem.ModeMySQLOnly {
			refused = append(refused, tandem.Refusal{Pod: pod, Reason: RefusedMySQLOnly})
			continue
		}
		entries = append(entries, tandem.AuditLogEntry{
			At: now, Actor: ch.Actor, Action: ActionEngage, Pod: pod, Reason: ch.Reason,
			Before: s.label(pod), After: "engaged",
		})
	}
	if len(entries) > 0 {
		if err := s.apply(ctx, entries, nil); err != nil {
			return nil, err
		}
	}
	st := s.State()
	st.Refused = refused
	if st.Refused == nil {
		st.Refused = []tandem.Refusal{}
	}
	return &st, nil
}

// Disengage returns pods (every pod when nil) to the source of truth
// their mode says. Returns EINVALID, EUNKNOWNPOD, EUNAVAILABLE.
func (s *Switch) Disengage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	s.init()
	pods, ch, err := s.validate(pods, ch)
	if err != nil {
		return nil, err
	}
	now := s.Now().UTC()
	entries := make([]tandem.AuditLogEntry, 0, len(pods))
	for _, pod := range pods {
		entries = append(entries, tandem.AuditLogEntry{
			At: now, Actor: ch.Actor, Action: ActionDisengage, Pod: pod, Reason: ch.Reason,
			Before: s.label(pod), After: "disengaged",
		})
	}
	if err := s.apply(ctx, nil, entries); err != nil {
		return nil, err
	}
	st := s.State()
	return &st, nil
}

func (s *Switch) label(pod string) string {
	if s.Engaged(pod) {
		return "engaged"
	}
	return "disengaged"
}

// apply writes the change to the channel, applies it here at once, and
// records it in the audit log in the background.
func (s *Switch) apply(ctx context.Context, engage, disengage []tandem.AuditLogEntry) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultChangeTimeout)
	defer cancel()
	s.mu.Lock()
	var err error
	if len(engage) > 0 {
		err = s.Channel.Engage(ctx, engage)
	} else {
		names := make([]string, len(disengage))
		for i, e := range disengage {
			names[i] = e.Pod
		}
		err = s.Channel.Disengage(ctx, names)
	}
	if err != nil {
		s.mu.Unlock()
		return &tandem.Error{Code: tandem.EUNAVAILABLE, Message: "the kill switch channel cannot be written; nothing changed"}
	}
	if err := s.reloadLocked(ctx); err != nil {
		// The write succeeded: apply it here from what was written.
		s.state.Store(merge(s.state.Load(), engage, disengage))
	}
	s.mu.Unlock()
	s.record(append(engage, disengage...))
	return nil
}

func merge(old *snapshot, engage, disengage []tandem.AuditLogEntry) *snapshot {
	next := &snapshot{pods: make(map[string]tandem.AuditLogEntry, len(old.pods)+len(engage))}
	for pod, e := range old.pods {
		next.pods[pod] = e
	}
	for _, e := range engage {
		if _, ok := next.pods[e.Pod]; !ok {
			next.pods[e.Pod] = e
		}
	}
	for _, e := range disengage {
		delete(next.pods, e.Pod)
	}
	return next
}

func (s *Switch) record(entries []tandem.AuditLogEntry) {
	if s.AuditLog == nil || len(entries) == 0 {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), DefaultAuditTimeout)
		defer cancel()
		for _, e := range entries {
			if err := s.AuditLog.AppendAudit(ctx, e); err != nil {
				if s.OnError != nil {
					s.OnError(fmt.Errorf("record %s of %s in the audit log: %w", e.Action, e.Pod, err))
				}
				return
			}
		}
	}()
}

// validate checks a change and its targets: nil pods means every pod; a
// non-nil list must be non-empty, without blank or repeated names, of known
// pods (EUNKNOWNPOD names every unknown one). Nothing changes on an error.
func (s *Switch) validate(pods []string, ch tandem.Change) ([]string, tandem.Change, error) {
	if err := ValidateReason(ch.Reason); err != nil {
		return nil, ch, err
	}
	if ch.Actor == "" {
		ch.Actor = "operator"
	}
	if pods == nil {
		return slices.Clone(s.Pods), ch, nil
	}
	if err := ValidateTargets(s.Pods, pods); err != nil {
		return nil, ch, err
	}
	return slices.Clone(pods), ch, nil
}

// ValidateTargets checks an explicit list of pods against known: non-empty,
// no blank or repeated names (EINVALID), every name known (EUNKNOWNPOD,
// with details.pods listing the unknown ones and details.pod the first).
func ValidateTargets(known, pods []string) error {
	if len(pods) == 0 {
		return tandem.Errorf(tandem.EINVALID, "pods must name at least one pod (leave it out for every pod)")
	}
	seen := make(map[string]bool, len(pods))
	var unknown []string
	for _, p := range pods {
		if strings.TrimSpace(p) == "" {
			return tandem.Errorf(tandem.EINVALID, "pods holds a blank name")
		}
		if seen[p] {
			return tandem.Errorf(tandem.EINVALID, "pods names %q twice", p)
		}
		seen[p] = true
		if !slices.Contains(known, p) {
			unknown = append(unknown, p)
		}
	}
	if len(unknown) > 0 {
		quoted := make([]string, len(unknown))
		for i, p := range unknown {
			quoted[i] = strconv.Quote(p)
		}
		return tandem.Errorf(tandem.EUNKNOWNPOD, "unknown pod %s; nothing changed", strings.Join(quoted, ", ")).
			WithDetail("pods", unknown).WithDetail("pod", unknown[0])
	}
	return nil
}

// ValidateReason checks a change's reason: 1..500 characters.
func ValidateReason(reason string) error {
	if n := utf8.RuneCountInString(reason); n < 1 || n > MaxReasonLen {
		return tandem.Errorf(tandem.EINVALID, "reason must be 1..%d characters", MaxReasonLen)
	}
	return nil
}
