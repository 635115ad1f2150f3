package capture_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
)

// sampleFile returns a small capture file and what it holds.
func sampleFile(tb testing.TB) ([]byte, capture.File) {
	tb.Helper()
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	want := capture.File{
		Header: capture.Header{ID: "cap-1", Pod: "pod-a", StartedAt: at, HashedTokens: true, SourceOfTruth: "redis",
			Positions: []capture.Position{{Key: tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}, OnHand: 5}},
			Holds: []capture.Hold{{ShopID: 1, CartToken: "h-1", ExpiresAt: at.Add(time.Minute),
				Lines: []tandem.Line{{ItemID: 100, Quantity: 1, GroupID: 1}}}}},
		Ops: []capture.Op{
			{Offset: time.Millisecond, Op: tandem.OpReserve, ShopID: 1, CartToken: "c-1", TTL: time.Minute,
				Lines:  []tandem.LineRequest{{ItemID: 100, Quantity: 2, GroupIDs: []int64{1, 2}}},
				Status: tandem.StatusOf(tandem.StatusReserved), Granted: []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 1}}},
			{Offset: 2 * time.Millisecond, Op: tandem.OpClaim, ShopID: 1, CartToken: "c-1", Status: tandem.StatusOf(tandem.StatusClaimed)},
			{Offset: 3 * time.Millisecond, Op: tandem.OpSetOnHand, ShopID: 1, Key: &tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}, OnHand: 9, Status: tandem.OutcomeOK},
		},
		End: capture.End{Ops: 3, Dropped: 1, EndedAt: at.Add(time.Second), Ended: "duration"},
	}
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf, want.Header)
	if err != nil {
		tb.Fatal(err)
	}
	for _, op := range want.Ops {
		if err := w.Write(op); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(want.End); err != nil {
		tb.Fatal(err)
	}
	want.Header.Format, want.Header.Version = capture.Format, capture.Version
	return buf.Bytes(), want
}

func TestReadFile(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		raw, want := sampleFile(t)
		got, err := capture.ReadFile(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if got.Header.Pod != want.Header.Pod || !got.Header.StartedAt.Equal(want.Header.StartedAt) ||
			len(got.Header.Positions) != 1 || got.Header.Positions[0] != want.Header.Positions[0] || len(got.Header.Holds) != 1 {
			t.Errorf("got header %+v, want %+v", got.Header, want.Header)
		}
		if len(got.Ops) != len(want.Ops) {
			t.Fatalf("got %d ops, want %d", len(got.Ops), len(want.Ops))
		}
		for i := range want.Ops {
			g, w := got.Ops[i], want.Ops[i]
			if g.Offset != w.Offset || g.Op != w.Op || g.CartToken != w.CartToken || g.Status != w.Status || g.TTL != w.TTL ||
				len(g.Lines) != len(w.Lines) || len(g.Granted) != len(w.Granted) || g.OnHand != w.OnHand {
				t.Errorf("op %d: got %+v, want %+v", i, g, w)
			}
		}
		if got.End != want.End {
			t.Errorf("got end %+v, want %+v", got.End, want.End)
		}
	})

	t.Run("ErrTruncated", func(t *testing.T) {
		raw, _ := sampleFile(t)
		// Every cut short of the whole file is refused, never read as a
		// shorter capture.
		for n := len(zstdMagic()); n < len(raw); n++ {
			_, err := capture.ReadFile(bytes.NewReader(raw[:n]))
			if !errors.Is(err, capture.ErrTruncated) && !errors.Is(err, capture.ErrForeign) {
				t.Fatalf("cut at %d of %d: got %v, want ErrTruncated", n, len(raw), err)
			}
		}
		// A stream closed cleanly without the end record (a writer that
		// died before Close) is truncated too.
		var buf bytes.Buffer
		zw, _ := zstd.NewWriter(&buf)
		zw.Write([]byte(`{"format":"tandem-capture","version":1,"pod":"pod-a","positions":[],"holds":[]}` + "\n" + `{"t":1,"op":"reserve","shop_id":1,"status":"reserved"}` + "\n"))
		zw.Close()
		if _, err := capture.ReadFile(&buf); !errors.Is(err, capture.ErrTruncated) {
			t.Errorf("no end record: got %v, want ErrTruncated", err)
		}
	})

	tests := []struct {
		name string
		raw  func() []byte
		want error
	}{
		{"Empty", func() []byte { return nil }, capture.ErrForeign},
		{"PlainText", func() []byte { return []byte("hello, world\n") }, capture.ErrForeign},
		{"Gzip", func() []byte {
			var b bytes.Buffer
			gw := gzip.NewWriter(&b)
			gw.Write([]byte(`{"format":"tandem-capture","version":1}`))
			gw.Close()
			return b.Bytes()
		}, capture.ErrForeign},
		{"ZstdOfOtherJSON", func() []byte { return zstdOf(`{"kind":"something else"}` + "\n") }, capture.ErrForeign},
		{"ZstdOfText", func() []byte { return zstdOf("not json at all") }, capture.ErrForeign},
		{"NewerVersion", func() []byte { return zstdOf(`{"format":"tandem-capture","version":99}` + "\n") }, capture.ErrVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := capture.ReadFile(bytes.NewReader(tt.raw()))
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func zstdMagic() []byte { return []byte{0x28, 0xb5, 0x2f, 0xfd} }

func zstdOf(s string) []byte {
	var b bytes.Buffer
	zw, _ := zstd.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.Bytes()
}

// FuzzReadFile: any input is read or refused with one of the format's
// errors, never a panic or an endless read.
func FuzzReadFile(f *testing.F) {
	raw, _ := sampleFile(f)
	f.Add(raw)
	f.Add(raw[:len(raw)/2])
	f.Add(zstdOf(`{"format":"tandem-capture","version":1}` + "\n" + `{"end":{"ops":0}}`))
	f.Add([]byte("plain"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := capture.ReadFile(bytes.NewReader(b))
		if err == nil {
			if got.Header.Format != capture.Format {
				t.Fatalf("read a file of format %q", got.Header.Format)
			}
			return
		}
		if !errors.Is(err, capture.ErrForeign) && !errors.Is(err, capture.ErrTruncated) && !errors.Is(err, capture.ErrVersion) {
			// A well-formed stream with a bad value (a string for a
			// number) is reported as such.
			t.Logf("other error: %v", err)
		}
	})
}
