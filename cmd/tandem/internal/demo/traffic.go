package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/adminclient"
)

// The demo's catalogue: in one shop of each pod, items 1..8 and a hot item
// for the flash sale, each in groups 1 and 2.
var (
	demoItems  = []int64{1, 2, 3, 4, 5, 6, 7, 8}
	demoGroups = []int64{1, 2}
)

const demoHotItem = 999

// Traffic plays checkouts across the pods through the checkout API, as
// buyers do: reserve, then claim, release or abandon; restocks; and a
// flash sale on one hot item. Being a client of the API, it is counted by
// the buyer metrics (tandem_http_*{api="checkout"}), and so by the
// Grafana buyer panels and the buyer alerts, like any checkout service.
type Traffic struct {
	client *checkoutClient
	shops  []int64
	log    *zap.Logger

	seq      atomic.Int64
	cancel   context.CancelFunc
	loops    sync.WaitGroup
	inflight sync.WaitGroup
}

// StartTraffic seeds the stock of one shop per pod of m, a running
// server, through its checkout API, starts the buyers, and records the
// first flash sale for a rehearsal through its admin API. Stop ends them.
func StartTraffic(m *server.Main) *Traffic {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Traffic{client: newCheckoutClient(m.CheckoutAddr, m.APIToken), shops: firstShops(m.Config.Pods),
		log: m.Logger.Named("demo-traffic"), cancel: cancel}
	t.seed(ctx)
	t.every(ctx, 33*time.Millisecond, t.steady) // about 30 checkouts a second
	t.every(ctx, 5*time.Second, t.restock)
	captureFlashSale(ctx, m, m.Config.Pods[0].Name)
	t.every(ctx, 30*time.Second, t.flashSale)
	return t
}

// Stop ends the buyers and waits for them; safe on nil.
func (t *Traffic) Stop() {
	if t == nil {
		return
	}
	t.cancel()
	t.loops.Wait()
	t.inflight.Wait()
	t.client.close()
}

// firstShops returns the lowest shop id below 10000 of each pod.
func firstShops(pods []server.PodConfig) []int64 {
	var shops []int64
	for _, p := range pods {
		set, _ := tandem.ParseShopSet(p.Shops)
		for s := int64(1); s < 10000; s++ {
			if set.Contains(s) {
				shops = append(shops, s)
				break
			}
		}
	}
	return shops
}

// keys calls f with every position of the demo's catalogue.
func (t *Traffic) keys(f func(tandem.Key)) {
	items := append([]int64{demoHotItem}, demoItems...)
	for _, shop := range t.shops {
		for _, item := range items {
			for _, g := range demoGroups {
				f(tandem.Key{ShopID: shop, ItemID: item, GroupID: g})
			}
		}
	}
}

func (t *Traffic) seed(ctx context.Context) {
	t.keys(func(k tandem.Key) {
		if err := t.client.setOnHand(ctx, k, 40); err != nil {
			t.log.Warn("seed stock", zap.Error(err))
		}
	})
}

// restock adds 40 to what runs low.
func (t *Traffic) restock(ctx context.Context) {
	t.keys(func(k tandem.Key) {
		inv, err := t.client.inventory(ctx, k)
		if err == nil && inv.Available < 10 {
			_ = t.client.setOnHand(ctx, k, inv.OnHand+40)
		}
	})
}

// steady is one buyer's cart of one to three items in a random shop.
func (t *Traffic) steady(ctx context.Context) {
	shop := t.shops[rand.IntN(len(t.shops))]
	var lines []tandem.LineRequest
	for _, i := range rand.Perm(len(demoItems))[:1+rand.IntN(3)] {
		lines = append(lines, tandem.LineRequest{ItemID: demoItems[i], Quantity: int64(1 + rand.IntN(2)), GroupIDs: demoGroups})
	}
	t.checkout(ctx, shop, lines)
}

// flashSale is 60 buyers at once on the hot item of the first pod's shop.
func (t *Traffic) flashSale(ctx context.Context) {
	var wg sync.WaitGroup
	for range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.checkout(ctx, t.shops[0], []tandem.LineRequest{{ItemID: demoHotItem, Quantity: 1, GroupIDs: demoGroups[:1]}})
		}()
	}
	wg.Wait()
	t.log.Info("flash sale played", zap.Int64("shop", t.shops[0]), zap.Int64("item", demoHotItem))
}

// checkout reserves a cart, then after a while pays (claim, 65%), gives up
// (release, 20%) or walks away (15%: the reaper expires the hold).
func (t *Traffic) checkout(ctx context.Context, shop int64, lines []tandem.LineRequest) {
	token := fmt.Sprintf("demo-%d", t.seq.Add(1))
	if err := t.client.reserve(ctx, reserveRequest{CartToken: token, ShopID: shop, TTLSeconds: 15, Lines: lines}); err != nil {
		return // sold out, or stopping
	}
	t.inflight.Add(1)
	go func() {
		defer t.inflight.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(200+rand.IntN(2000)) * time.Millisecond):
		}
		switch r := rand.IntN(100); {
		case r < 65:
			_ = t.client.claim(ctx, shop, token)
		case r < 85:
			_ = t.client.release(ctx, shop, token)
		}
	}()
}

// every runs f every interval until stop.
func (t *Traffic) every(ctx context.Context, interval time.Duration, f func(ctx context.Context)) {
	t.loops.Add(1)
	go func() {
		defer t.loops.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				f(ctx)
			}
		}
	}()
}

// captureFor covers the demo's first flash sale (30 s after the start).
const captureFor = 40 * time.Second

// captureFlashSale records pod's traffic over the demo's first flash sale
// (POST /admin/pods/{pod}/capture), so that docs/operations.md's rehearsal has a
// capture to replay.
func captureFlashSale(ctx context.Context, m *server.Main, pod string) {
	admin := &adminclient.Client{Base: "http://" + m.AdminAddr, Token: m.AdminToken, Actor: "demo",
		HTTP: &http.Client{Timeout: 10 * time.Second}}
	var info struct {
		ID string `json:"id"`
	}
	err := admin.Call(ctx, http.MethodPost, "/admin/pods/"+url.PathEscape(pod)+"/capture", nil,
		map[string]string{"reason": "demo: record the flash sale for a rehearsal", "duration": captureFor.String()}, &info)
	if err != nil {
		m.Logger.Warn("demo capture", zap.Error(err))
		return
	}
	m.Logger.Info("recording the flash sale for a rehearsal",
		zap.String("capture", info.ID), zap.String("pod", pod), zap.Duration("for", captureFor),
		zap.String("then", "tandemctl capture get "+info.ID+" -o flash.tcap && tandem replay --capture flash.tcap --speed 1"))
}
