package dualwrite_test

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
	"github.com/tandemhq/tandem/dualwrite"
)

// heldStore is an instantStore whose Reserve waits for release after
// saying, on entered, that it started.
type heldStore struct {
	*instantStore
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.instantStore.Reserve(ctx, req)
}

// TestShadowWorkIsLabelled: the shadow job's goroutine carries the pprof
// label tandem_work=shadow, so that a CPU profile of the server tells the
// shadow's cost from the buyers'.
func TestShadowWorkIsLabelled(t *testing.T) {
	shadow := &heldStore{instantStore: &instantStore{name: tandem.StoreMySQL}, entered: make(chan struct{}), release: make(chan struct{})}
	shops, _ := tandem.ParseShopSet([]string{"1"})
	r := dualwrite.NewRouter("pod-l", shops, &instantStore{name: tandem.StoreRedis}, shadow)
	m := &modes{}
	m.set(tandem.ModeShadow)
	r.Modes, r.Kill = m, &kill{}
	cmp := comparator.New(comparator.Config{})
	r.Recorder = cmp
	if err := cmp.Open(); err != nil {
		t.Fatal(err)
	}
	defer cmp.Close()
	if err := r.Open(); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req := tandem.ReserveRequest{CartToken: "c-1", ShopID: 1, Lines: []tandem.LineRequest{{ItemID: 1, Quantity: 1, GroupIDs: []int64{1}}}}
	if _, err := r.Reserve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	<-shadow.entered // the shadow job is in the store now
	var dump bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&dump, 1); err != nil {
		t.Fatal(err)
	}
	close(shadow.release)
	r.Wait()
	if !strings.Contains(dump.String(), `"tandem_work":"shadow"`) {
		t.Errorf("got no goroutine labelled tandem_work=shadow while the shadow job ran; goroutines:\n%s", dump.String())
	}
}
