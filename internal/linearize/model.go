// Package linearize checks that a reservation engine, or a pod's dual-write
// router, behaves as one sequential inventory under concurrency: it drives
// reserve, claim, release and stock counts from many clients at once,
// records each call's invocation and response times, and asks porcupine
// (github.com/anishathalye/porcupine) whether some order of the calls, each
// placed between its invocation and its response, explains every answer
// under the sequential model of memres.Store.
//
// The model keeps time out: holds never expire during a run. It is
// partitioned by item: every cart holds one line of one item, so the
// history of each item is checked on its own (porcupine's P-compositionality).
//
// A call whose outcome is unknown (EUNAVAILABLE, an internal error, a
// deadline) is recorded with a response time of "infinity"
// (math.MaxInt64) and an output the model accepts whatever it did: placed
// anywhere after its invocation it takes its effect, and placed last it
// stands for a call that never took effect.
package linearize

import (
	"fmt"
	"math"
	"strings"

	"github.com/anishathalye/porcupine"
	"github.com/tandemhq/tandem"
)

// Capacity of the model's state: a run may stock at most MaxGroups groups
// per item and issue at most MaxCarts cart tokens per item.
const (
	MaxGroups = 4
	MaxCarts  = 96
)

// Infinity is the response time of a call whose outcome is unknown.
const Infinity = math.MaxInt64

// Kind is the operation a call makes.
type Kind uint8

// The operations the model knows.
const (
	Reserve Kind = iota + 1
	Claim
	Release
	SetOnHand
)

// String returns the operation's name.
func (k Kind) String() string {
	switch k {
	case Reserve:
		return "reserve"
	case Claim:
		return "claim"
	case Release:
		return "release"
	case SetOnHand:
		return "set_on_hand"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Config is the inventory of a run: one shop, a few items, each stocked in
// the same groups with the same initial on_hand, and the group preference
// orders that carts may ask for.
type Config struct {
	ShopID int64
	// Items are the item ids; the model partitions the history by item.
	Items []int64
	// Groups are the group ids every item is stocked in (at most MaxGroups).
	Groups []int64
	// OnHand is each group's initial on_hand, by index into Groups.
	OnHand []int64
	// Prefs are the preference orders a cart may ask for, as indexes into
	// Groups, e.g. {{0}, {0, 1}, {1, 0}}.
	Prefs [][]int
	// Carts is how many cart tokens a run issues per item (at most MaxCarts).
	Carts int
}

// Validate reports a config the model cannot hold.
func (c Config) Validate() error {
	switch {
	case c.ShopID <= 0:
		return fmt.Errorf("linearize: shop id must be > 0")
	case len(c.Items) == 0:
		return fmt.Errorf("linearize: no items")
	case len(c.Groups) == 0 || len(c.Groups) > MaxGroups:
		return fmt.Errorf("linearize: want 1..%d groups, got %d", MaxGroups, len(c.Groups))
	case len(c.OnHand) != len(c.Groups):
		return fmt.Errorf("linearize: %d on_hand values for %d groups", len(c.OnHand), len(c.Groups))
	case len(c.Prefs) == 0 || len(c.Prefs) > 255:
		return fmt.Errorf("linearize: want 1..255 preference orders, got %d", len(c.Prefs))
	case c.Carts < 1 || c.Carts > MaxCarts:
		return fmt.Errorf("linearize: want 1..%d carts per item, got %d", MaxCarts, c.Carts)
	}
	for i, p := range c.Prefs {
		if len(p) == 0 {
			return fmt.Errorf("linearize: preference order %d is empty", i)
		}
		for _, g := range p {
			if g < 0 || g >= len(c.Groups) {
				return fmt.Errorf("linearize: preference order %d names group index %d", i, g)
			}
		}
	}
	return nil
}

// Token returns the cart token of cart n of the item at index item.
func (c Config) Token(item, n int) string {
	return fmt.Sprintf("lin-%d-%d", c.Items[item], n)
}

// Key returns the position of the item and group at the given indexes.
func (c Config) Key(item, group int) tandem.Key {
	return tandem.Key{ShopID: c.ShopID, ItemID: c.Items[item], GroupID: c.Groups[group]}
}

// Request returns the reserve request of a call: one line of the item,
// with the call's quantity and preference order.
func (c Config) Request(in Input) tandem.ReserveRequest {
	groups := make([]int64, len(c.Prefs[in.Pref]))
	for i, g := range c.Prefs[in.Pref] {
		groups[i] = c.Groups[g]
	}
	return tandem.ReserveRequest{
		CartToken: c.Token(in.Item, in.Cart),
		ShopID:    c.ShopID,
		Lines:     []tandem.LineRequest{{ItemID: c.Items[in.Item], Quantity: in.Quantity, GroupIDs: groups}},
	}
}

// Input is a call as the model sees it. Item is an index into Config.Items
// and the partition key; Cart numbers the cart token within the item.
type Input struct {
	Kind Kind
	Item int
	Cart int
	// Quantity and Pref (an index into Config.Prefs) are a reserve's
	// request; the pair is the cart's fingerprint.
	Quantity int64
	Pref     int
	// Group (an index into Config.Groups) and OnHand are a stock count's.
	Group  int
	OnHand int64
}

// Output is an answer as the model sees it.
type Output struct {
	// Unknown is set when the call's outcome is unknown; the model then
	// accepts it whatever it did.
	Unknown bool
	// Code is the error code, "" on success.
	Code string
	// Status is the cart's status on success of reserve, claim or release.
	Status tandem.Status
	// Group (an index into Config.Groups, -1 for none) and Quantity are the
	// cart's line on success.
	Group    int
	Quantity int64
}

// cart statuses in the model's state.
const (
	cartNone uint8 = iota
	cartReserved
	cartClaimed
	cartReleased
)

type cartState struct {
	status uint8
	qty    uint8
	pref   uint8
	group  uint8
}

// itemState is one item's inventory: comparable with == and cheap to copy.
type itemState struct {
	onHand [MaxGroups]int32
	held   [MaxGroups]int32
	carts  [MaxCarts]cartState
}

// step is the sequential specification: the state after the call and the
// answer it must give, following memres.Store.
func (c Config) step(s itemState, in Input) (itemState, Output) {
	out := Output{Group: -1}
	if in.Kind == SetOnHand {
		if in.OnHand < int64(s.held[in.Group]) {
			out.Code = tandem.ECONFLICT
			return s, out
		}
		s.onHand[in.Group] = int32(in.OnHand)
		return s, out
	}
	cs := s.carts[in.Cart]
	answer := func(st tandem.Status) Output {
		return Output{Status: st, Group: int(cs.group), Quantity: int64(cs.qty)}
	}
	switch in.Kind {
	case Reserve:
		switch {
		case cs.status == cartReserved && cs.qty == uint8(in.Quantity) && cs.pref == uint8(in.Pref):
			return s, answer(tandem.StatusReserved)
		case cs.status != cartNone:
			out.Code = tandem.ECONFLICT
			return s, out
		}
		for _, g := range c.Prefs[in.Pref] {
			if int64(s.onHand[g]-s.held[g]) >= in.Quantity {
				s.held[g] += int32(in.Quantity)
				cs = cartState{status: cartReserved, qty: uint8(in.Quantity), pref: uint8(in.Pref), group: uint8(g)}
				s.carts[in.Cart] = cs
				return s, answer(tandem.StatusReserved)
			}
		}
		out.Code = tandem.EINSUFFICIENT
		return s, out
	case Claim:
		switch cs.status {
		case cartNone:
			out.Code = tandem.ENOTFOUND
		case cartClaimed:
			out = answer(tandem.StatusClaimed)
		case cartReleased:
			out.Code = tandem.EGONE
		case cartReserved:
			s.held[cs.group] -= int32(cs.qty)
			s.onHand[cs.group] -= int32(cs.qty)
			s.carts[in.Cart].status = cartClaimed
			out = answer(tandem.StatusClaimed)
		}
		return s, out
	case Release:
		switch cs.status {
		case cartNone:
			out.Code = tandem.ENOTFOUND
		case cartClaimed:
			out.Code = tandem.EALREADYCLAIMED
		case cartReleased:
			out = answer(tandem.StatusReleased)
		case cartReserved:
			s.held[cs.group] -= int32(cs.qty)
			s.carts[in.Cart].status = cartReleased
			out = answer(tandem.StatusReleased)
		}
		return s, out
	}
	out.Code = "unknown operation " + in.Kind.String()
	return s, out
}

// Model returns the porcupine model of the config's inventory, partitioned
// by item. It panics on a config that Validate refuses.
func Model(c Config) porcupine.Model {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			parts := make([][]porcupine.Operation, len(c.Items))
			for _, op := range history {
				i := op.Input.(Input).Item
				parts[i] = append(parts[i], op)
			}
			out := parts[:0]
			for _, p := range parts {
				if len(p) > 0 {
					out = append(out, p)
				}
			}
			return out
		},
		Init: func() interface{} {
			var s itemState
			for g, n := range c.OnHand {
				s.onHand[g] = int32(n)
			}
			return s
		},
		Step: func(state, input, output interface{}) (bool, interface{}) {
			next, want := c.step(state.(itemState), input.(Input))
			got := output.(Output)
			if got.Unknown {
				return true, next
			}
			return got == want, next
		},
		Equal: func(a, b interface{}) bool { return a.(itemState) == b.(itemState) },
		Hash:  hashState,
		DescribeOperation: func(input, output interface{}) string {
			return c.describe(input.(Input), output.(Output))
		},
		DescribeState: func(state interface{}) string { return c.describeState(state.(itemState)) },
	}
}

// hashState is FNV-1a over the state's fields.
func hashState(state interface{}) uint64 {
	s := state.(itemState)
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		h ^= v
		h *= 1099511628211
	}
	for g := 0; g < MaxGroups; g++ {
		mix(uint64(uint32(s.onHand[g])))
		mix(uint64(uint32(s.held[g])))
	}
	for _, cs := range s.carts {
		mix(uint64(cs.status) | uint64(cs.qty)<<8 | uint64(cs.pref)<<16 | uint64(cs.group)<<24)
	}
	return h
}

func (c Config) describe(in Input, out Output) string {
	var call string
	switch in.Kind {
	case Reserve:
		call = fmt.Sprintf("reserve(%s, %dx%d @%v)", c.Token(in.Item, in.Cart), in.Quantity, c.Items[in.Item], c.prefGroups(in.Pref))
	case SetOnHand:
		call = fmt.Sprintf("set_on_hand(%s, %d)", c.Key(in.Item, in.Group), in.OnHand)
	default:
		call = fmt.Sprintf("%s(%s)", in.Kind, c.Token(in.Item, in.Cart))
	}
	return call + " -> " + c.describeOutput(out)
}

func (c Config) describeOutput(out Output) string {
	switch {
	case out.Unknown:
		return "unknown"
	case out.Code != "":
		return out.Code
	case out.Status == "":
		return "ok"
	}
	return fmt.Sprintf("%s %d@g%d", out.Status, out.Quantity, c.groupID(out.Group))
}

func (c Config) groupID(g int) int64 {
	if g < 0 || g >= len(c.Groups) {
		return 0
	}
	return c.Groups[g]
}

func (c Config) prefGroups(p int) []int64 {
	if p < 0 || p >= len(c.Prefs) {
		return nil
	}
	ids := make([]int64, len(c.Prefs[p]))
	for i, g := range c.Prefs[p] {
		ids[i] = c.Groups[g]
	}
	return ids
}

func (c Config) describeState(s itemState) string {
	var b strings.Builder
	for g := range c.Groups {
		fmt.Fprintf(&b, "g%d on_hand=%d held=%d; ", c.Groups[g], s.onHand[g], s.held[g])
	}
	names := [...]string{cartNone: "", cartReserved: "R", cartClaimed: "C", cartReleased: "X"}
	for n, cs := range s.carts {
		if cs.status != cartNone {
			fmt.Fprintf(&b, "#%d:%s%d@g%d ", n, names[cs.status], cs.qty, c.groupID(int(cs.group)))
		}
	}
	return strings.TrimSpace(b.String())
}
