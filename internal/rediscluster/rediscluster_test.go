package rediscluster_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tandemhq/tandem/internal/rediscluster"
	"github.com/tandemhq/tandem/internal/testenv"
)

func TestCluster(t *testing.T) {
	testenv.RequireIntegration(t)
	c := rediscluster.MustStart(t, rediscluster.Options{})
	ctx := context.Background()
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 {
		t.Fatalf("masters: got %d, want 3", len(masters))
	}
	rdb, prefix := c.MustClient(t)
	// Keys spread over every master; SCAN per master finds them all.
	for i := 0; i < 100; i++ {
		if err := rdb.Set(ctx, fmt.Sprintf("%sk%d", prefix, i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	perMaster := map[string]bool{}
	for i := 0; i < 100; i++ {
		m, err := c.MasterOf(ctx, rdb, fmt.Sprintf("%sk%d", prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		perMaster[m] = true
	}
	if len(perMaster) != 3 {
		t.Errorf("keys on %d masters, want 3", len(perMaster))
	}
	if err := rediscluster.DeletePrefix(ctx, rdb, prefix); err != nil {
		t.Fatal(err)
	}
	n, err := rdb.Exists(ctx, prefix+"k1", prefix+"k2").Result()
	if err == nil && n != 0 {
		t.Errorf("keys left after DeletePrefix: %d", n)
	}
}
