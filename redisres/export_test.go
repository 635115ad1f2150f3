package redisres

import (
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
)

// ReserveScript returns the reserve script with the keys and arguments that
// Reserve would send for req now, so that a test can send it twice the way
// a client retrying after a read timeout does.
func ReserveScript(s *Store, req tandem.ReserveRequest) (*redis.Script, []string, []any) {
	keys, args := s.reserveCall(req, s.Now())
	return s.scripts.reserve, keys, args
}

// IsSetOnHand reports whether cmd runs the set-on-hand script (EVALSHA, or
// EVAL of its source).
func IsSetOnHand(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1] == redis.NewScript(setOnHandSrc).Hash()
	case "eval":
		return args[1] == setOnHandSrc
	}
	return false
}
