package linearize

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tandemhq/tandem"
)

// Target is what a run drives: a reservation store or a checkout service,
// seen through the calls the model knows.
type Target interface {
	// Reserve, Claim and Release are tandem.ReservationStore's.
	Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error)
	Claim(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error)
	Release(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error)
	// SetOnHand is a stock count; only its error matters to the model.
	SetOnHand(ctx context.Context, key tandem.Key, onHand int64) error
}

// StoreTarget returns a Target over a reservation store.
func StoreTarget(s tandem.ReservationStore) Target { return storeTarget{s} }

type storeTarget struct{ tandem.ReservationStore }

func (t storeTarget) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) error {
	_, err := t.ReservationStore.SetOnHand(ctx, key, onHand)
	return err
}

// ServiceTarget returns a Target over a checkout service, such as a pod's
// dualwrite.Router.
func ServiceTarget(s tandem.CheckoutService) Target { return serviceTarget{s} }

type serviceTarget struct{ tandem.CheckoutService }

func (t serviceTarget) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) error {
	_, err := t.CheckoutService.SetOnHand(ctx, key, onHand)
	return err
}

// Workload is how a run drives its target.
type Workload struct {
	Config
	// Clients is how many clients call concurrently; OpsPerClient how many
	// calls each makes.
	Clients      int
	OpsPerClient int
	// Recent is how many of an item's most recently issued cart tokens
	// claims, releases and retried reserves pick from (default 4): a small
	// window makes them meet real holds, and each other.
	Recent int
	// StockCounts is the share of calls that are stock counts (SetOnHand of
	// a random group to 0..initial+2; counts below what is held conflict).
	StockCounts float64
	// Seed makes the clients' choices repeatable (not their interleaving).
	Seed uint64
	// SerialSettles keeps the claims and releases of one cart from
	// overlapping each other (they still overlap everything else). The
	// legacy Redis claim is two steps, ledger then hold, and a release in
	// between wins alongside the claim: redisres documents that window, and
	// a run of a Redis source of truth sets this to check all the rest.
	SerialSettles bool
	// SerialStockCounts runs each stock count of an item alone: no other
	// call of the item overlaps it. redisres checks what it holds, writes
	// the ledger, then sets its counter, and reserves landing in between
	// are not counted (the stock-count window it documents).
	SerialStockCounts bool
	// OpTimeout bounds each call (default 10s); a call that runs out has an
	// unknown outcome.
	OpTimeout time.Duration
}

// History is a recorded run.
type History struct {
	Operations []porcupine.Operation
	// Outcomes counts answers by operation and status or code, e.g.
	// "reserve:reserved", "claim:gone", "release:unknown".
	Outcomes map[string]int
	// Failures samples the errors of calls with an unknown outcome (at
	// most 10), to say why.
	Failures []string
}

// Unknown returns how many calls had an unknown outcome.
func (h *History) Unknown() int {
	n := 0
	for _, op := range h.Operations {
		if op.Output.(Output).Unknown {
			n++
		}
	}
	return n
}

// Stock sets every position of the config to its initial on_hand, before
// a run and outside its history.
func Stock(ctx context.Context, t Target, c Config) error {
	for i := range c.Items {
		for g, n := range c.OnHand {
			if err := t.SetOnHand(ctx, c.Key(i, g), n); err != nil {
				return fmt.Errorf("stock %s: %w", c.Key(i, g), err)
			}
		}
	}
	return nil
}

// tokens hands out cart numbers per item and remembers the request each
// cart was first reserved with, so that most retries are identical.
type tokens struct {
	mu     sync.Mutex
	issued []int
	shapes [][MaxCarts]shape
	// settling serialises claims and releases per cart (SerialSettles).
	settling [][MaxCarts]sync.Mutex
	// counting runs stock counts alone per item (SerialStockCounts).
	counting []sync.RWMutex
}

type shape struct {
	qty  int64
	pref int
}

// lock takes the locks the workload's Serial options ask for around a
// call and returns their release.
func (tk *tokens) lock(w Workload, in Input) (unlock func()) {
	var unlocks []func()
	if w.SerialStockCounts {
		mu := &tk.counting[in.Item]
		if in.Kind == SetOnHand {
			mu.Lock()
			unlocks = append(unlocks, mu.Unlock)
		} else {
			mu.RLock()
			unlocks = append(unlocks, mu.RUnlock)
		}
	}
	if w.SerialSettles && (in.Kind == Claim || in.Kind == Release) {
		mu := &tk.settling[in.Item][in.Cart]
		mu.Lock()
		unlocks = append(unlocks, mu.Unlock)
	}
	return func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
}

// Run drives t with w's clients concurrently until each has made its calls
// and returns the history. Stock the target first (Stock).
func Run(ctx context.Context, t Target, w Workload) (*History, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if w.Clients < 1 || w.OpsPerClient < 1 {
		return nil, fmt.Errorf("linearize: want clients and ops per client >= 1")
	}
	if w.Recent <= 0 {
		w.Recent = 4
	}
	if w.OpTimeout <= 0 {
		w.OpTimeout = 10 * time.Second
	}
	tk := &tokens{
		issued:   make([]int, len(w.Items)),
		shapes:   make([][MaxCarts]shape, len(w.Items)),
		settling: make([][MaxCarts]sync.Mutex, len(w.Items)),
		counting: make([]sync.RWMutex, len(w.Items)),
	}
	start := time.Now()
	ops := make([][]porcupine.Operation, w.Clients)
	ops[0] = w.opening(ctx, t, tk, start)
	var failMu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for c := 0; c < w.Clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.Seed, uint64(c)))
			// A client whose call has an unknown outcome goes on as a new
			// client: its unknown call stays open to the end of the history.
			id := c
			if n := len(ops[c]); n > 0 && ops[c][n-1].Return == Infinity {
				id += w.Clients // the opening's last call
			}
			for n := 0; n < w.OpsPerClient && ctx.Err() == nil; n++ {
				in := w.next(rng, tk)
				unlock := tk.lock(w, in)
				call := time.Since(start).Nanoseconds()
				out, err := w.do(ctx, t, in)
				if out.Unknown {
					failMu.Lock()
					if len(failures) < 10 {
						failures = append(failures, in.Kind.String()+": "+err.Error())
					}
					failMu.Unlock()
				}
				ret := time.Since(start).Nanoseconds()
				unlock()
				if out.Unknown {
					ret = Infinity
				}
				ops[c] = append(ops[c], porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
				if out.Unknown {
					id += w.Clients
				}
			}
		}(c)
	}
	wg.Wait()
	h := &History{Outcomes: map[string]int{}, Failures: failures}
	for _, o := range ops {
		for _, op := range o {
			h.Operations = append(h.Operations, op)
			h.Outcomes[op.Input.(Input).Kind.String()+":"+outcomeName(op.Output.(Output))]++
		}
	}
	if err := ctx.Err(); err != nil {
		return h, fmt.Errorf("linearize: run stopped early: %w", err)
	}
	return h, nil
}

// opening is client 0's first calls, made one at a time before the
// clients start, so that the history reaches each outcome whatever the
// interleaving of the rest: a grant, a release, a claim, a conflicting
// retry and a reserve beyond the stock. Left to the interleaving, a run
// of little stock once met no live hold with any of its releases
// (TestLinearizable_MySQL under scripts/stress).
func (w *Workload) opening(ctx context.Context, t Target, tk *tokens, start time.Time) []porcupine.Operation {
	var stock int64
	for _, n := range w.OnHand {
		stock += n
	}
	cart := func(qty int64) Input {
		c := tk.issued[0]
		tk.shapes[0][c] = shape{qty: qty}
		tk.issued[0]++
		return Input{Kind: Reserve, Cart: c, Quantity: qty}
	}
	var ins []Input
	if w.Carts >= 3 {
		held, sold := cart(1), cart(1)
		ins = append(ins, held, Input{Kind: Reserve, Cart: held.Cart, Quantity: 2}, Input{Kind: Release, Cart: held.Cart},
			sold, Input{Kind: Claim, Cart: sold.Cart}, cart(stock+1))
	}
	var ops []porcupine.Operation
	for _, in := range ins {
		call := time.Since(start).Nanoseconds()
		out, _ := w.do(ctx, t, in)
		ret := time.Since(start).Nanoseconds()
		if out.Unknown {
			ret = Infinity
		}
		ops = append(ops, porcupine.Operation{ClientId: 0, Input: in, Call: call, Output: out, Return: ret})
		if out.Unknown {
			break // client 0 goes on as a new client: not in the opening
		}
	}
	return ops
}

func outcomeName(o Output) string {
	switch {
	case o.Unknown:
		return "unknown"
	case o.Code != "":
		return o.Code
	case o.Status == "":
		return "ok"
	}
	return string(o.Status)
}

// next picks a client's next call.
func (w *Workload) next(rng *rand.Rand, tk *tokens) Input {
	item := rng.IntN(len(w.Items))
	r := rng.Float64()
	if r < w.StockCounts {
		g := rng.IntN(len(w.Groups))
		return Input{Kind: SetOnHand, Item: item, Group: g, OnHand: rng.Int64N(w.OnHand[g] + 3)}
	}
	r = (r - w.StockCounts) / (1 - w.StockCounts)
	tk.mu.Lock()
	defer tk.mu.Unlock()
	issued := tk.issued[item]
	fresh := issued < w.Carts && (issued == 0 || r < 0.3)
	if fresh {
		s := shape{qty: 1 + rng.Int64N(2), pref: rng.IntN(len(w.Prefs))}
		tk.shapes[item][issued] = s
		tk.issued[item]++
		return Input{Kind: Reserve, Item: item, Cart: issued, Quantity: s.qty, Pref: s.pref}
	}
	cart := issued - 1 - rng.IntN(min(w.Recent, issued))
	switch {
	case r < 0.4:
		// A retry: mostly the cart's own request (a replay while held), now
		// and then a different one (a conflict).
		s := tk.shapes[item][cart]
		if rng.IntN(5) == 0 {
			s = shape{qty: 1 + rng.Int64N(2), pref: rng.IntN(len(w.Prefs))}
		}
		return Input{Kind: Reserve, Item: item, Cart: cart, Quantity: s.qty, Pref: s.pref}
	case r < 0.65:
		return Input{Kind: Claim, Item: item, Cart: cart}
	}
	return Input{Kind: Release, Item: item, Cart: cart}
}

// do makes the call and turns its answer into the model's terms.
func (w *Workload) do(ctx context.Context, t Target, in Input) (Output, error) {
	ctx, cancel := context.WithTimeout(ctx, w.OpTimeout)
	defer cancel()
	var res *tandem.Reservation
	var err error
	switch in.Kind {
	case Reserve:
		res, err = t.Reserve(ctx, w.Request(in))
	case Claim:
		res, err = t.Claim(ctx, w.ShopID, w.Token(in.Item, in.Cart))
	case Release:
		res, err = t.Release(ctx, w.ShopID, w.Token(in.Item, in.Cart))
	case SetOnHand:
		err = t.SetOnHand(ctx, w.Key(in.Item, in.Group), in.OnHand)
	}
	return w.output(res, err), err
}

// output summarises an answer; failures that may or may not have taken
// effect are unknown.
func (w *Workload) output(res *tandem.Reservation, err error) Output {
	out := Output{Group: -1}
	if err != nil {
		switch code := tandem.ErrorCode(err); {
		case code == tandem.EUNAVAILABLE, code == tandem.EINTERNAL,
			errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			out.Unknown = true
		default:
			out.Code = code
		}
		return out
	}
	if res == nil {
		return out
	}
	out.Status = res.Status
	if len(res.Lines) == 1 {
		out.Quantity = res.Lines[0].Quantity
		for g, id := range w.Groups {
			if id == res.Lines[0].GroupID {
				out.Group = g
			}
		}
	} else {
		// Not a line the model can give: make it a mismatch, not a guess.
		out.Quantity = -int64(len(res.Lines))
	}
	return out
}
