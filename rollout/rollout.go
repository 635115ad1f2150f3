// Package rollout decides, per pod, which store is the source of truth. Its
// Controller persists pod modes and the audit log in the control database
// (through a StateStore), applies changes made on any instance within a
// second by polling the control version, checks transitions and the
// promotion gates, trips a pod's kill switch by itself when its divergence
// rate crosses the abort threshold, runs the smallest-first rollout plan,
// and serves tandem.AdminService.
package rollout

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tandemhq/tandem"
)

// StateStore persists the control state; controldb's Store implements
// it. Every change appends its audit-log entry and bumps the control
// version in one transaction.
type StateStore interface {
	// InitPods stores each pod that has no row yet with its mode (the
	// configured initial one); stored pods keep theirs.
	InitPods(ctx context.Context, pods []tandem.Pod, at time.Time) error
	// Pods returns every stored pod (Name, Mode, UpdatedAt) and the control
	// version they were read at.
	Pods(ctx context.Context) ([]tandem.Pod, int64, error)
	// Version returns the control version.
	Version(ctx context.Context) (int64, error)
	// SetMode moves pod from mode from to mode to and clears its resynced
	// flag. Returns ECONFLICT when pod is no longer in from, EUNKNOWNPOD
	// when it is not stored.
	SetMode(ctx context.Context, pod string, from, to tandem.Mode, e tandem.AuditLogEntry) (version int64, err error)
	// MarkResynced sets pod's resynced flag (its Redis was rebuilt from MySQL).
	MarkResynced(ctx context.Context, pod string, e tandem.AuditLogEntry) error
	// Resynced returns pod's resynced flag.
	Resynced(ctx context.Context, pod string) (bool, error)
	// AppendAudit appends an entry to the audit log.
	AppendAudit(ctx context.Context, e tandem.AuditLogEntry) error
	// AuditLog returns the last limit entries, newest first.
	AuditLog(ctx context.Context, limit int) ([]tandem.AuditLogEntry, error)
	// RegisterInstance records a starting instance (or restarts its record).
	RegisterInstance(ctx context.Context, in tandem.Instance) error
	// Heartbeat records that the instance is alive and the control version
	// it has applied.
	Heartbeat(ctx context.Context, id string, at time.Time, version int64) error
	// Instances returns every recorded instance.
	Instances(ctx context.Context) ([]tandem.Instance, error)

	// LoadPlan returns the rollout plan's record.
	LoadPlan(ctx context.Context) (tandem.PlanRecord, error)
	// SavePlan writes the plan's document if its version is still version
	// and returns the new one; ECONFLICT when another write came first.
	SavePlan(ctx context.Context, doc []byte, version int64) (int64, error)
	// LeasePlan makes instance id the plan's driver until until, if it
	// already is or the lease ran out before now; it reports whether it is.
	LeasePlan(ctx context.Context, id string, now, until time.Time) (bool, error)

	// BeginTransition records that a background transition runs.
	BeginTransition(ctx context.Context, t tandem.PendingTransition) error
	// ClaimTransition hands pod's transition from instance from to
	// instance to and reports whether it was still from's.
	ClaimTransition(ctx context.Context, pod, from, to string) (bool, error)
	// TransitionProgress records how far owner's copy for pod is.
	TransitionProgress(ctx context.Context, pod, owner string, copied, total int) error
	// PendingTransitions returns every recorded transition.
	PendingTransitions(ctx context.Context) ([]tandem.PendingTransition, error)
	// EndTransition forgets pod's transition and reports whether there
	// was one.
	EndTransition(ctx context.Context, pod string) (bool, error)
	// FinishTransition forgets pod's transition and moves it from from to
	// to, in one transaction. Returns ECONFLICT when the transition was
	// cancelled meanwhile or the pod is no longer in from.
	FinishTransition(ctx context.Context, pod string, from, to tandem.Mode, e tandem.AuditLogEntry) (int64, error)
}

// KillSwitch is the kill switch as the controller uses it; killswitch's
// Switch implements it.
type KillSwitch interface {
	Engaged(pod string) bool
	State() tandem.KillSwitchState
	Engage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error)
	Disengage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error)
}

// Comparisons is what the controller reads of the comparator; comparator's
// Comparator implements it.
type Comparisons interface {
	GateStats(pod string) (comparisons int64, divergenceRate float64)
	ErrorStats(pod string) (comparisons int64, sotErrorRate float64)
	LastAudit(pod string) (at time.Time, clean bool, ok bool)
	RecordAudit(a tandem.Audit)
	Report(pod string, mode tandem.Mode) tandem.Report
	Divergences(ctx context.Context, f tandem.DivergenceFilter) ([]tandem.Divergence, error)
}

// PodOps is the work on a pod's stores that some changes need; cmd
// implements it with the pod's engines.
type PodOps interface {
	// Backfill makes MySQL hold what Redis holds before the pod enters
	// shadow; it blocks until the copy is done, ctx cancels it.
	Backfill(ctx context.Context, pod string) error
	// BackfillProgress returns the running or last backfill of pod (Step,
	// Copied, Total, StartedAt), nil when none ran on this instance.
	BackfillProgress(pod string) *tandem.Transition
	// Audit compares both stores with the ledger.
	Audit(ctx context.Context, pod string) (*tandem.Audit, error)
	// Resync rebuilds the pod's Redis from MySQL and returns how many keys
	// it rewrote.
	Resync(ctx context.Context, pod string) (int, error)
}

// PodConfig is a pod as the config file lists it.
type PodConfig struct {
	Name  string
	Shops tandem.ShopSet
	// Mode is the initial mode, used on the first start only.
	Mode tandem.Mode
}

// Gates are the rollout thresholds of the config file.
type Gates struct {
	// MinComparisons is the fewest comparisons in the window to promote.
	MinComparisons int64
	// MaxDivergenceRate is the highest divergence rate that promotes.
	MaxDivergenceRate float64
	// Window is the comparator's window, also the longest age of the
	// clean audit that RequireAudit asks for.
	Window time.Duration
	// RequireAudit asks for a clean drift audit within the window.
	RequireAudit bool
	// AbortDivergenceRate trips a pod's kill switch (0 disables).
	AbortDivergenceRate float64
	AbortMinComparisons int64
	// MaxP99Factor is the highest MySQL p99 over Redis's p99 the plan's
	// soaks accept (0 disables).
	MaxP99Factor float64
	// MaxMySQLErrorRate is the highest MySQL error rate the plan's soaks
	// accept (0 disables).
	MaxMySQLErrorRate float64
}

// DefaultGates are API.md's example values.
var DefaultGates = Gates{
	MinComparisons: 1000, MaxDivergenceRate: 0.001, Window: 15 * time.Minute, RequireAudit: true,
	AbortDivergenceRate: 0.01, AbortMinComparisons: 200, MaxP99Factor: 3, MaxMySQLErrorRate: 0.001,
}

// Names of the gates and refusals in failed_gates.
const (
	GateMinComparisons    = "min_comparisons"
	GateMaxDivergenceRate = "max_divergence_rate"
	GateAuditClean        = "audit_clean"
	RefusedTransition     = "transition"
	RefusedResync         = "resync"
	RefusedKillSwitch     = "kill_switch"
)

// Actions written to the audit log.
const (
	ActionSetMode     = "set_mode"
	ActionForceMode   = "set_mode_forced"
	ActionAudit       = "audit"
	ActionResync      = "resync"
	ActionPlanStart   = "plan_start"
	ActionPlanPause   = "plan_pause"
	ActionPlanAbort   = "plan_abort"
	ActionPlanDone    = "plan_done"
	ActionPlanResume  = "plan_resume"
	ActionPlanApprove = "plan_approve"
	ActionPlanSkip    = "plan_skip"
	// Told to OnChange only: this instance took the plan's lease.
	ActionPlanDriver = "plan_driver"
	// Told to OnChange only (the mode change itself is in the audit log).
	ActionBackfillStart = "backfill_start"
	ActionBackfillEnd   = "backfill_end"
	// Written to the audit log when an operator cancels a running backfill.
	ActionBackfillCancel   = "backfill_cancel"
	ActionBackfillProgress = "backfill_progress"
	ActionPlanStep         = "plan_step"
	ActionAutomaticAbort   = "automatic_abort"
)

// ActorAuto is the actor of the automatic abort.
const ActorAuto = "auto"

// ActorPlan is the actor of the rollout plan's own changes.
const ActorPlan = "plan"

// Defaults of the exported configuration fields.
const (
	DefaultPollInterval      = 250 * time.Millisecond
	DefaultHeartbeatInterval = time.Second
	DefaultAbortInterval     = time.Second
	DefaultPlanInterval      = 2 * time.Second
	DefaultLeaseDuration     = 10 * time.Second
	DefaultStaleAfter        = 5 * time.Second
	DefaultBackfillWait      = 500 * time.Millisecond
	DefaultResumeInterval    = 2 * time.Second
	DefaultProgressInterval  = 10 * time.Second
	storeTimeout             = 5 * time.Second
)

// Controller is one instance's rollout controller. Set the exported fields
// before Open; Mode and the read methods are safe for concurrent use.
type Controller struct {
	// PodConfigs lists every pod; others are unknown.
	PodConfigs []PodConfig
	// Gates are the promotion and abort thresholds; zero takes DefaultGates.
	Gates Gates
	// Store persists the control state.
	Store StateStore
	// Switch is the kill switch; its Modes should be this Controller.
	Switch KillSwitch
	// Comparator counts the pods' comparisons and audits.
	Comparator Comparisons
	// Ops runs backfill, audit and resync on a pod's stores.
	Ops PodOps

	// InstanceID and Addr identify this instance in Instances.
	InstanceID string
	Addr       string

	// PollInterval is how often the control version is read.
	PollInterval time.Duration
	// HeartbeatInterval is how often this instance records it is alive.
	HeartbeatInterval time.Duration
	// AbortInterval is how often the automatic abort checks the pods.
	AbortInterval time.Duration
	// PlanInterval is how often the plan's driver renews its lease and
	// advances the plan; keep it well under LeaseDuration.
	PlanInterval time.Duration
	// LeaseDuration is how long the plan's lease lasts unrenewed: how
	// long a dead driver holds the plan before another instance takes it.
	LeaseDuration time.Duration
	// PlanDefaults are the settings of a plan that StartPlan does not set.
	PlanDefaults PlanSettings
	// StaleAfter marks an instance not seen for this long as stale.
	StaleAfter time.Duration
	// BackfillWait is how long SetMode waits for the backfill before a pod
	// enters shadow; a longer one answers with the transition running.
	BackfillWait time.Duration
	// ResumeInterval is how often the controller looks for transitions
	// whose instance died, to run them again.
	ResumeInterval time.Duration
	// ProgressInterval is how often a running backfill's progress is told
	// to OnChange.
	ProgressInterval time.Duration

	// Now returns the current time.
	Now func() time.Time
	// OnError is told about failures of the background loops; nil ignores them.
	OnError func(error)
	// OnChange is told about every control action this instance takes
	// (mode changes, audits, resyncs, backfills, plan steps, automatic
	// aborts), once each, with who, why, the pod, before and after; nil
	// ignores them. cmd logs them.
	OnChange func(tandem.AuditLogEntry)

	state   atomic.Pointer[podTable]
	version atomic.Int64
	// reloadMu serializes reloads so that an older read never replaces a
	// newer one.
	reloadMu sync.Mutex

	trMu        sync.Mutex
	transitions map[string]*transitionRun
	// auditing lists the pods whose audit the plan runs (under trMu).
	auditing map[string]bool

	initOnce  sync.Once
	startedAt time.Time
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

var _ tandem.AdminService = (*Controller)(nil)

type podState struct {
	mode      tandem.Mode
	updatedAt time.Time
}

type podTable struct {
	version int64
	pods    map[string]podState
}

func (c *Controller) init() {
	c.initOnce.Do(func() {
		if c.Gates == (Gates{}) {
			c.Gates = DefaultGates
		}
		if c.Gates.Window <= 0 {
			c.Gates.Window = DefaultGates.Window
		}
		if c.PollInterval <= 0 {
			c.PollInterval = DefaultPollInterval
		}
		if c.HeartbeatInterval <= 0 {
			c.HeartbeatInterval = DefaultHeartbeatInterval
		}
		if c.AbortInterval <= 0 {
			c.AbortInterval = DefaultAbortInterval
		}
		if c.PlanInterval <= 0 {
			c.PlanInterval = DefaultPlanInterval
		}
		if c.LeaseDuration <= 0 {
			c.LeaseDuration = DefaultLeaseDuration
		}
		if c.PlanDefaults == (PlanSettings{}) {
			c.PlanDefaults = DefaultPlanSettings
		}
		if c.PlanDefaults.Parallel <= 0 {
			c.PlanDefaults.Parallel = 1
		}
		if c.PlanDefaults.FinalMode == "" {
			c.PlanDefaults.FinalMode = tandem.ModeMySQL
		}
		if c.StaleAfter <= 0 {
			c.StaleAfter = DefaultStaleAfter
		}
		if c.BackfillWait <= 0 {
			c.BackfillWait = DefaultBackfillWait
		}
		if c.ResumeInterval <= 0 {
			c.ResumeInterval = DefaultResumeInterval
		}
		if c.ProgressInterval <= 0 {
			c.ProgressInterval = DefaultProgressInterval
		}
		c.transitions = map[string]*transitionRun{}
		c.auditing = map[string]bool{}
		if c.Now == nil {
			c.Now = time.Now
		}
		if c.InstanceID == "" {
			c.InstanceID = fmt.Sprintf("instance-%d", time.Now().UnixNano())
		}
		pods := make(map[string]podState, len(c.PodConfigs))
		for _, p := range c.PodConfigs {
			pods[p.Name] = podState{mode: p.Mode}
		}
		c.state.Store(&podTable{pods: pods})
		c.ctx, c.cancel = context.WithCancel(context.Background())
	})
}

// Open stores the configured pods that the control database does not know
// yet, loads the persisted modes (they win over the config), registers this
// instance and starts the reload, heartbeat, abort and plan loops.
func (c *Controller) Open(ctx context.Context) error {
	c.init()
	for _, p := range c.PodConfigs {
		if !p.Mode.Valid() {
			return fmt.Errorf("pod %s: invalid initial mode %q", p.Name, p.Mode)
		}
	}
	pods := make([]tandem.Pod, len(c.PodConfigs))
	for i, p := range c.PodConfigs {
		pods[i] = tandem.Pod{Name: p.Name, Shops: p.Shops, Mode: p.Mode}
	}
	now := c.Now().UTC()
	if err := c.Store.InitPods(ctx, pods, now); err != nil {
		return fmt.Errorf("init pods: %w", err)
	}
	if err := c.Reload(ctx); err != nil {
		return err
	}
	c.startedAt = now
	in := tandem.Instance{ID: c.InstanceID, Addr: c.Addr, StartedAt: now, LastSeen: now, ControlVersion: c.version.Load()}
	if err := c.Store.RegisterInstance(ctx, in); err != nil {
		return fmt.Errorf("register instance: %w", err)
	}
	c.loop(c.PollInterval, "reload pod modes", c.pollOnce)
	c.loop(c.HeartbeatInterval, "heartbeat", func(ctx context.Context) error {
		return c.Store.Heartbeat(ctx, c.InstanceID, c.Now().UTC(), c.version.Load())
	})
	c.loop(c.AbortInterval, "automatic abort", func(ctx context.Context) error {
		c.CheckAbort(ctx)
		return nil
	})
	c.loop(c.PlanInterval, "rollout plan", c.StepPlan)
	if c.Ops != nil {
		if err := c.ResumeTransitions(ctx); err != nil {
			c.report(fmt.Errorf("resume transitions: %w", err))
		}
		c.loop(c.ResumeInterval, "resume transitions", c.ResumeTransitions)
	}
	return nil
}

// Close stops the loops; safe to call twice.
func (c *Controller) Close() error {
	c.init()
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
	})
	return nil
}

func (c *Controller) loop(every time.Duration, what string, fn func(context.Context) error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(c.ctx, storeTimeout)
			err := fn(ctx)
			cancel()
			if err != nil && c.ctx.Err() == nil {
				c.report(fmt.Errorf("%s: %w", what, err))
			}
		}
	}()
}

func (c *Controller) report(err error) {
	if c.OnError != nil {
		c.OnError(err)
	}
}

// changed tells OnChange about a control action.
func (c *Controller) changed(e tandem.AuditLogEntry) {
	if c.OnChange != nil {
		c.OnChange(e)
	}
}

func (c *Controller) pollOnce(ctx context.Context) error {
	v, err := c.Store.Version(ctx)
	if err != nil {
		return err
	}
	if v == c.version.Load() {
		return nil
	}
	return c.Reload(ctx)
}

// Reload reads the persisted pod modes and applies them.
func (c *Controller) Reload(ctx context.Context) error {
	c.init()
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	stored, version, err := c.Store.Pods(ctx)
	if err != nil {
		return fmt.Errorf("load pod modes: %w", err)
	}
	if version < c.version.Load() {
		return nil
	}
	next := &podTable{version: version, pods: make(map[string]podState, len(c.PodConfigs))}
	old := c.state.Load()
	for _, p := range c.PodConfigs {
		next.pods[p.Name] = old.pods[p.Name]
	}
	for _, p := range stored {
		if _, ok := next.pods[p.Name]; ok {
			next.pods[p.Name] = podState{mode: p.Mode, updatedAt: p.UpdatedAt}
		}
	}
	c.state.Store(next)
	c.version.Store(version)
	return nil
}

// Mode returns pod's persisted mode ("" for an unknown pod). It reads
// memory only and is safe on the hot path; the mode the pod runs in is
// Mode(pod).Effective(killSwitch.Engaged(pod)).
func (c *Controller) Mode(pod string) tandem.Mode {
	t := c.state.Load()
	if t == nil {
		return ""
	}
	return t.pods[pod].mode
}

// Version returns the control version this instance has applied.
func (c *Controller) Version() int64 { return c.version.Load() }

func (c *Controller) config(pod string) (PodConfig, bool) {
	for _, p := range c.PodConfigs {
		if p.Name == pod {
			return p, true
		}
	}
	return PodConfig{}, false
}

func (c *Controller) engaged(pod string) bool {
	return c.Switch != nil && c.Switch.Engaged(pod)
}

// EvaluateGates returns the state of pod's shadow -> mysql gates.
func (c *Controller) EvaluateGates(pod string) tandem.Gates {
	c.init()
	g := tandem.Gates{FailedGates: []string{}}
	var clean, recent bool
	if c.Comparator != nil {
		g.Comparisons, g.DivergenceRate = c.Comparator.GateStats(pod)
		var at time.Time
		var ok bool
		at, clean, ok = c.Comparator.LastAudit(pod)
		clean = ok && clean
		recent = ok && !at.Before(c.Now().Add(-c.Gates.Window))
	}
	g.LastAuditClean = clean
	if g.Comparisons < c.Gates.MinComparisons {
		g.FailedGates = append(g.FailedGates, GateMinComparisons)
	}
	if g.DivergenceRate > c.Gates.MaxDivergenceRate {
		g.FailedGates = append(g.FailedGates, GateMaxDivergenceRate)
	}
	if c.Gates.RequireAudit && !(clean && recent) {
		g.FailedGates = append(g.FailedGates, GateAuditClean)
	}
	g.Passing = len(g.FailedGates) == 0
	g.Checks = c.gateChecks(pod, g)
	return g
}

func (c *Controller) status(pod string) tandem.PodStatus {
	cfg, _ := c.config(pod)
	st := c.state.Load().pods[pod]
	killed := c.engaged(pod)
	eff := st.mode.Effective(killed)
	return tandem.PodStatus{
		Pod:           pod,
		Mode:          st.mode,
		SourceOfTruth: eff.SourceOfTruth(),
		Shadow:        eff.Shadow(),
		KillSwitch:    killed,
		Shops:         cfg.Shops.String(),
		UpdatedAt:     st.updatedAt,
		Gates:         c.EvaluateGates(pod),
		Transition:    c.transition(pod),
	}
}

// Pods returns every pod's status, in config order.
func (c *Controller) Pods(ctx context.Context) ([]tandem.PodStatus, error) {
	c.init()
	out := make([]tandem.PodStatus, 0, len(c.PodConfigs))
	for _, p := range c.PodConfigs {
		out = append(out, c.status(p.Name))
	}
	c.remoteTransitions(ctx, out)
	return out, nil
}

// Pod returns pod's status. Returns EUNKNOWNPOD.
func (c *Controller) Pod(ctx context.Context, pod string) (*tandem.PodStatus, error) {
	c.init()
	if _, ok := c.config(pod); !ok {
		return nil, unknownPod(pod)
	}
	st := []tandem.PodStatus{c.status(pod)}
	c.remoteTransitions(ctx, st)
	return &st[0], nil
}

func unknownPod(pod string) error {
	return tandem.Errorf(tandem.EUNKNOWNPOD, "unknown pod %q", pod).WithDetail("pod", pod)
}

func validateChange(ch tandem.Change) (tandem.Change, error) {
	if n := utf8.RuneCountInString(ch.Reason); n < 1 || n > 500 {
		return ch, tandem.Errorf(tandem.EINVALID, "reason must be 1..500 characters")
	}
	if ch.Actor == "" {
		ch.Actor = "operator"
	}
	return ch, nil
}

// unavailable turns a control-store failure into EUNAVAILABLE, keeping the
// codes the store returns on purpose.
func unavailable(err error, what string) error {
	switch tandem.ErrorCode(err) {
	case tandem.EINTERNAL:
		return fmt.Errorf("%s: %w", what, &tandem.Error{Code: tandem.EUNAVAILABLE, Message: "the control database cannot be reached"})
	}
	return err
}

// refusals returns why pod may not go from its current mode to ch.Mode,
// and whether only gates (which Force overrides) failed.
func (c *Controller) refusals(ctx context.Context, pod string, from tandem.Mode, ch tandem.ModeChange) (failed []string, gatesFailed []string, err error) {
	to := ch.Mode
	failed = []string{}
	if !tandem.CanTransition(from, to) {
		failed = append(failed, RefusedTransition)
	}
	if from == tandem.ModeMySQLOnly && to == tandem.ModeMySQL {
		ok, err := c.Store.Resynced(ctx, pod)
		if err != nil {
			return nil, nil, unavailable(err, "read resynced flag")
		}
		if !ok {
			failed = append(failed, RefusedResync)
		}
	}
	if killBlocks(to, c.engaged(pod)) {
		failed = append(failed, RefusedKillSwitch)
	}
	if from == tandem.ModeShadow && to == tandem.ModeMySQL {
		gatesFailed = c.EvaluateGates(pod).FailedGates
		if !ch.Force {
			failed = append(failed, gatesFailed...)
		}
	}
	return failed, gatesFailed, nil
}

// killBlocks reports whether an engaged kill switch refuses a move to
// mode to: any mode whose source of truth is MySQL (mysql, and mysql_only,
// which would escape the kill switch since it cannot fall back). The kill
// switch only ever moves a pod toward Redis; force does not override it.
func killBlocks(to tandem.Mode, killed bool) bool {
	return killed && to.SourceOfTruth() == tandem.StoreMySQL
}

// SetMode moves pod to ch.Mode. Returns EINVALID (unknown mode, bad
// reason), EUNKNOWNPOD, ETRANSITIONREFUSED (details failed_gates: any of
// "transition", "resync", "kill_switch" and the gate names), ECONFLICT (the
// pod changed meanwhile on another instance), EUNAVAILABLE (control
// database, or the backfill on entering shadow, failed; nothing changed).
// With DryRun nothing changes and only the verdict is returned.
func (c *Controller) SetMode(ctx context.Context, pod string, ch tandem.ModeChange) (*tandem.PodStatus, *tandem.DryRun, error) {
	c.init()
	if _, ok := c.config(pod); !ok {
		return nil, nil, unknownPod(pod)
	}
	if !ch.Mode.Valid() {
		return nil, nil, tandem.Errorf(tandem.EINVALID, "unknown mode %q: want redis, shadow, mysql or mysql_only", ch.Mode)
	}
	change, err := validateChange(ch.Change)
	if err != nil {
		return nil, nil, err
	}
	ch.Change = change
	from := c.Mode(pod)
	if ch.Mode == tandem.ModeRedis && from == tandem.ModeRedis && !ch.DryRun {
		if err := c.cancelTransition(ctx, pod, ch.Change); err != nil {
			return nil, nil, err
		}
	}
	if ch.Mode == from {
		// Nothing to change: answered as it stands, not as a refusal.
		if ch.DryRun {
			return nil, &tandem.DryRun{WouldApply: true, FailedGates: []string{}}, nil
		}
		st := c.status(pod)
		return &st, nil, nil
	}
	failed, gatesFailed, err := c.refusals(ctx, pod, from, ch)
	if err != nil {
		return nil, nil, err
	}
	if ch.DryRun {
		return nil, c.dryRun(pod, from, ch.Mode, failed), nil
	}
	if len(failed) > 0 {
		return nil, nil, c.refusedError(pod, from, ch.Mode, failed)
	}
	if from == tandem.ModeRedis && ch.Mode == tandem.ModeShadow && c.Ops != nil {
		return c.enterShadow(ctx, pod, ch.Change)
	}
	e := tandem.AuditLogEntry{
		At: c.Now().UTC(), Actor: ch.Actor, Action: ActionSetMode, Pod: pod, Reason: ch.Reason,
		Before: string(from), After: string(ch.Mode),
	}
	if len(gatesFailed) > 0 {
		e.Action = ActionForceMode
		e.Reason = fmt.Sprintf("%s [forced past failing gates %v]", ch.Reason, gatesFailed)
	}
	if _, err := c.Store.SetMode(ctx, pod, from, ch.Mode, e); err != nil {
		if tandem.ErrorCode(err) == tandem.ECONFLICT {
			_ = c.Reload(ctx)
		}
		return nil, nil, unavailable(err, "set mode")
	}
	c.changed(e)
	if err := c.Reload(ctx); err != nil {
		c.report(err)
	}
	st := c.status(pod)
	return &st, nil, nil
}
