package server

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/redisres"
)

// Timeouts of every Redis client of serve: a store that does not answer
// must fail the request fast (503), never hang it.
const (
	redisDialTimeout = time.Second
	redisIOTimeout   = 500 * time.Millisecond
	redisPoolTimeout = time.Second
	// redisPoolSize caps the connections of one client to one Redis node
	// (a cluster client keeps a pool per node).
	redisPoolSize = 128
)

// newRedisClient returns the client of a single Redis or, with cluster, of
// a Redis Cluster reached through its seed nodes. Both are
// redis.UniversalClient, which is what the stores take.
func newRedisClient(addr string, addrs []string, cluster bool, db int) redis.UniversalClient {
	if cluster {
		return redisres.FollowFailovers(redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, DialTimeout: redisDialTimeout, ReadTimeout: redisIOTimeout,
			WriteTimeout: redisIOTimeout, PoolTimeout: redisPoolTimeout, MaxRetries: 1, PoolSize: redisPoolSize,
			// MOVED/ASK and a failover's connection errors are followed
			// this many times, each within the timeouts above.
			MaxRedirects: 3,
			// The slot map is also re-read as soon as a node stops
			// answering (FollowFailovers); this bounds how stale it gets
			// otherwise.
			ClusterStateReloadInterval: 10 * time.Second,
		}))
	}
	return redis.NewClient(redisOptions(addr, db))
}

func redisOptions(addr string, db int) *redis.Options {
	return &redis.Options{
		Addr: addr, DB: db, DialTimeout: redisDialTimeout, ReadTimeout: redisIOTimeout,
		WriteTimeout: redisIOTimeout, PoolTimeout: redisPoolTimeout, MaxRetries: 1, PoolSize: redisPoolSize,
	}
}
