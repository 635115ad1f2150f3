// Package capture records a pod's checkout operations as its router sees
// them, for a rehearsal (tandem replay) of the pod's own traffic against a
// scratch copy of its MySQL engine, and reads them back.
//
// A capture file is one zstd stream of JSON values, one a line: a Header
// (format, version, the pod, and the ledger positions and active holds of
// its shops at the start), then one Op per operation in the order the
// source of truth answered them, then an End record. A file without its End
// record was cut short and is refused, as is a file of another format or
// of a newer version.
package capture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/tandemhq/tandem"
)

// Format and Version name the file format in its header; a reader refuses
// another format and any version above its own.
const (
	Format  = "tandem-capture"
	Version = 1
)

// Errors of a file that cannot be read as a capture.
var (
	// ErrForeign is a file that is not a tandem capture.
	ErrForeign = errors.New("not a tandem capture file")
	// ErrTruncated is a capture cut short: it ends before its end record.
	ErrTruncated = errors.New("capture file is truncated")
	// ErrVersion is a capture of a newer format version.
	ErrVersion = errors.New("capture file has an unsupported version")
)

// zstdMagic opens every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Header opens a capture: what was captured, and the state the pod's shops
// were in when it started, so that a replay starts from the same stock.
type Header struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	Pod       string    `json:"pod"`
	Reason    string    `json:"reason,omitempty"`
	Actor     string    `json:"actor,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// SourceOfTruth is the store that answered the captured operations.
	SourceOfTruth string `json:"source_of_truth,omitempty"`
	// HashedTokens says cart tokens are keyed hashes, not the buyers' own.
	HashedTokens bool `json:"hashed_tokens"`
	// Positions are the ledger's on_hand of every position of the pod's
	// shops at the start; Holds the active holds then (their units are in
	// on_hand and not available).
	Positions []Position `json:"positions"`
	Holds     []Hold     `json:"holds"`
}

// Position is one ledger position at the start of a capture.
type Position struct {
	tandem.Key
	OnHand int64 `json:"on_hand"`
}

// Hold is an active hold at the start of a capture.
type Hold struct {
	ShopID    int64         `json:"shop_id"`
	CartToken string        `json:"cart_token"`
	ExpiresAt time.Time     `json:"expires_at"`
	Lines     []tandem.Line `json:"lines"`
}

// Op is one captured operation.
type Op struct {
	// Offset is when it arrived, after the capture's start (monotonic).
	Offset    time.Duration `json:"t"`
	Op        tandem.Op     `json:"op"`
	ShopID    int64         `json:"shop_id"`
	CartToken string        `json:"cart,omitempty"`
	// Lines and TTL are a reserve's request.
	Lines []tandem.LineRequest `json:"lines,omitempty"`
	TTL   time.Duration        `json:"ttl,omitempty"`
	// Key and OnHand are a stock count's.
	Key    *tandem.Key `json:"key,omitempty"`
	OnHand int64       `json:"on_hand,omitempty"`
	// Status is the source of truth's answer, Granted its lines and
	// groups, Latency how long it took.
	Status  tandem.OutcomeStatus `json:"status"`
	Granted []tandem.Line        `json:"granted,omitempty"`
	Latency time.Duration        `json:"latency,omitempty"`
}

// End closes a capture: how many operations it holds, how many it missed
// and why it ended.
type End struct {
	Ops     int64     `json:"ops"`
	Dropped int64     `json:"dropped"`
	EndedAt time.Time `json:"ended_at"`
	Ended   string    `json:"ended"`
}

// record is one line of the file after the header: an Op, or the End.
type record struct {
	Op
	End *End `json:"end,omitempty"`
}

// Writer writes a capture file.
type Writer struct {
	zw  *zstd.Encoder
	buf *bufio.Writer
	enc *json.Encoder
	ops int64
}

// NewWriter starts a capture file on w with its header (Format and Version
// are set here).
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	buf := bufio.NewWriterSize(zw, 64<<10)
	cw := &Writer{zw: zw, buf: buf, enc: json.NewEncoder(buf)}
	h.Format, h.Version = Format, Version
	if h.Positions == nil {
		h.Positions = []Position{}
	}
	if h.Holds == nil {
		h.Holds = []Hold{}
	}
	if err := cw.enc.Encode(h); err != nil {
		return nil, fmt.Errorf("write capture header: %w", err)
	}
	return cw, nil
}

// Write appends one operation.
func (w *Writer) Write(op Op) error {
	w.ops++
	return w.enc.Encode(record{Op: op})
}

// Close writes the end record and the end of the zstd stream; it does not
// close the underlying writer.
func (w *Writer) Close(end End) error {
	if err := w.enc.Encode(record{End: &end}); err != nil {
		return err
	}
	if err := w.buf.Flush(); err != nil {
		return err
	}
	return w.zw.Close()
}

// Reader reads a capture file: NewReader checks and reads its header,
// Next its operations.
type Reader struct {
	zr  *zstd.Decoder
	dec *json.Decoder
	h   Header
	end *End
}

// NewReader reads the header of the capture in r. Returns ErrForeign (not a
// capture), ErrVersion (a newer version) or ErrTruncated, wrapped with what
// was found.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(len(zstdMagic))
	if err != nil || !bytes.Equal(magic, zstdMagic) {
		if len(magic) == 0 {
			return nil, fmt.Errorf("%w: the file is empty", ErrForeign)
		}
		return nil, fmt.Errorf("%w: it is not zstd-compressed", ErrForeign)
	}
	zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrForeign, err)
	}
	cr := &Reader{zr: zr, dec: json.NewDecoder(zr)}
	var h Header
	if err := cr.dec.Decode(&h); err != nil {
		zr.Close()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isZstdError(err) {
			return nil, fmt.Errorf("%w: its header is incomplete (%v)", ErrTruncated, err)
		}
		return nil, fmt.Errorf("%w: it holds no capture header (%v)", ErrForeign, err)
	}
	if h.Format != Format {
		zr.Close()
		return nil, fmt.Errorf("%w: format %q, want %q", ErrForeign, h.Format, Format)
	}
	if h.Version < 1 || h.Version > Version {
		zr.Close()
		return nil, fmt.Errorf("%w: version %d, this tandem reads 1..%d", ErrVersion, h.Version, Version)
	}
	cr.h = h
	return cr, nil
}

func isZstdError(err error) bool {
	return err != nil && !errors.Is(err, io.EOF) && bytes.Contains([]byte(err.Error()), []byte("zstd"))
}

// Header returns the capture's header.
func (r *Reader) Header() Header { return r.h }

// Next returns the next operation, io.EOF after the last one (the end
// record is then End), or ErrTruncated when the file ends before its end
// record.
func (r *Reader) Next() (Op, error) {
	if r.end != nil {
		return Op{}, io.EOF
	}
	var rec record
	if err := r.dec.Decode(&rec); err != nil {
		if errors.Is(err, io.EOF) {
			return Op{}, fmt.Errorf("%w: it ends without its end record", ErrTruncated)
		}
		var se *json.SyntaxError
		if errors.Is(err, io.ErrUnexpectedEOF) || isZstdError(err) || errors.As(err, &se) {
			return Op{}, fmt.Errorf("%w: %v", ErrTruncated, err)
		}
		return Op{}, fmt.Errorf("read capture: %w", err)
	}
	if rec.End != nil {
		r.end = rec.End
		// Anything after the end record is not of this file.
		if r.dec.More() {
			return Op{}, fmt.Errorf("%w: data after its end record", ErrForeign)
		}
		return Op{}, io.EOF
	}
	return rec.Op, nil
}

// End returns the end record, nil until Next has returned io.EOF.
func (r *Reader) End() *End { return r.end }

// Close releases the decoder.
func (r *Reader) Close() { r.zr.Close() }

// File is a whole capture in memory.
type File struct {
	Header Header
	Ops    []Op
	End    End
}

// ReadFile reads a whole capture from r.
func ReadFile(r io.Reader) (*File, error) {
	cr, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	defer cr.Close()
	f := &File{Header: cr.Header()}
	for {
		op, err := cr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		f.Ops = append(f.Ops, op)
	}
	f.End = *cr.End()
	return f, nil
}
