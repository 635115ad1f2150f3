package faulttest

import (
	"encoding/binary"
	"testing"
)

// packet frames a MySQL packet's payload.
func packet(seq byte, payload ...byte) []byte {
	h := make([]byte, 4, 4+len(payload))
	binary.LittleEndian.PutUint32(h, uint32(len(payload)))
	h[3] = seq
	return append(h, payload...)
}

// ok is an OK packet (header 0x00, or 0xfe ending a result set) with the
// status flags.
func ok(header byte, status uint16) []byte {
	return []byte{header, 0, 0, byte(status), byte(status >> 8), 0, 0}
}

// TestAnswer checks that the cut waits for the last result of a batch: the
// answers to its earlier statements carry the more-results flag.
func TestAnswer(t *testing.T) {
	more := uint16(serverMoreResults | 0x0001)
	for _, tc := range []struct {
		name         string
		deprecateEOF bool
		packets      [][]byte
		wantResults  int // complete before the last packet
	}{
		{"OKs", true, [][]byte{
			packet(1, ok(0x00, more)...), packet(2, ok(0x00, more)...), packet(3, ok(0x00, 0x0002)...),
		}, 2},
		{"ResultSetDeprecateEOF", true, [][]byte{
			packet(1, ok(0x00, more)...),
			packet(2, 1), packet(3, 3, 'd', 'e', 'f'), // one column
			packet(4, 1, '7'), packet(5, ok(0xfe, more)...), // a row, the set's end
			packet(6, ok(0x00, 0)...),
		}, 2},
		{"ResultSetWithEOF", false, [][]byte{
			packet(1, 1), packet(2, 3, 'd', 'e', 'f'), packet(3, 0xfe, 0, 0, 0, 0), // the column, EOF
			packet(4, 1, '7'), packet(5, 0xfe, 0, 0, byte(more), 0), // a row, EOF
			packet(6, ok(0x00, 0)...),
		}, 1},
		{"ErrorStopsTheBatch", true, [][]byte{
			packet(1, ok(0x00, more)...), packet(2, 0xff, 0x26, 0x04, '#'),
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &answer{deprecateEOF: tc.deprecateEOF}
			for i, p := range tc.packets {
				// Byte by byte: a read may end anywhere.
				for _, b := range p {
					if a.done {
						t.Fatalf("got the batch done before packet %d of %d", i+1, len(tc.packets))
					}
					a.feed([]byte{b})
				}
				if i == len(tc.packets)-2 && a.results != tc.wantResults {
					t.Errorf("got %d results before the last packet, want %d", a.results, tc.wantResults)
				}
			}
			if !a.done {
				t.Errorf("got the batch not done after its last packet (%d results, last %s)", a.results, a.last)
			}
		})
	}
}
