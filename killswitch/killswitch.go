// Package killswitch moves pods back to Redis as their source of truth,
// fleet-wide and within a second, also while the control database is down:
// the state lives in two Records, the control Redis (a Channel, which also
// fans changes out; redisres implements it with a hash and pub/sub) and
// the control MySQL (Durable; controldb), every instance subscribes and
// polls both, and the hot path reads an immutable snapshot through an
// atomic pointer. A pod is engaged when either record says so; a record
// found without an engagement the other holds (a Redis restart, FLUSHDB, an
// engagement made while one was down) gets it written back, and
// disengaging needs both cleared. When a record cannot be read the instance
// keeps what it last knew of it: never a silent disengage.
package killswitch

import (
	"context"
	"errors"
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

// Channel is the kill-switch Record in the control Redis, which also tells
// every instance when the state changes. It must not depend on the control
// database.
type Channel interface {
	Record
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
	// RestoreGrace is how old an engagement must be before a record that
	// lacks it gets it written back: an engagement being written into both
	// records at once is not a loss.
	RestoreGrace = time.Second
	// DefaultReadTimeout bounds each read of a record while polling, so
	// that a record that hangs delays the other by at most this much.
	DefaultReadTimeout = time.Second
)

// Names of the records in errors and OnRestore.
const (
	RecordRedis = "control Redis"
	RecordMySQL = "control MySQL"
)

// RefusedMySQLOnly is the reason a mysql_only pod is refused.
const RefusedMySQLOnly = "mysql_only: Redis is stale; resync and move to mysql first"

// MaxReasonLen is the longest reason a change may carry, in characters.
const MaxReasonLen = 500

// Config configures a Switch; New takes the defaults for its zero fields.
type Config struct {
	// Pods lists every pod name; others are unknown.
	Pods []string
	// Channel holds the state in the control Redis and fans it out;
	// required.
	Channel Channel
	// Durable holds the state in the control MySQL as well; nil keeps it in
	// the Channel alone.
	Durable Record
	// Modes tells which pods are mysql_only (they cannot fall back); nil
	// refuses none.
	Modes ModeSource
	// AuditLog, when set, records every change, best effort: a failure to
	// record never holds back the change.
	AuditLog AuditLog
	// PollInterval is how often the state is read besides notifications;
	// default DefaultPollInterval.
	PollInterval time.Duration
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// OnError is told about failures of the background work, once per
	// distinct failure until a read succeeds again; nil ignores them.
	OnError func(error)
	// OnRestore is told when the Switch wrote engagements back into a
	// record that had lost them; nil ignores it.
	OnRestore func(record string, entries []tandem.AuditLogEntry)
	// OnChange is told about every engagement and disengagement this
	// instance makes, one entry per pod (who, why, before, after); nil
	// ignores them.
	OnChange func(tandem.AuditLogEntry)
	// OnIdle is told about the pods a disengagement named that were not
	// engaged (nothing changed for them); nil ignores them.
	OnIdle func(pods []string, ch tandem.Change)
	// RedisStale says why a pod's Redis is known not to be whole ("" when
	// it is not); an engagement of such a pod is answered with a warning.
	// nil knows of none.
	RedisStale func(pod string) string
}

// Switch is one instance's view of the kill switch. Make one with New;
// it reads as disengaged everywhere until Open loads the records.
type Switch struct {
	cfg Config

	state atomic.Pointer[snapshot]
	// mu serializes changes to the views and the snapshot; gen counts the
	// changes this instance made, so that a poll that read before one never
	// puts back an older state.
	mu        sync.Mutex
	gen       uint64
	redis     view
	mysql     view
	lastError string

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

// New returns a Switch configured by cfg, with nothing engaged, ready to
// Open.
func New(cfg Config) *Switch {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Pods = slices.Clone(cfg.Pods)
	s := &Switch{cfg: cfg}
	s.state.Store(emptySnapshot)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Open loads the current state from every record (writing back what one
// lost) and starts following its changes. It returns an error when a record
// cannot be read: an instance that does not know which pods are killed
// must not serve from MySQL.
func (s *Switch) Open(ctx context.Context) error {
	if err := s.Reload(ctx); err != nil {
		return fmt.Errorf("load kill switch state: %w", err)
	}
	notify := s.cfg.Channel.Watch(s.ctx)
	s.wg.Add(1)
	go s.follow(notify)
	return nil
}

// Close stops following changes; safe to call twice.
func (s *Switch) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

func (s *Switch) follow(notify <-chan struct{}) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.PollInterval)
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
		err := s.Reload(s.ctx)
		if s.ctx.Err() != nil {
			return
		}
		s.reportOnce(err)
	}
}

// reportOnce tells OnError about a failed poll once per distinct failure.
func (s *Switch) reportOnce(err error) {
	s.mu.Lock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	changed := msg != s.lastError
	s.lastError = msg
	s.mu.Unlock()
	if err != nil && changed && s.cfg.OnError != nil {
		s.cfg.OnError(fmt.Errorf("reload kill switch state (the last state read stays in force): %w", err))
	}
}

// Reload reads both records and applies what they hold: the control Redis
// first (its answer applies at once), then the control MySQL; then it
// writes back into each readable record the engagements it lacks. A record
// that cannot be read keeps the view last read of it. It returns the read
// failures.
func (s *Switch) Reload(ctx context.Context) error {
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()

	// Redis is read (and applied) first: it is the fast path of changes
	// and must not wait on a MySQL that hangs. A write-back never undoes a
	// disengage: each record keeps when it cleared a pod, and a pod cleared
	// at or after an engagement is not written back from it.
	rctx, cancel := context.WithTimeout(ctx, DefaultReadTimeout)
	stR, errR := load(rctx, s.cfg.Channel)
	cancel()
	if errR == nil && !s.applyRead(gen, &stR, nil) {
		return nil // this instance changed the state meanwhile
	}
	if s.cfg.Durable == nil {
		if errR != nil {
			return fmt.Errorf("%s: %w", RecordRedis, errR)
		}
		s.restore(ctx, gen, s.cfg.Channel, RecordRedis, stR)
		return nil
	}
	mctx, cancel := context.WithTimeout(ctx, DefaultReadTimeout)
	stM, errM := load(mctx, s.cfg.Durable)
	cancel()
	var pR, pM *RecordState
	if errR == nil {
		pR = &stR
	}
	if errM == nil {
		pM = &stM
		if !s.applyRead(gen, pR, pM) {
			return nil
		}
	}
	if pR != nil {
		s.restore(ctx, gen, s.cfg.Channel, RecordRedis, *pR)
	}
	if pM != nil {
		s.restore(ctx, gen, s.cfg.Durable, RecordMySQL, *pM)
	}
	return errors.Join(wrapRead(RecordRedis, errR), wrapRead(RecordMySQL, errM))
}

func wrapRead(record string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s cannot be read: %w", record, err)
}

// applyRead replaces the view of the record read (redis or mysql) and
// publishes the union; false when this instance made a change since gen,
// and the read may be older than it.
func (s *Switch) applyRead(gen uint64, redis, mysql *RecordState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return false
	}
	// A pod a view lost is dropped when either record cleared it since:
	// the clear marks of both records count.
	if redis != nil {
		s.redis, _ = s.redis.next(*redis, mysql)
	}
	if mysql != nil {
		s.mysql, _ = s.mysql.next(*mysql, redis)
	}
	s.publishLocked()
	return true
}

func (s *Switch) publishLocked() {
	s.state.Store(&snapshot{pods: union(s.redis, s.mysql)})
}

// restore writes back into rec the engagements in force that st (what rec
// held when read) lacks.
func (s *Switch) restore(ctx context.Context, gen uint64, rec Record, name string, st RecordState) {
	s.mu.Lock()
	if s.gen != gen {
		s.mu.Unlock()
		return
	}
	lost := missing(s.state.Load().pods, st, s.cfg.Now().Add(-RestoreGrace))
	s.mu.Unlock()
	if len(lost) == 0 {
		return
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i].Pod < lost[j].Pod })
	wctx, cancel := context.WithTimeout(ctx, DefaultChangeTimeout)
	defer cancel()
	if err := rec.Restore(wctx, lost); err != nil {
		if s.cfg.OnError != nil && ctx.Err() == nil {
			s.cfg.OnError(fmt.Errorf("write the kill switch back into the %s: %w", name, err))
		}
		return
	}
	if s.cfg.OnRestore != nil {
		s.cfg.OnRestore(name, lost)
	}
}

// Engaged reports whether pod's kill switch is engaged. It reads memory
// only and is safe on the hot path.
func (s *Switch) Engaged(pod string) bool {
	_, ok := s.state.Load().pods[pod]
	return ok
}

// State returns the engaged pods (sorted), since the earliest engagement,
// and the reason of the latest; Engagements gives each pod's own.
func (s *Switch) State() tandem.KillSwitchState {
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
	for _, pod := range st.Pods {
		e := snap.pods[pod]
		st.Engagements = append(st.Engagements, tandem.KillSwitchEngagement{Pod: pod, Since: e.At, Actor: e.Actor, Reason: e.Reason})
	}
	return st
}

// Engage moves pods (every pod when nil) to Redis as their source of
// truth. mysql_only pods cannot fall back and are listed under Refused.
// Returns EINVALID (reason, an empty list, blank or repeated names),
// EUNKNOWNPOD, EUNAVAILABLE (the channel cannot
// be written; nothing changed).
func (s *Switch) Engage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	pods, ch, err := s.validate(pods, ch)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now().UTC()
	var refused []tandem.Refusal
	var entries, told []tandem.AuditLogEntry
	held := s.state.Load().pods
	for _, pod := range pods {
		if s.cfg.Modes != nil && s.cfg.Modes.Mode(pod) == tandem.ModeMySQLOnly {
			refused = append(refused, tandem.Refusal{Pod: pod, Reason: RefusedMySQLOnly})
			continue
		}
		e := tandem.AuditLogEntry{
			At: now, Actor: ch.Actor, Action: ActionEngage, Pod: pod, Reason: ch.Reason,
			Before: "disengaged", After: "engaged",
		}
		// Every pod asked for is written, even one this instance sees
		// engaged (its view may be a poll old): the records keep a pod's
		// first engagement. What is told says so, with the first reason.
		entries = append(entries, e)
		if first, ok := held[pod]; ok {
			e.Before = "engaged"
			e.Reason = AlreadyEngaged(first, ch.Reason)
		}
		told = append(told, e)
	}
	if len(entries) > 0 {
		if err := s.apply(ctx, entries, nil); err != nil {
			return nil, err
		}
		s.tell(told)
	}
	st := s.State()
	st.Refused = refused
	if st.Refused == nil {
		st.Refused = []tandem.Refusal{}
	}
	if s.cfg.RedisStale != nil {
		for _, e := range entries {
			if why := s.cfg.RedisStale(e.Pod); why != "" {
				st.Warnings = append(st.Warnings, tandem.Refusal{Pod: e.Pod, Reason: why})
			}
		}
	}
	return &st, nil
}

// Disengage returns pods (every pod when nil) to the source of truth
// their mode says. Returns EINVALID, EUNKNOWNPOD, EUNAVAILABLE.
func (s *Switch) Disengage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	pods, ch, err := s.validate(pods, ch)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now().UTC()
	entries := make([]tandem.AuditLogEntry, 0, len(pods))
	var idle []string
	for _, pod := range pods {
		// A pod that is not engaged has nothing to disengage: no write,
		// no audit entry "disengaged -> disengaged"; OnIdle says so.
		if !s.Engaged(pod) {
			idle = append(idle, pod)
			continue
		}
		entries = append(entries, tandem.AuditLogEntry{
			At: now, Actor: ch.Actor, Action: ActionDisengage, Pod: pod, Reason: ch.Reason,
			Before: "engaged", After: "disengaged",
		})
	}
	if len(entries) > 0 {
		if err := s.apply(ctx, nil, entries); err != nil {
			return nil, err
		}
		s.tell(entries)
	}
	if len(idle) > 0 && s.cfg.OnIdle != nil {
		s.cfg.OnIdle(idle, ch)
	}
	st := s.State()
	return &st, nil
}

// AlreadyEngaged is the reason told for a kill of a pod that is already
// engaged: the engagement keeps first, its time, actor and reason.
func AlreadyEngaged(first tandem.AuditLogEntry, asked string) string {
	r := fmt.Sprintf("already engaged since %s by %s (%q); asked again: %s",
		first.At.UTC().Format(time.RFC3339), first.Actor, first.Reason, asked)
	if rs := []rune(r); len(rs) > 2*MaxReasonLen {
		r = string(rs[:2*MaxReasonLen])
	}
	return r
}

// apply writes the change to the records and applies it here at once;
// tell then records it in the audit log in the background. Engaging succeeds
// when either record takes it (the other gets it written back when it
// answers); disengaging needs both cleared, the control MySQL first.
func (s *Switch) apply(ctx context.Context, engage, disengage []tandem.AuditLogEntry) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultChangeTimeout)
	defer cancel()
	s.mu.Lock()
	var err error
	if len(engage) > 0 {
		err = s.engageLocked(ctx, engage)
	} else {
		err = s.disengageLocked(ctx, disengage)
	}
	s.mu.Unlock()
	return err
}

// tell passes the changes made to OnChange and the audit log.
func (s *Switch) tell(entries []tandem.AuditLogEntry) {
	if s.cfg.OnChange != nil {
		for _, e := range entries {
			s.cfg.OnChange(e)
		}
	}
	s.record(entries)
}

func (s *Switch) engageLocked(ctx context.Context, entries []tandem.AuditLogEntry) error {
	var errR, errM error
	var wg sync.WaitGroup
	if s.cfg.Durable != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Short: with MySQL unreachable, Redis alone engages.
			mctx, cancel := context.WithTimeout(ctx, DefaultReadTimeout)
			defer cancel()
			errM = s.cfg.Durable.Engage(mctx, entries)
		}()
	}
	errR = s.cfg.Channel.Engage(ctx, entries)
	wg.Wait()
	if errR != nil && (s.cfg.Durable == nil || errM != nil) {
		return &tandem.Error{Code: tandem.EUNAVAILABLE, Message: "the kill switch cannot be written (control Redis and control MySQL); nothing changed"}
	}
	s.gen++
	if errR == nil {
		s.redis = s.redis.with(entries)
	} else if s.cfg.OnError != nil {
		s.cfg.OnError(fmt.Errorf("kill switch engaged in the %s only; written to the %s when it answers: %w", RecordMySQL, RecordRedis, errR))
	}
	if s.cfg.Durable != nil {
		if errM == nil {
			s.mysql = s.mysql.with(entries)
		} else if s.cfg.OnError != nil {
			s.cfg.OnError(fmt.Errorf("kill switch engaged in the %s only; written to the %s when it answers: %w", RecordRedis, RecordMySQL, errM))
		}
	}
	s.publishLocked()
	return nil
}

func (s *Switch) disengageLocked(ctx context.Context, entries []tandem.AuditLogEntry) error {
	pods := make([]string, len(entries))
	// The clear mark must be after every engagement it clears, whatever
	// the clocks of the instances that engaged.
	at := s.cfg.Now().UTC()
	cur := s.state.Load().pods
	for i, e := range entries {
		pods[i] = e.Pod
		if old, ok := cur[e.Pod]; ok && !at.After(old.At) {
			at = old.At.Add(time.Microsecond)
		}
	}
	// Both records must be cleared. MySQL is checked first, so that a
	// control database that is down refuses the change before Redis (and
	// with it every instance) sees anything; then Redis, then MySQL. When
	// MySQL fails after Redis was cleared, Redis is engaged again.
	if s.cfg.Durable != nil {
		rctx, cancel := context.WithTimeout(ctx, DefaultReadTimeout)
		_, _, err := s.cfg.Durable.Load(rctx)
		cancel()
		if err != nil {
			return unavailableToDisengage(RecordMySQL, "nothing changed")
		}
	}
	if err := s.cfg.Channel.Disengage(ctx, pods, at); err != nil {
		return unavailableToDisengage(RecordRedis, "nothing changed")
	}
	s.gen++
	held := s.redis
	s.redis = s.redis.without(pods)
	if s.cfg.Durable != nil {
		if err := s.cfg.Durable.Disengage(ctx, pods, at); err != nil {
			var back []tandem.AuditLogEntry
			for _, p := range pods {
				if e, ok := held.engaged[p]; ok {
					back = append(back, e)
				}
			}
			if len(back) == 0 || s.cfg.Channel.Engage(ctx, back) == nil {
				s.redis = held
				s.publishLocked()
				return unavailableToDisengage(RecordMySQL, "nothing changed")
			}
			s.publishLocked()
			return unavailableToDisengage(RecordMySQL, "the control Redis was cleared and the control MySQL still holds the pods engaged; retry when it answers")
		}
		s.mysql = s.mysql.without(pods)
	}
	s.publishLocked()
	return nil
}

func unavailableToDisengage(record, outcome string) error {
	return &tandem.Error{Code: tandem.EUNAVAILABLE, Message: fmt.Sprintf(
		"the %s cannot be reached: the kill switch stays engaged (disengaging needs both records cleared); %s", record, outcome)}
}

func (s *Switch) record(entries []tandem.AuditLogEntry) {
	if s.cfg.AuditLog == nil || len(entries) == 0 {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), DefaultAuditTimeout)
		defer cancel()
		for _, e := range entries {
			if err := s.cfg.AuditLog.AppendAudit(ctx, e); err != nil {
				if s.cfg.OnError != nil {
					s.cfg.OnError(fmt.Errorf("record %s of %s in the audit log: %w", e.Action, e.Pod, err))
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
		return slices.Clone(s.cfg.Pods), ch, nil
	}
	if err := ValidateTargets(s.cfg.Pods, pods); err != nil {
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
