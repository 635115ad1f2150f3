package redisres

import (
	"context"
	"net"

	"github.com/redis/go-redis/v9"
)

// FollowFailovers makes a Redis Cluster client read the cluster's slot map
// again whenever a command fails because a node cannot be reached, and
// returns it. go-redis re-reads the map on MOVED and ASK, and otherwise
// only every ClusterStateReloadInterval (a minute by default): after a
// master dies, commands for its slots would keep going to the dead node
// long after its replica took over. With this, the first failed command
// after the promotion points the client at the new master.
func FollowFailovers(cc *redis.ClusterClient) *redis.ClusterClient {
	cc.AddHook(failoverHook{cc: cc})
	return cc
}

type failoverHook struct{ cc *redis.ClusterClient }

func (h failoverHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			h.cc.ReloadState(ctx)
		}
		return conn, err
	}
}

func (h failoverHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h failoverHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

// check reloads the slot map (asynchronously, coalesced by go-redis) after
// an error that means a node is gone or the cluster is changing.
func (h failoverHook) check(ctx context.Context, err error) {
	if err != nil && !isNil(err) && unavailable(err) && ctx.Err() == nil {
		h.cc.ReloadState(ctx)
	}
}
