package tandem

import (
	"context"
	"io"
	"time"
)

// TrafficOp is one checkout operation of a pod as its router saw it: what
// the buyer asked and what the source of truth answered. A capture records
// them so that a replay can play the pod's own traffic again.
type TrafficOp struct {
	Op        Op
	ShopID    int64
	CartToken string
	// Lines and TTL are the reserve's request (TTL resolved to the
	// default when the buyer named none); nil and zero for the others.
	Lines []LineRequest
	TTL   time.Duration
	// Key and OnHand are a stock count's position and quantity.
	Key    Key
	OnHand int64
	// At is when the operation arrived (with a monotonic reading).
	At time.Time
	// Status is the SoT's answer: a reservation status, OutcomeOK for a
	// stock count, or the error code.
	Status OutcomeStatus
	// Granted is the lines (with their groups) the SoT held or settled.
	Granted []Line
	// Latency is how long the SoT took to answer.
	Latency time.Duration
}

// Capture states.
const (
	CaptureRunning = "running"
	CaptureDone    = "done"
	CaptureFailed  = "failed"
)

// CaptureRequest asks to record a pod's checkout operations for a while.
type CaptureRequest struct {
	Change
	// Duration bounds the capture in time (required, at most
	// MaxCaptureDuration).
	Duration time.Duration
	// MaxOps bounds it in operations (0: DefaultCaptureMaxOps).
	MaxOps int64
	// KeepTokens records cart tokens as they are; by default they are
	// replaced by a keyed hash, the same for one cart within a capture.
	KeepTokens bool
}

// Limits and defaults of a capture.
const (
	MaxCaptureDuration   = 24 * time.Hour
	DefaultCaptureMaxOps = 1_000_000
	MaxCaptureMaxOps     = 100_000_000
)

// CaptureInfo describes one capture: what it recorded and why it ended.
type CaptureInfo struct {
	ID        string     `json:"id"`
	Pod       string     `json:"pod"`
	State     string     `json:"state"`
	Reason    string     `json:"reason"`
	Actor     string     `json:"actor"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// Duration and MaxOps are the limits it was started with; MaxBytes
	// bounds its file.
	Duration string `json:"duration"`
	MaxOps   int64  `json:"max_ops"`
	MaxBytes int64  `json:"max_bytes"`
	// Ops is how many operations it recorded; Dropped how many it missed
	// because its buffer was full (a buyer is never slowed by a capture).
	Ops     int64 `json:"ops"`
	Dropped int64 `json:"dropped"`
	// Positions and Holds are the ledger positions and active holds of
	// the pod's shops read at its start.
	Positions int `json:"positions"`
	Holds     int `json:"holds"`
	// Bytes is the size of its file so far.
	Bytes int64 `json:"bytes"`
	// Ended says why it ended: duration, max_ops, max_bytes, shutdown or
	// an error.
	Ended        string `json:"ended,omitempty"`
	HashedTokens bool   `json:"hashed_tokens"`
}

// CaptureService records pods' traffic for rehearsals (tandem replay).
type CaptureService interface {
	// StartCapture starts recording pod's checkout operations. Returns
	// EINVALID, EUNKNOWNPOD, ECONFLICT (one runs for the pod),
	// EUNAVAILABLE (its start positions cannot be read).
	StartCapture(ctx context.Context, pod string, req CaptureRequest) (*CaptureInfo, error)
	// Captures lists the captures, newest first.
	Captures(ctx context.Context) ([]CaptureInfo, error)
	// OpenCapture returns an ended capture's file and its description.
	// Returns ENOTFOUND, ECONFLICT (it still runs, or failed).
	OpenCapture(ctx context.Context, id string) (io.ReadCloser, *CaptureInfo, error)
}
