package web_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// TestReservationAnswerMatchesEncodingJSON checks the hand-written encoder
// of the reservation answer against encoding/json, byte for byte, on the
// answers tandem gives and on strings it never produces.
func TestReservationAnswerMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 4, 17, 0, 0, 123456789, time.FixedZone("X", 3600))
	cases := map[string]*tandem.Reservation{
		"Reserved": {CartToken: "cart-1", ShopID: 1, Status: tandem.StatusReserved, ExpiresAt: at,
			Lines: []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 1}, {ItemID: -5, Quantity: 0, GroupID: 9223372036854775807}},
			Pod:   "pod-a", SourceOfTruth: tandem.StoreRedis},
		"Replayed":          {CartToken: "c", ShopID: 7, Status: tandem.StatusReleased, Replayed: true, Lines: []tandem.Line{}},
		"NoLinesNoExpiry":   {CartToken: "c2"},
		"WholeSecond":       {CartToken: "c3", ExpiresAt: time.Unix(1_900_000_000, 0)},
		"Escapes":           {CartToken: `a"b\c<d>e&f`, Pod: "tab\tnew\nline", SourceOfTruth: "\x00\x1f\x7f"},
		"NonASCII":          {CartToken: "café", Pod: "\u2028\u2029", SourceOfTruth: "bad\xffutf8"},
		"FarFuture":         {CartToken: "c4", ExpiresAt: time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"BeforeTheCalendar": {CartToken: "c5", ExpiresAt: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)},
	}
	for name, res := range cases {
		t.Run(name, func(t *testing.T) { checkAnswer(t, res) })
	}
	t.Run("Random", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		alphabet := []string{"a", "Z", "0", "-", "_", ":", `"`, `\`, "<", ">", "&", "\n", "\x01", "é", "\u2028", "\xff", " ", "/"}
		str := func() string {
			var b strings.Builder
			for range r.IntN(12) {
				b.WriteString(alphabet[r.IntN(len(alphabet))])
			}
			return b.String()
		}
		for range 2000 {
			res := &tandem.Reservation{CartToken: str(), ShopID: r.Int64() - r.Int64(), Status: tandem.Status(str()),
				Pod: str(), SourceOfTruth: str(), Replayed: r.IntN(2) == 0,
				ExpiresAt: time.Unix(r.Int64N(1<<34), r.Int64N(1e9))}
			for range r.IntN(4) {
				res.Lines = append(res.Lines, tandem.Line{ItemID: r.Int64(), Quantity: -r.Int64N(1000), GroupID: r.Int64N(10)})
			}
			if !checkAnswer(t, res) {
				return
			}
		}
	})
}

func checkAnswer(t *testing.T, res *tandem.Reservation) bool {
	t.Helper()
	want, err := web.EncodeReservationAnswer(res)
	if err != nil {
		// encoding/json refuses it (a year past 9999): writeReservation
		// sends such a value through writeJSON, as before.
		return true
	}
	if got := web.AppendReservationAnswer(nil, res); !bytes.Equal(got, want) {
		t.Errorf("got  %s\nwant %s", got, want)
		return false
	}
	return true
}
