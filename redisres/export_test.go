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
