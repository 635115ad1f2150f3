package capture

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// Defaults of a Recorder.
const (
	DefaultBufferSize = 8192
	DefaultMaxBytes   = 256 << 20
	DefaultKeep       = 20
	snapshotTimeout   = 30 * time.Second
)

// Why a capture ended (CaptureInfo.Ended).
const (
	EndedDuration = "duration"
	EndedMaxOps   = "max_ops"
	EndedMaxBytes = "max_bytes"
	EndedShutdown = "shutdown"
)

// ActionCaptureStart is the audit-log action of a capture's start.
const ActionCaptureStart = "capture_start"

// Snapshot reads a pod's state at the start of a capture: the store that
// answers its buyers, the ledger positions of its shops and the active
// holds of that store.
type Snapshot func(ctx context.Context) (sot string, positions []Position, holds []Hold, err error)

// AuditLog receives the start of every capture; controldb satisfies it.
type AuditLog interface {
	AppendAudit(ctx context.Context, e tandem.AuditLogEntry) error
}

// Recorder records pods' checkout operations into capture files, one
// capture at a time per pod. It is the routers' Tap: Observe never blocks,
// and what its buffer cannot take is counted as dropped. Build it with
// NewRecorder, then Close it.
type Recorder struct {
	// Dir holds the capture files.
	Dir string
	// BufferSize is how many operations wait for the file writer before
	// new ones are dropped (default 8192).
	BufferSize int
	// MaxBytes bounds each capture file (default 256 MiB).
	MaxBytes int64
	// Keep is how many ended captures are kept; older files are removed
	// (default 20).
	Keep int
	// AuditLog, when set, records each capture's start.
	AuditLog AuditLog
	// OnError, when set, is told of failures nobody waits for.
	OnError func(error)
	Now     func() time.Time

	pods map[string]*podSlot
	// beforeWrite, when set, runs before each operation is written (tests
	// hold the writer with it to fill the buffer).
	beforeWrite func()

	mu       sync.Mutex
	captures []*run // oldest first
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

type podSlot struct {
	snapshot Snapshot
	cur      atomic.Pointer[run]
}

// run is one capture.
type run struct {
	info    tandem.CaptureInfo // guarded by Recorder.mu once started
	path    string
	ch      chan tandem.TrafficOp
	start   time.Time // with a monotonic reading
	key     []byte    // the token hash's key, nil when tokens are kept
	maxOps  int64
	ops     atomic.Int64
	dropped atomic.Int64
	bytes   atomic.Int64
}

var _ tandem.CaptureService = (*Recorder)(nil)

// NewRecorder returns a recorder of the pods (name to its Snapshot) whose
// files go to dir.
func NewRecorder(dir string, pods map[string]Snapshot) *Recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{Dir: dir, BufferSize: DefaultBufferSize, MaxBytes: DefaultMaxBytes, Keep: DefaultKeep,
		Now: time.Now, pods: make(map[string]*podSlot, len(pods)), ctx: ctx, cancel: cancel}
	for name, s := range pods {
		r.pods[name] = &podSlot{snapshot: s}
	}
	return r
}

// Observe offers one operation to the pod's running capture, if any,
// without ever blocking: a full buffer counts it as dropped.
func (r *Recorder) Observe(pod string, op tandem.TrafficOp) {
	slot := r.pods[pod]
	if slot == nil {
		return
	}
	c := slot.cur.Load()
	if c == nil {
		return
	}
	select {
	case c.ch <- op:
	default:
		c.dropped.Add(1)
	}
}

// StartCapture starts recording pod. Returns EINVALID, EUNKNOWNPOD,
// ECONFLICT (one runs for the pod), EUNAVAILABLE (the start state cannot
// be read) or an internal error (the file cannot be written).
func (r *Recorder) StartCapture(ctx context.Context, pod string, req tandem.CaptureRequest) (*tandem.CaptureInfo, error) {
	slot := r.pods[pod]
	if slot == nil {
		return nil, tandem.Errorf(tandem.EUNKNOWNPOD, "unknown pod %q", pod)
	}
	if req.Duration <= 0 || req.Duration > tandem.MaxCaptureDuration {
		return nil, tandem.Errorf(tandem.EINVALID, "duration must be above 0 and at most %s", tandem.MaxCaptureDuration)
	}
	if req.MaxOps == 0 {
		req.MaxOps = tandem.DefaultCaptureMaxOps
	}
	if req.MaxOps < 0 || req.MaxOps > tandem.MaxCaptureMaxOps {
		return nil, tandem.Errorf(tandem.EINVALID, "max_ops must be in 1..%d", tandem.MaxCaptureMaxOps)
	}
	if req.Reason == "" {
		return nil, tandem.Errorf(tandem.EINVALID, "reason is required")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return nil, tandem.Errorf(tandem.EUNAVAILABLE, "the instance is shutting down")
	}
	if c := slot.cur.Load(); c != nil {
		return nil, tandem.Errorf(tandem.ECONFLICT, "capture %s of pod %s runs until %s", c.info.ID, pod,
			c.info.StartedAt.Add(req.Duration).Format(time.RFC3339)).WithDetail("capture_id", c.info.ID)
	}
	sctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	sot, positions, holds, err := slot.snapshot(sctx)
	cancel()
	if err != nil {
		return nil, tandem.Errorf(tandem.EUNAVAILABLE, "read the start state of pod %s: %s", pod, tandem.ErrorMessage(err))
	}
	now := r.Now().UTC()
	c := &run{ch: make(chan tandem.TrafficOp, max(r.BufferSize, 1)), start: time.Now(), maxOps: req.MaxOps}
	c.info = tandem.CaptureInfo{
		ID: "cap-" + now.Format("20060102T150405") + "-" + randomHex(4), Pod: pod, State: tandem.CaptureRunning,
		Reason: req.Reason, Actor: req.Actor, StartedAt: now, Duration: req.Duration.String(), MaxOps: req.MaxOps,
		MaxBytes: r.MaxBytes, Positions: len(positions), Holds: len(holds), HashedTokens: !req.KeepTokens,
	}
	if !req.KeepTokens {
		c.key = make([]byte, 32)
		_, _ = rand.Read(c.key)
		for i := range holds {
			holds[i].CartToken = c.token(holds[i].ShopID, holds[i].CartToken)
		}
	}
	c.path = filepath.Join(r.Dir, c.info.ID+".tcap")
	f, err := os.OpenFile(c.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create capture file: %w", err)
	}
	cw := &countingWriter{w: f, n: &c.bytes}
	w, err := NewWriter(cw, Header{ID: c.info.ID, Pod: pod, Reason: req.Reason, Actor: req.Actor, StartedAt: now,
		SourceOfTruth: sot, HashedTokens: c.key != nil, Positions: positions, Holds: holds})
	if err != nil {
		f.Close()
		os.Remove(c.path)
		return nil, fmt.Errorf("write capture header: %w", err)
	}
	if r.AuditLog != nil {
		e := tandem.AuditLogEntry{At: now, Actor: req.Actor, Action: ActionCaptureStart, Pod: pod, Reason: req.Reason,
			After: fmt.Sprintf("%s for %s, at most %d ops", c.info.ID, req.Duration, req.MaxOps)}
		if err := r.AuditLog.AppendAudit(ctx, e); err != nil {
			f.Close()
			os.Remove(c.path)
			return nil, tandem.Errorf(tandem.EUNAVAILABLE, "write the audit log: %s", tandem.ErrorMessage(err))
		}
	}
	r.captures = append(r.captures, c)
	slot.cur.Store(c)
	r.wg.Add(1)
	go r.write(slot, c, f, w, req.Duration)
	info := c.info
	return &info, nil
}

// write writes c's operations until one of its limits, then ends it.
func (r *Recorder) write(slot *podSlot, c *run, f *os.File, w *Writer, d time.Duration) {
	defer r.wg.Done()
	timer := time.NewTimer(d)
	defer timer.Stop()
	ended := ""
	var werr error
	add := func(op tandem.TrafficOp) {
		if werr != nil || c.ops.Load() >= c.maxOps {
			return
		}
		if r.beforeWrite != nil {
			r.beforeWrite()
		}
		if werr = w.Write(c.record(op)); werr != nil {
			return
		}
		c.ops.Add(1)
	}
	for ended == "" && werr == nil {
		select {
		case op := <-c.ch:
			add(op)
			switch {
			case c.ops.Load() >= c.maxOps:
				ended = EndedMaxOps
			case c.bytes.Load() >= r.MaxBytes:
				ended = EndedMaxBytes
			}
		case <-timer.C:
			ended = EndedDuration
		case <-r.ctx.Done():
			ended = EndedShutdown
		}
	}
	slot.cur.CompareAndSwap(c, nil)
	// What was offered before the end is written (within the limits); an
	// Observe that raced the end may still add to the channel, unread.
	for drained := false; !drained; {
		select {
		case op := <-c.ch:
			add(op)
		default:
			drained = true
		}
	}
	if werr == nil {
		werr = w.Close(End{Ops: c.ops.Load(), Dropped: c.dropped.Load(), EndedAt: r.Now().UTC(), Ended: ended})
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	r.mu.Lock()
	now := r.Now().UTC()
	c.info.EndedAt, c.info.State, c.info.Ended = &now, tandem.CaptureDone, ended
	if werr != nil {
		c.info.State, c.info.Ended = tandem.CaptureFailed, "error: "+werr.Error()
	}
	r.prune()
	r.mu.Unlock()
	if werr != nil && r.OnError != nil {
		r.OnError(fmt.Errorf("capture %s: %w", c.info.ID, werr))
	}
}

// prune removes the files of ended captures beyond Keep (mu held).
func (r *Recorder) prune() {
	ended := 0
	for i := len(r.captures) - 1; i >= 0; i-- {
		c := r.captures[i]
		if c.info.State == tandem.CaptureRunning {
			continue
		}
		if ended++; ended > max(r.Keep, 1) {
			os.Remove(c.path)
			r.captures = append(r.captures[:i], r.captures[i+1:]...)
		}
	}
}

// record turns an observed operation into the file's record.
func (c *run) record(op tandem.TrafficOp) Op {
	off := op.At.Sub(c.start)
	if off < 0 {
		off = 0
	}
	rec := Op{Offset: off, Op: op.Op, ShopID: op.ShopID, CartToken: op.CartToken, Lines: op.Lines, TTL: op.TTL,
		Status: op.Status, Granted: op.Granted, Latency: op.Latency}
	if op.Op == tandem.OpSetOnHand {
		k := op.Key
		rec.Key, rec.OnHand = &k, op.OnHand
	}
	if c.key != nil && rec.CartToken != "" {
		rec.CartToken = c.token(op.ShopID, op.CartToken)
	}
	return rec
}

// token returns the keyed hash of a cart token: the same cart gets the
// same hash within one capture, and nothing outside it can be told from it.
func (c *run) token(shopID int64, token string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(strconv.FormatInt(shopID, 10) + "/" + token))
	return "h-" + hex.EncodeToString(m.Sum(nil))[:30]
}

func (c *run) snapshot() tandem.CaptureInfo {
	info := c.info
	info.Ops, info.Dropped, info.Bytes = c.ops.Load(), c.dropped.Load(), c.bytes.Load()
	return info
}

// Captures lists the captures, newest first.
func (r *Recorder) Captures(ctx context.Context) ([]tandem.CaptureInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]tandem.CaptureInfo, 0, len(r.captures))
	for _, c := range r.captures {
		out = append(out, c.snapshot())
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.After(out[j].StartedAt) })
	return out, nil
}

// OpenCapture opens an ended capture's file. Returns ENOTFOUND, ECONFLICT
// while it runs (its file is complete only at its end).
func (r *Recorder) OpenCapture(ctx context.Context, id string) (io.ReadCloser, *tandem.CaptureInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.captures {
		if c.info.ID != id {
			continue
		}
		info := c.snapshot()
		if info.State == tandem.CaptureRunning {
			return nil, nil, tandem.Errorf(tandem.ECONFLICT, "capture %s is still running; its file is complete when it ends", id)
		}
		if info.State == tandem.CaptureFailed {
			return nil, nil, tandem.Errorf(tandem.ECONFLICT, "capture %s failed: %s", id, info.Ended)
		}
		f, err := os.Open(c.path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, nil, tandem.Errorf(tandem.ENOTFOUND, "the file of capture %s is gone", id)
			}
			return nil, nil, err
		}
		return f, &info, nil
	}
	return nil, nil, tandem.Errorf(tandem.ENOTFOUND, "no capture %q on this instance", id)
}

// Running reports whether a capture of pod is running.
// Its file is complete once it is not.
func (r *Recorder) Running(pod string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.captures {
		if c.info.Pod == pod && c.info.State == tandem.CaptureRunning {
			return true
		}
	}
	return false
}

// Close ends every running capture (their files are complete) and waits
// for them. Safe to call twice.
func (r *Recorder) Close() error {
	r.mu.Lock()
	r.cancel()
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n.Add(int64(n))
	return n, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
