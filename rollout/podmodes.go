package rollout

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// podModes holds the pods' persisted modes and manual throttles as this
// instance last read them from the control database. The request path
// (the pods' routers, the kill switch) reads them from memory on every
// call, so they live apart from the rest of the Controller, from New on.
type podModes struct {
	store ModeStore
	// throttles is the store's manual throttles; nil when it keeps none.
	throttles throttleStore
	pods      podConfigs

	table   atomic.Pointer[podTable]
	manual  atomic.Pointer[manualTable]
	version atomic.Int64
	// reloadMu serializes reloads so that an older read never replaces a
	// newer one.
	reloadMu sync.Mutex
}

type podState struct {
	mode      tandem.Mode
	updatedAt time.Time
}

type podTable struct {
	version int64
	pods    map[string]podState
}

// manualTable is the manual throttles as last loaded, by pod.
type manualTable struct {
	throttles map[string]tandem.ManualThrottle
}

// podConfigs are the configured pods, in config order.
type podConfigs []PodConfig

// find returns the configuration of pod; false for an unknown pod.
func (ps podConfigs) find(pod string) (PodConfig, bool) {
	for _, p := range ps {
		if p.Name == pod {
			return p, true
		}
	}
	return PodConfig{}, false
}

// newPodModes returns pods' modes over store, unknown ("") until open.
func newPodModes(store ModeStore, pods podConfigs) *podModes {
	m := &podModes{store: store, pods: pods}
	m.throttles, _ = store.(throttleStore)
	m.table.Store(&podTable{pods: map[string]podState{}})
	m.manual.Store(&manualTable{})
	return m
}

// open stores the configured pods that the control database does not
// know yet and loads the persisted modes, which win over the config.
func (m *podModes) open(ctx context.Context, now time.Time) error {
	pods := make([]tandem.Pod, len(m.pods))
	initial := make(map[string]podState, len(m.pods))
	for i, p := range m.pods {
		pods[i] = tandem.Pod{Name: p.Name, Shops: p.Shops, Mode: p.Mode}
		initial[p.Name] = podState{mode: p.Mode}
	}
	m.table.Store(&podTable{pods: initial})
	if err := m.store.InitPods(ctx, pods, now); err != nil {
		return fmt.Errorf("init pods: %w", err)
	}
	return m.Reload(ctx)
}

// Reload reads the persisted pod modes and applies them.
func (m *podModes) Reload(ctx context.Context) error {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	stored, version, err := m.store.Pods(ctx)
	if err != nil {
		return fmt.Errorf("load pod modes: %w", err)
	}
	if version < m.version.Load() {
		return nil
	}
	if err := m.loadThrottles(ctx); err != nil {
		return err
	}
	next := &podTable{version: version, pods: make(map[string]podState, len(m.pods))}
	old := m.table.Load()
	for _, p := range m.pods {
		next.pods[p.Name] = old.pods[p.Name]
	}
	for _, p := range stored {
		if _, ok := next.pods[p.Name]; ok {
			next.pods[p.Name] = podState{mode: p.Mode, updatedAt: p.UpdatedAt}
		}
	}
	m.table.Store(next)
	m.version.Store(version)
	return nil
}

// poll reloads when the control version moved on: another instance
// changed something.
func (m *podModes) poll(ctx context.Context) error {
	v, err := m.store.Version(ctx)
	if err != nil {
		return err
	}
	if v == m.version.Load() {
		return nil
	}
	return m.Reload(ctx)
}

// Mode returns pod's persisted mode ("" for an unknown pod, and for every
// pod before Open). It reads memory only and is safe on the hot path; the
// mode the pod runs in is Mode(pod).Effective(killSwitch.Engaged(pod)).
func (m *podModes) Mode(pod string) tandem.Mode {
	return m.table.Load().pods[pod].mode
}

// state returns pod's persisted mode and when it last changed.
func (m *podModes) state(pod string) podState {
	return m.table.Load().pods[pod]
}

// Version returns the control version this instance has applied.
func (m *podModes) Version() int64 { return m.version.Load() }

// ManualThrottle returns pod's manual throttle as last loaded, and whether
// one is on. It reads memory only.
func (m *podModes) ManualThrottle(pod string) (tandem.ManualThrottle, bool) {
	t, ok := m.manual.Load().throttles[pod]
	return t, ok && t.On
}

// loadThrottles reads the manual throttles when the store keeps them.
func (m *podModes) loadThrottles(ctx context.Context) error {
	if m.throttles == nil {
		return nil
	}
	t, err := m.throttles.Throttles(ctx)
	if err != nil {
		return fmt.Errorf("load throttles: %w", err)
	}
	m.manual.Store(&manualTable{throttles: t})
	return nil
}
