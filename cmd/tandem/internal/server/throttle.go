package server

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/throttle"
)

// ThrottleConfig is `throttle:`, the throttle of every pod's background
// work (docs/architecture.md, "Throttle"). A limit of 0 turns its signal off.
type ThrottleConfig struct {
	// MaxBuyerP99 throttles while the p99 of the pod's buyer reserves over
	// BuyerWindow is above it.
	MaxBuyerP99 time.Duration `yaml:"max_buyer_p99"`
	// MaxAdmissionWait throttles while the p99 of the buyers' wait for a
	// MySQL slot (mysql_max_inflight) over BuyerWindow is above it.
	MaxAdmissionWait time.Duration `yaml:"max_admission_wait"`
	BuyerWindow      time.Duration `yaml:"buyer_window"`
	MinBuyerSamples  int           `yaml:"min_buyer_samples"`
	// MaxThreadsRunning throttles while the pod's MySQL runs more
	// statements at once; CriticalThreadsRunning stops a running backfill
	// (and any other job) when two polls in a row reach it.
	MaxThreadsRunning      int `yaml:"max_threads_running"`
	CriticalThreadsRunning int `yaml:"critical_threads_running"`
	// MaxReplicaLag throttles while a pod's replica (pods[].replica_dsn)
	// lags more, read from the heartbeat row written every
	// HeartbeatInterval.
	MaxReplicaLag     time.Duration `yaml:"max_replica_lag"`
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// Interval bounds how often MySQL is polled, and is how often a
	// throttled job asks again.
	Interval time.Duration `yaml:"interval"`
}

// defaultThrottle is ThrottleConfig's documented defaults.
func defaultThrottle() ThrottleConfig {
	return ThrottleConfig{
		MaxBuyerP99: throttle.DefaultMaxBuyerP99, MaxAdmissionWait: throttle.DefaultMaxAdmissionWait,
		BuyerWindow: throttle.DefaultBuyerWindow, MinBuyerSamples: throttle.DefaultMinBuyerSamples,
		MaxThreadsRunning: throttle.DefaultMaxThreadsRunning, MaxReplicaLag: throttle.DefaultMaxReplicaLag,
		HeartbeatInterval: 100 * time.Millisecond, Interval: throttle.DefaultInterval,
	}
}

// validate checks the settings' ranges.
func (c ThrottleConfig) validate() error {
	switch {
	case c.MaxBuyerP99 < 0 || c.MaxBuyerP99 > time.Minute:
		return bad("throttle.max_buyer_p99", "must be 0 (off)..1m, got %s", c.MaxBuyerP99)
	case c.MaxAdmissionWait < 0 || c.MaxAdmissionWait > time.Minute:
		return bad("throttle.max_admission_wait", "must be 0 (off)..1m, got %s", c.MaxAdmissionWait)
	case c.BuyerWindow < 100*time.Millisecond || c.BuyerWindow > 10*time.Minute:
		return bad("throttle.buyer_window", "must be 100ms..10m, got %s", c.BuyerWindow)
	case c.MinBuyerSamples < 1 || c.MinBuyerSamples > 100000:
		return bad("throttle.min_buyer_samples", "must be 1..100000, got %d", c.MinBuyerSamples)
	case c.MaxThreadsRunning < 0 || c.MaxThreadsRunning > 100000:
		return bad("throttle.max_threads_running", "must be 0 (off)..100000, got %d", c.MaxThreadsRunning)
	case c.CriticalThreadsRunning < 0 || c.CriticalThreadsRunning > 100000:
		return bad("throttle.critical_threads_running", "must be 0 (off)..100000, got %d", c.CriticalThreadsRunning)
	case c.CriticalThreadsRunning > 0 && c.MaxThreadsRunning > 0 && c.CriticalThreadsRunning <= c.MaxThreadsRunning:
		return bad("throttle.critical_threads_running", "must be above max_threads_running (%d), got %d", c.MaxThreadsRunning, c.CriticalThreadsRunning)
	case c.MaxReplicaLag < 0 || c.MaxReplicaLag > time.Hour:
		return bad("throttle.max_replica_lag", "must be 0 (off)..1h, got %s", c.MaxReplicaLag)
	case c.HeartbeatInterval < 10*time.Millisecond || c.HeartbeatInterval > time.Minute:
		return bad("throttle.heartbeat_interval", "must be 10ms..1m, got %s", c.HeartbeatInterval)
	case c.Interval < 10*time.Millisecond || c.Interval > 10*time.Second:
		return bad("throttle.interval", "must be 10ms..10s, got %s", c.Interval)
	}
	return nil
}

// config is c as throttle's Config: a limit of 0 is off (negative there).
func (c ThrottleConfig) config() throttle.Config {
	off := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	offN := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	return throttle.Config{
		MaxBuyerP99: off(c.MaxBuyerP99), MaxAdmissionWait: off(c.MaxAdmissionWait),
		BuyerWindow: c.BuyerWindow, MinBuyerSamples: c.MinBuyerSamples,
		MaxThreadsRunning: offN(c.MaxThreadsRunning), CriticalThreadsRunning: c.CriticalThreadsRunning,
		MaxReplicaLag: off(c.MaxReplicaLag), Interval: c.Interval,
	}
}

// openThrottle builds p's throttle over its MySQL (and replica), the
// controller's manual throttles and the control log.
func (m *Main) openThrottle(p *podRuntime) error {
	cfg := m.Config.Throttle
	th, err := throttle.New(p.cfg.Name, cfg.config(), p.reg)
	if err != nil {
		return err
	}
	th.ThreadsRunning = p.mysql.ThreadsRunning
	th.Manual = m.ctl
	logAction := logControlAction(m.Logger)
	th.OnChange = func(pod string, st tandem.ThrottleState) {
		e := tandem.AuditLogEntry{At: time.Now().UTC(), Actor: "throttle", Action: "throttle_state", Pod: pod,
			Before: "running", After: "throttled", Reason: st.Reason}
		if !st.Throttled {
			e.Before, e.After, e.Reason = "throttled", "running", "every signal under its limit"
		}
		logAction(e)
	}
	if p.cfg.ReplicaDSN != "" {
		rep, err := mysqlres.OpenReplica(p.cfg.ReplicaDSN)
		if err != nil {
			return err
		}
		m.closers = append(m.closers, rep.Close)
		th.ReplicaLag = rep.Lag
	}
	p.throttle = th
	p.mysql.Admissions = th
	p.router.Throttle, p.router.Buyers = th, th
	return nil
}

// beat writes p's heartbeat row, which its replica's lag is read from.
func (p *podRuntime) beat(ctx context.Context) {
	if err := p.mysql.Beat(ctx); err != nil {
		p.mysql.Logger.Debug("heartbeat", zap.Error(err))
	}
}

// throttleStates gives the pods' throttle states to the controller.
type throttleStates []*podRuntime

// ThrottleState implements rollout.ThrottleStates.
func (ps throttleStates) ThrottleState(pod string) (tandem.ThrottleState, bool) {
	for _, p := range ps {
		if p.cfg.Name == pod && p.throttle != nil {
			return p.throttle.State(), true
		}
	}
	return tandem.ThrottleState{}, false
}
