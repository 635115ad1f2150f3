package rollout_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
	"github.com/tandemhq/tandem/rollout"
)

// memStore is an in-memory rollout.StateStore shared by several Controllers.
type memStore struct {
	mu        sync.Mutex
	version   int64
	pods      map[string]*storedPod
	log       []tandem.AuditLogEntry
	instances map[string]tandem.Instance
	pending   map[string]tandem.PendingTransition
	plan      tandem.PlanRecord
	err       error
}

var _ rollout.StateStore = (*memStore)(nil)

type storedPod struct {
	pod      tandem.Pod
	resynced bool
}

func newMemStore() *memStore {
	return &memStore{pods: map[string]*storedPod{}, instances: map[string]tandem.Instance{},
		pending: map[string]tandem.PendingTransition{}}
}

func (s *memStore) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *memStore) InitPods(ctx context.Context, pods []tandem.Pod, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	for _, p := range pods {
		if _, ok := s.pods[p.Name]; !ok {
			p.UpdatedAt = at
			s.pods[p.Name] = &storedPod{pod: p}
		}
	}
	return nil
}

func (s *memStore) Pods(ctx context.Context) ([]tandem.Pod, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, 0, s.err
	}
	var out []tandem.Pod
	for _, p := range s.pods {
		out = append(out, p.pod)
	}
	return out, s.version, nil
}

func (s *memStore) Version(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.err
}

func (s *memStore) SetMode(ctx context.Context, pod string, from, to tandem.Mode, e tandem.AuditLogEntry) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	p, ok := s.pods[pod]
	if !ok {
		return 0, tandem.Errorf(tandem.EUNKNOWNPOD, "unknown pod %q", pod)
	}
	if p.pod.Mode != from {
		return 0, tandem.Errorf(tandem.ECONFLICT, "pod %s is in %s, not %s", pod, p.pod.Mode, from)
	}
	p.pod.Mode, p.pod.UpdatedAt, p.resynced = to, e.At, false
	s.log = append(s.log, e)
	s.version++
	return s.version, nil
}

func (s *memStore) LoadPlan(ctx context.Context) (tandem.PlanRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plan, s.err
}

func (s *memStore) SavePlan(ctx context.Context, doc []byte, version int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	if s.plan.Version != version {
		return 0, tandem.Errorf(tandem.ECONFLICT, "plan changed")
	}
	s.plan.Doc, s.plan.Version = append([]byte{}, doc...), version+1
	return s.plan.Version, nil
}

func (s *memStore) LeasePlan(ctx context.Context, id string, now, until time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	if s.plan.Driver != id && !s.plan.LeaseUntil.Before(now) {
		return false, nil
	}
	s.plan.Driver, s.plan.LeaseUntil = id, until
	return true, nil
}

func (s *memStore) BeginTransition(ctx context.Context, t tandem.PendingTransition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.pending[t.Pod] = t
	return nil
}

func (s *memStore) ClaimTransition(ctx context.Context, pod, from, to string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	t, ok := s.pending[pod]
	if !ok || t.Owner != from {
		return false, nil
	}
	t.Owner = to
	s.pending[pod] = t
	return true, nil
}

func (s *memStore) PendingTransitions(ctx context.Context) ([]tandem.PendingTransition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	var out []tandem.PendingTransition
	for _, t := range s.pending {
		out = append(out, t)
	}
	return out, nil
}

func (s *memStore) TransitionProgress(ctx context.Context, pod, owner string, copied, total int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.pending[pod]; ok && t.Owner == owner {
		t.Copied, t.Total = copied, total
		s.pending[pod] = t
	}
	return s.err
}

func (s *memStore) EndTransition(ctx context.Context, pod string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	_, ok := s.pending[pod]
	delete(s.pending, pod)
	return ok, nil
}

func (s *memStore) FinishTransition(ctx context.Context, pod string, from, to tandem.Mode, e tandem.AuditLogEntry) (int64, error) {
	s.mu.Lock()
	if _, ok := s.pending[pod]; !ok {
		s.mu.Unlock()
		return 0, tandem.Errorf(tandem.ECONFLICT, "transition of %s cancelled", pod)
	}
	delete(s.pending, pod)
	s.mu.Unlock()
	return s.SetMode(ctx, pod, from, to, e)
}

func (s *memStore) MarkResynced(ctx context.Context, pod string, e tandem.AuditLogEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.pods[pod].resynced = true
	s.log = append(s.log, e)
	s.version++
	return nil
}

func (s *memStore) Resynced(ctx context.Context, pod string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[pod].resynced, s.err
}

func (s *memStore) AppendAudit(ctx context.Context, e tandem.AuditLogEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.log = append(s.log, e)
	s.version++
	return nil
}

func (s *memStore) AuditLog(ctx context.Context, limit int) ([]tandem.AuditLogEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []tandem.AuditLogEntry
	for i := len(s.log) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, s.log[i])
	}
	return out, s.err
}

func (s *memStore) actions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.log {
		out = append(out, e.Action)
	}
	return out
}

func (s *memStore) RegisterInstance(ctx context.Context, in tandem.Instance) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances[in.ID] = in
	return s.err
}

func (s *memStore) Heartbeat(ctx context.Context, id string, at time.Time, version int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[id]
	in.ID, in.LastSeen, in.ControlVersion = id, at, version
	s.instances[id] = in
	return s.err
}

func (s *memStore) Instances(ctx context.Context) ([]tandem.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []tandem.Instance
	for _, in := range s.instances {
		out = append(out, in)
	}
	return out, s.err
}

// fakeSwitch is an in-memory rollout.KillSwitch.
type fakeSwitch struct {
	mu      sync.Mutex
	engaged map[string]tandem.Change
}

func newFakeSwitch() *fakeSwitch { return &fakeSwitch{engaged: map[string]tandem.Change{}} }

func (f *fakeSwitch) Engaged(pod string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.engaged[pod]
	return ok
}

func (f *fakeSwitch) change(pod string) tandem.Change {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.engaged[pod]
}

func (f *fakeSwitch) State() tandem.KillSwitchState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := tandem.KillSwitchState{}
	for p := range f.engaged {
		st.Pods = append(st.Pods, p)
	}
	st.Engaged = len(st.Pods) > 0
	return st
}

func (f *fakeSwitch) Engage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	f.mu.Lock()
	for _, p := range pods {
		f.engaged[p] = ch
	}
	f.mu.Unlock()
	st := f.State()
	return &st, nil
}

func (f *fakeSwitch) Disengage(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	f.mu.Lock()
	for _, p := range pods {
		delete(f.engaged, p)
	}
	f.mu.Unlock()
	st := f.State()
	return &st, nil
}

// fakeOps is an in-memory rollout.Fleet. With hold set, a backfill
// reports started (copied 1 of 2) and blocks until release is closed or
// its ctx is cancelled.
type fakeOps struct {
	mu          sync.Mutex
	backfilled  []string
	backfillErr error
	audit       tandem.Audit
	hold        bool
	started     chan string
	release     chan struct{}
	progress    map[string]*tandem.Transition
}

// holdBackfills makes every later backfill block until releaseBackfills.
func (o *fakeOps) holdBackfills() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.hold, o.started, o.release = true, make(chan string, 10), make(chan struct{})
}

func (o *fakeOps) releaseBackfills() { close(o.release) }

func (o *fakeOps) Backfill(ctx context.Context, pod string) error {
	o.mu.Lock()
	if o.progress == nil {
		o.progress = map[string]*tandem.Transition{}
	}
	o.progress[pod] = &tandem.Transition{Step: "copy", Copied: 1, Total: 2, StartedAt: time.Now()}
	hold, started, release := o.hold, o.started, o.release
	o.mu.Unlock()
	if hold {
		started <- pod
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.backfillErr != nil {
		return o.backfillErr
	}
	o.progress[pod] = &tandem.Transition{Step: "done", Copied: 2, Total: 2, StartedAt: o.progress[pod].StartedAt}
	o.backfilled = append(o.backfilled, pod)
	return nil
}

func (o *fakeOps) BackfillProgress(pod string) *tandem.Transition {
	o.mu.Lock()
	defer o.mu.Unlock()
	if p := o.progress[pod]; p != nil {
		c := *p
		return &c
	}
	return nil
}

func (o *fakeOps) Audit(ctx context.Context, pod string) (*tandem.Audit, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a := o.audit
	a.Pod = pod
	return &a, nil
}

func (o *fakeOps) Resync(ctx context.Context, pod string) (int, error) { return 7, nil }

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var errDown = errors.New("control database down")

// env is a Controller over in-memory fakes and a real Comparator.
type env struct {
	ctl   *rollout.Controller
	store *memStore
	sw    *fakeSwitch
	cmp   *comparator.Comparator
	ops   *fakeOps
	clk   *clock
}

func mustShops(t *testing.T, items ...string) tandem.ShopSet {
	t.Helper()
	s, err := tandem.ParseShopSet(items)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var testGates = rollout.Gates{
	MinComparisons: 100, MaxDivergenceRate: 0.01, Window: 15 * time.Minute, RequireAudit: true,
	AbortDivergenceRate: 0.05, AbortMinComparisons: 50,
}

// newEnv opens a Controller with pods pod-a (3 shops, redis), pod-b (1
// shop, shadow), pod-c (10 shops, shadow) unless modes says otherwise.
func newEnv(t *testing.T, store *memStore, modes ...tandem.Mode) *env {
	t.Helper()
	return newEnvAs(t, store, "test", modes...)
}

// newEnvAs is newEnv for the instance id.
func newEnvAs(t *testing.T, store *memStore, id string, modes ...tandem.Mode) *env {
	t.Helper()
	return newEnvWith(t, store, id, nil, modes...)
}

// newEnvWith is newEnvAs whose Controller is changed by set, when not
// nil, before Open: the Controller's parts take their configuration then.
func newEnvWith(t *testing.T, store *memStore, id string, set func(*rollout.Controller), modes ...tandem.Mode) *env {
	t.Helper()
	if len(modes) == 0 {
		modes = []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeShadow}
	}
	clk := &clock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	cmp := comparator.New(comparator.Config{Window: testGates.Window, Now: clk.Now})
	e := &env{store: store, sw: newFakeSwitch(), cmp: cmp, ops: &fakeOps{audit: tandem.Audit{Checked: 3, Clean: true}}, clk: clk}
	e.ctl = rollout.New(rollout.Config{
		PodConfigs: []rollout.PodConfig{
			{Name: "pod-a", Shops: mustShops(t, "1-3"), Mode: modes[0]},
			{Name: "pod-b", Shops: mustShops(t, "7"), Mode: modes[1]},
			{Name: "pod-c", Shops: mustShops(t, "100-109"), Mode: modes[2]},
		},
		Gates: testGates, InstanceID: id, PollInterval: 5 * time.Millisecond,
		// A backfill that is not held ends long before this.
		BackfillWait: time.Minute,
		// The background abort and plan loops are driven by hand in tests.
		AbortInterval: time.Hour, PlanInterval: time.Hour,
		Now: clk.Now,
	}, store)
	e.ctl.Switch, e.ctl.Comparator, e.ctl.Fleet = e.sw, cmp, e.ops
	if set != nil {
		set(e.ctl)
	}
	if err := e.ctl.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ctl.Close() })
	return e
}

// record counts n comparisons for pod, of which bad are divergences.
func (e *env) record(pod string, n, bad int) {
	for i := range n {
		var kind tandem.DivergenceKind
		if i < bad {
			kind = tandem.KindOutcomeMismatch
		}
		e.cmp.Record(tandem.Comparison{Pod: pod, Op: tandem.OpReserve, Kind: kind})
	}
}

// passGates gives pod enough clean comparisons and a clean audit.
func (e *env) passGates(t *testing.T, pod string) {
	t.Helper()
	e.record(pod, 200, 0)
	if _, err := e.ctl.Audit(context.Background(), pod, tandem.Change{Actor: "t", Reason: "gate"}); err != nil {
		t.Fatal(err)
	}
}
