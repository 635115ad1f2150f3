package dualwrite

import (
	"slices"
	"testing"

	"github.com/tandemhq/tandem"
)

// requestKeysBySet is requestKeys as it was written first, with a set: the
// reference the allocation-free version must match.
func requestKeysBySet(req tandem.ReserveRequest) []tandem.Key {
	var keys []tandem.Key
	seen := map[tandem.Key]bool{}
	for _, l := range req.Lines {
		for _, g := range l.GroupIDs {
			k := tandem.Key{ShopID: req.ShopID, ItemID: l.ItemID, GroupID: g}
			if !seen[k] && len(keys) < explainKeys {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

func TestRequestKeys(t *testing.T) {
	line := func(item int64, groups ...int64) tandem.LineRequest {
		return tandem.LineRequest{ItemID: item, Quantity: 1, GroupIDs: groups}
	}
	var big []tandem.LineRequest
	for i := range 40 {
		big = append(big, line(int64(i%30), 1, 2, int64(i)))
	}
	for _, tc := range []struct {
		name  string
		lines []tandem.LineRequest
	}{
		{"None", nil},
		{"OneLine", []tandem.LineRequest{line(7, 1)}},
		{"GroupsInOrder", []tandem.LineRequest{line(7, 3, 1, 2)}},
		{"Repeats", []tandem.LineRequest{line(7, 1, 1), line(8, 1), line(7, 2, 1)}},
		{"OverExplainKeys", big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tandem.ReserveRequest{ShopID: 5, Lines: tc.lines}
			want := requestKeysBySet(req)
			if got := requestKeys(req); !slices.Equal(got, want) || (got == nil) != (want == nil) {
				t.Errorf("got %v, want %v", got, want)
			}
			var buf [4]tandem.Key
			if got := appendRequestKeys(buf[:0], req); !slices.Equal(got, want) {
				t.Errorf("into a buffer: got %v, want %v", got, want)
			}
		})
	}
}
