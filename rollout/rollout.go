// Package rollout decides, per pod, which store is the source of truth. Its
// Controller persists pod modes and the audit log in the control database
// (through a StateStore), applies changes made on any instance within a
// second by polling the control version, checks transitions and the
// promotion gates, trips a pod's kill switch by itself when its divergence
// rate crosses the abort threshold, runs the smallest-first rollout plan,
// and serves tandem.AdminService and tandem.PlanService. Each of those
// jobs is a part of its own, which the Controller assembles (its field
// list maps them to their files).
package rollout

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tandemhq/tandem"
)

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
	// AbortStats counts the automatic abort's recent window.
	AbortStats(pod string) tandem.RecentComparisons
	// Reset makes the three above count only what comes after it (an
	// unkill); Report keeps the whole window.
	Reset(pod string)
	LastAudit(pod string) (at time.Time, clean bool, ok bool)
	RecordAudit(a tandem.Audit)
	Report(pod string, mode tandem.Mode) tandem.Report
	Divergences(ctx context.Context, f tandem.DivergenceFilter) ([]tandem.Divergence, error)
}

// Fleet is the work on a pod's stores that some changes need; dualwrite's
// Fleet implements it with the pods' routers.
type Fleet interface {
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

// Defaults of Config's fields.
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

// Config is a Controller's configuration; New fills its zero fields with
// the defaults.
type Config struct {
	// PodConfigs lists every pod; others are unknown. New reads it once.
	PodConfigs []PodConfig
	// Gates are the promotion and abort thresholds; zero takes DefaultGates.
	Gates Gates

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
}

// withDefaults returns cfg with its zero fields set to the defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Gates == (Gates{}) {
		cfg.Gates = DefaultGates
	}
	if cfg.Gates.Window <= 0 {
		cfg.Gates.Window = DefaultGates.Window
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&cfg.PollInterval, DefaultPollInterval}, {&cfg.HeartbeatInterval, DefaultHeartbeatInterval},
		{&cfg.AbortInterval, DefaultAbortInterval}, {&cfg.PlanInterval, DefaultPlanInterval},
		{&cfg.LeaseDuration, DefaultLeaseDuration}, {&cfg.StaleAfter, DefaultStaleAfter},
		{&cfg.BackfillWait, DefaultBackfillWait}, {&cfg.ResumeInterval, DefaultResumeInterval},
		{&cfg.ProgressInterval, DefaultProgressInterval},
	} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if reflect.ValueOf(cfg.PlanDefaults).IsZero() {
		cfg.PlanDefaults = DefaultPlanSettings
	}
	if cfg.PlanDefaults.ConfirmTimeout <= 0 {
		cfg.PlanDefaults.ConfirmTimeout = DefaultConfirmTimeout
	}
	if cfg.PlanDefaults.Parallel <= 0 {
		cfg.PlanDefaults.Parallel = 1
	}
	if cfg.PlanDefaults.FinalMode == "" {
		cfg.PlanDefaults.FinalMode = tandem.ModeMySQL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = fmt.Sprintf("instance-%d", time.Now().UnixNano())
	}
	return cfg
}

// Controller is one instance's rollout controller. Mode and the read
// methods are safe for concurrent use.
type Controller struct {
	// Config is the configuration New was given, with the defaults; its
	// fields may be changed before Open (PodConfigs excepted), which hands
	// them to the Controller's parts.
	Config
	// Store persists the control state.
	Store StateStore
	// Switch is the kill switch; its Modes should be this Controller. Set
	// it before Open; nil runs without one.
	Switch KillSwitch
	// Comparator counts the pods' comparisons and audits. Set it before
	// Open; nil runs without gates' measures.
	Comparator Comparisons
	// Fleet runs backfill, audit and resync on a pod's stores. Set it
	// before Open; nil runs without background transitions.
	Fleet Fleet
	// Confirmer calls the plan's confirm webhooks; webhook's Confirmer
	// implements it. Set it before Open; while it is nil, a plan with
	// confirm webhooks promotes nothing.
	Confirmer Confirmer
	// Rehearser replays the pods' captures for the plan's rehearsal gate
	// (rehearsal.go); cmd/tandem/internal/server sets it.
	Rehearser Rehearser
	// Throttles gives the pods' throttle states on this instance
	// (POD.throttle); nil shows the manual throttle alone.
	Throttles ThrottleStates

	// The parts, one job each with its own fields, talking through small
	// interfaces; their exported methods are the Controller's.
	//   podModes     the modes and manual throttles in memory (podmodes.go)
	//   gateKeeper   the gates and the abort's window (gates.go, abort.go)
	//   transitions  the background backfills (transition.go)
	//   front        the admin front (admin.go, mode.go, explain.go, throttle.go)
	//   planFront    the plan's admin API (planapi.go)
	//   planDriver   the plan's loop: lease, steps, confirm webhooks and
	//                rehearsals (plandrive.go, confirm.go, rehearsal.go)
	//   aborter      the automatic abort's loop (abort.go)
	// podModes answers Mode from New on; Open builds the others again with
	// what was set meanwhile (assemble).
	*podModes
	*gateKeeper
	*transitions
	*front
	*planFront
	*planDriver
	*aborter

	life *background
}

var _ tandem.AdminService = (*Controller)(nil)

var _ tandem.PlanService = (*Controller)(nil)

// New returns a Controller of cfg's pods over store. Its modes are
// unknown ("") until Open loads the persisted ones: a pod's router must
// not act on the configured initial mode when the control database holds
// another. Set Switch, Comparator and Fleet before Open: the kill switch
// and the pods' routers read this Controller's modes, so they are built
// after it.
func New(cfg Config, store StateStore) *Controller {
	c := &Controller{Config: cfg.withDefaults(), Store: store, podModes: newPodModes(store, cfg.PodConfigs)}
	c.life = newBackground()
	c.assemble()
	return c
}

// assemble builds the Controller's parts from its configuration and
// dependencies. New assembles them so that a Controller answers before
// Open; Open assembles them again with what was set meanwhile.
func (c *Controller) assemble() {
	pods, note := c.podModes.pods, notify{onError: c.OnError, onChange: c.OnChange}
	c.gateKeeper = newGateKeeper(c.Gates, c.Comparator, c.Switch, pods, c.Now)
	checkpoints, _ := c.Store.(checkpointStore)
	c.transitions = &transitions{store: c.Store, checkpoints: checkpoints, fleet: c.Fleet, modes: c.podModes, pods: pods,
		instanceID: c.InstanceID, staleAfter: c.StaleAfter, backfillWait: c.BackfillWait, progressInterval: c.ProgressInterval,
		now: c.Now, life: c.life, notify: note, runs: map[string]*transitionRun{}}
	throttles, _ := c.Store.(throttleStore)
	c.front = &front{store: c.Store, throttles: throttles, modes: c.podModes, gates: c.gateKeeper, backfills: c.transitions,
		sw: c.Switch, cmp: c.Comparator, fleet: c.Fleet, states: c.Throttles, pods: pods, staleAfter: c.StaleAfter,
		now: c.Now, notify: note}
	book := &planBook{store: c.Store, now: c.Now, notify: note}
	c.planFront = &planFront{book: book, gates: c.gateKeeper, modes: c.podModes, sw: c.Switch, pods: pods,
		defaults: c.PlanDefaults, now: c.Now}
	c.planDriver = &planDriver{book: book, gates: c.gateKeeper, modes: c.podModes, sw: c.Switch, mover: c.front,
		backfills: c.transitions, audits: c.Fleet != nil, confirmer: c.Confirmer, rehearser: c.Rehearser,
		instanceID: c.InstanceID, leaseDuration: c.LeaseDuration, now: c.Now, life: c.life, notify: note,
		auditing: map[string]bool{}, confirms: map[string]*confirmRun{}, rehearsals: map[string]*rehearsalRun{}}
	c.aborter = &aborter{gates: c.gateKeeper, modes: c.podModes, sw: c.Switch, pods: pods, now: c.Now, notify: note}
}

// Open stores the configured pods that the control database does not know
// yet, loads the persisted modes (they win over the config), registers this
// instance and starts the reload, heartbeat, abort and plan loops.
func (c *Controller) Open(ctx context.Context) error {
	for _, p := range c.PodConfigs {
		if !p.Mode.Valid() {
			return fmt.Errorf("pod %s: invalid initial mode %q", p.Name, p.Mode)
		}
	}
	c.assemble()
	now := c.Now().UTC()
	if err := c.podModes.open(ctx, now); err != nil {
		return err
	}
	in := tandem.Instance{ID: c.InstanceID, Addr: c.Addr, StartedAt: now, LastSeen: now, ControlVersion: c.Version()}
	if err := c.Store.RegisterInstance(ctx, in); err != nil {
		return fmt.Errorf("register instance: %w", err)
	}
	c.startLoops(ctx)
	return nil
}

// Close stops the loops; safe to call twice.
func (c *Controller) Close() error {
	c.life.stop()
	return nil
}

// background is the Controller's lifetime: its parts start their
// goroutines under it, and Close cancels ctx and waits for them.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

func newBackground() *background {
	b := &background{}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

// start runs fn in a goroutine that stop waits for.
func (b *background) start(fn func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
}

// stop cancels ctx and waits for the goroutines; safe to call twice.
func (b *background) stop() {
	b.once.Do(func() {
		b.cancel()
		b.wg.Wait()
	})
}

// notify tells cmd what the Controller's parts do: the failures of their
// background work (OnError) and every control action (OnChange).
type notify struct {
	onError  func(error)
	onChange func(tandem.AuditLogEntry)
}

func (n notify) report(err error) {
	if n.onError != nil {
		n.onError(err)
	}
}

func (n notify) changed(e tandem.AuditLogEntry) {
	if n.onChange != nil {
		n.onChange(e)
	}
}

// report tells OnError about a failure of the Controller's loops.
func (c *Controller) report(err error) {
	if c.OnError != nil {
		c.OnError(err)
	}
}

// switchReader is the kill switch as the parts that only read it see it.
type switchReader interface {
	Engaged(pod string) bool
}

// switchEngager is the kill switch as the parts that engage it see it.
type switchEngager interface {
	switchReader
	Engage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error)
}

// engaged reports whether pod's kill switch is engaged; a Controller
// without a kill switch has none engaged.
func engaged(sw switchReader, pod string) bool {
	return sw != nil && sw.Engaged(pod)
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
