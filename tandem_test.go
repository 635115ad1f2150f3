package tandem_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

func validRequest() tandem.ReserveRequest {
	return tandem.ReserveRequest{CartToken: "c-1", ShopID: 1, Lines: []tandem.LineRequest{
		{ItemID: 100, Quantity: 2, GroupIDs: []int64{1, 2}},
	}}
}

func TestReserveRequestValidate(t *testing.T) {
	tooMany := func(n int) []tandem.LineRequest {
		ls := make([]tandem.LineRequest, n)
		for i := range ls {
			ls[i] = tandem.LineRequest{ItemID: int64(i + 1), Quantity: 1, GroupIDs: []int64{1}}
		}
		return ls
	}
	groups := func(n int) []int64 {
		gs := make([]int64, n)
		for i := range gs {
			gs[i] = int64(i + 1)
		}
		return gs
	}
	for _, tc := range []struct {
		name string
		edit func(r *tandem.ReserveRequest)
		ok   bool
	}{
		{"OK", func(r *tandem.ReserveRequest) {}, true},
		{"MaxEverything", func(r *tandem.ReserveRequest) {
			r.CartToken = strings.Repeat("a", 128)
			r.TTL = time.Hour
			r.Lines = tooMany(100)
			r.Lines[0].Quantity, r.Lines[0].GroupIDs = 1000, groups(20)
		}, true},
		{"EmptyToken", func(r *tandem.ReserveRequest) { r.CartToken = "" }, false},
		{"LongToken", func(r *tandem.ReserveRequest) { r.CartToken = strings.Repeat("a", 129) }, false},
		{"TokenSpace", func(r *tandem.ReserveRequest) { r.CartToken = "a b" }, false},
		{"TokenUnicode", func(r *tandem.ReserveRequest) { r.CartToken = "caf\u00e9" }, false},
		{"ZeroShop", func(r *tandem.ReserveRequest) { r.ShopID = 0 }, false},
		{"NoLines", func(r *tandem.ReserveRequest) { r.Lines = nil }, false},
		{"TooManyLines", func(r *tandem.ReserveRequest) { r.Lines = tooMany(101) }, false},
		{"ZeroQuantity", func(r *tandem.ReserveRequest) { r.Lines[0].Quantity = 0 }, false},
		{"BigQuantity", func(r *tandem.ReserveRequest) { r.Lines[0].Quantity = 1001 }, false},
		{"NoGroups", func(r *tandem.ReserveRequest) { r.Lines[0].GroupIDs = nil }, false},
		{"TooManyGroups", func(r *tandem.ReserveRequest) { r.Lines[0].GroupIDs = groups(21) }, false},
		{"DuplicateGroup", func(r *tandem.ReserveRequest) { r.Lines[0].GroupIDs = []int64{1, 1} }, false},
		{"NegativeGroup", func(r *tandem.ReserveRequest) { r.Lines[0].GroupIDs = []int64{-1} }, false},
		{"ZeroItem", func(r *tandem.ReserveRequest) { r.Lines[0].ItemID = 0 }, false},
		{"DuplicateItem", func(r *tandem.ReserveRequest) { r.Lines = append(r.Lines, r.Lines[0]) }, false},
		{"TTLTooLong", func(r *tandem.ReserveRequest) { r.TTL = time.Hour + time.Second }, false},
		{"TTLSubSecond", func(r *tandem.ReserveRequest) { r.TTL = time.Millisecond }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := validRequest()
			tc.edit(&r)
			err := r.Validate()
			if tc.ok && err != nil {
				t.Fatalf("got %v, want valid", err)
			}
			if !tc.ok && tandem.ErrorCode(err) != tandem.EINVALID {
				t.Fatalf("got %v, want %s", err, tandem.EINVALID)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	a, b := validRequest(), validRequest()
	b.TTL = time.Minute
	if a.Fingerprint() != b.Fingerprint() {
		t.Error("TTL changed the fingerprint; a retry with another TTL must replay")
	}
	b.Lines[0].GroupIDs = []int64{2, 1}
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("group order did not change the fingerprint")
	}
	c := validRequest()
	c.Lines[0].Quantity = 3
	if a.Fingerprint() == c.Fingerprint() {
		t.Error("quantity did not change the fingerprint")
	}
}

func TestModeTransitions(t *testing.T) {
	allowed := map[[2]tandem.Mode]bool{
		{"redis", "shadow"}: true, {"shadow", "redis"}: true, {"shadow", "mysql"}: true,
		{"mysql", "shadow"}: true, {"mysql", "mysql_only"}: true, {"mysql_only", "mysql"}: true,
	}
	modes := []tandem.Mode{"redis", "shadow", "mysql", "mysql_only", "bogus"}
	for _, from := range modes {
		for _, to := range modes {
			if got, want := tandem.CanTransition(from, to), allowed[[2]tandem.Mode{from, to}]; got != want {
				t.Errorf("%s -> %s: got %v, want %v", from, to, got, want)
			}
		}
	}
	if got := tandem.ModeMySQL.Effective(true); got != tandem.ModeShadow {
		t.Errorf("killed mysql: got %s, want shadow", got)
	}
	if got := tandem.ModeMySQLOnly.Effective(true); got != tandem.ModeMySQLOnly {
		t.Errorf("killed mysql_only: got %s, want mysql_only (it cannot fall back)", got)
	}
}

func TestShopSet(t *testing.T) {
	s, err := tandem.ParseShopSet([]string{"5", "1-3", "4", "100-199"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "1-5,100-199"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for shop, want := range map[int64]bool{1: true, 5: true, 6: false, 99: false, 150: true, 200: false} {
		if got := s.Contains(shop); got != want {
			t.Errorf("Contains(%d): got %v, want %v", shop, got, want)
		}
	}
	if got := s.Size(); got != 105 {
		t.Errorf("Size: got %d, want 105", got)
	}
	for _, bad := range []string{"0", "x", "3-1", "-1", "1-"} {
		if _, err := tandem.ParseShopSet([]string{bad}); err == nil {
			t.Errorf("ParseShopSet(%q): got no error", bad)
		}
	}
}

func TestErrorCode(t *testing.T) {
	err := tandem.Errorf(tandem.ECONFLICT, "x")
	wrapped := fmtErrorf(err)
	if got := tandem.ErrorCode(wrapped); got != tandem.ECONFLICT {
		t.Errorf("wrapped: got %s, want conflict", got)
	}
	if got := tandem.ErrorMessage(errPlain); got != "internal error" {
		t.Errorf("plain error message: got %q, want a generic one", got)
	}
	if got := tandem.ErrorCode(errPlain); got != tandem.EINTERNAL {
		t.Errorf("plain error: got %s, want internal", got)
	}
}

// FuzzCartToken checks that token validation never panics and accepts
// exactly 1..128 characters of [A-Za-z0-9._:-].
func FuzzCartToken(f *testing.F) {
	for _, s := range []string{"c-123", "", "a b", strings.Repeat("z", 128), strings.Repeat("z", 129), "\x00", "tok\u00e9n", "a.b_c:d-e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := tandem.ValidateCartToken(s)
		want := len(s) >= 1 && len(s) <= 128
		for _, c := range []byte(s) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
				want = false
			}
		}
		if (err == nil) != want {
			t.Fatalf("ValidateCartToken(%q): got %v, want valid=%v", s, err, want)
		}
		if err != nil && tandem.ErrorCode(err) != tandem.EINVALID {
			t.Fatalf("got code %s, want invalid_request", tandem.ErrorCode(err))
		}
	})
}

// The one TTL rule: ttl_seconds of 1..MaxTTL, the same answer from the
// wire's seconds (TTLSeconds) and from a request's Duration (Validate).
func TestTTLSeconds(t *testing.T) {
	maxS := int64(tandem.MaxTTL / time.Second)
	for _, n := range []int64{0, -1, maxS + 1, 1 << 62, -1 << 62} {
		_, err := tandem.TTLSeconds(n)
		if tandem.ErrorCode(err) != tandem.EINVALID {
			t.Errorf("TTLSeconds(%d): got %v, want %s", n, err, tandem.EINVALID)
		}
		req := tandem.ReserveRequest{CartToken: "c", ShopID: 1, TTL: time.Duration(n) * time.Second,
			Lines: []tandem.LineRequest{{ItemID: 1, Quantity: 1, GroupIDs: []int64{1}}}}
		if n > 0 && n <= maxS+1 {
			if verr := req.Validate(); verr == nil || tandem.ErrorMessage(verr) != tandem.ErrorMessage(err) {
				t.Errorf("Validate with a TTL of %d s: got %v, want %v", n, verr, err)
			}
		}
	}
	for _, n := range []int64{1, maxS} {
		if d, err := tandem.TTLSeconds(n); err != nil || d != time.Duration(n)*time.Second {
			t.Errorf("TTLSeconds(%d): got %s, %v, want %d s", n, d, err, n)
		}
	}
}
