package redisres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

var _ tandem.ShadowStore = (*Store)(nil)

// Default settings of a new Store.
const (
	DefaultRetention = 24 * time.Hour
)

// openTimeout bounds the script loading of Open.
const openTimeout = 10 * time.Second

// Cart states as the scripts write them.
const (
	statusReserved = string(tandem.StatusReserved)
	statusClaimed  = string(tandem.StatusClaimed)
	// statusClaiming marks a hold whose claim is recording the sale in the
	// ledger: still held, never expired by the reaper.
	statusClaiming = "claiming"
	statusReleased = string(tandem.StatusReleased)
	statusExpired  = string(tandem.StatusExpired)
)

// Store is the legacy Redis reservation engine of one pod. It implements
// tandem.ShadowStore, and the optional tandem.ShopLister and
// tandem.HoldCounter, and claims through the pod's ledger. NewStore returns
// it with every setting at its default; change the exported fields before
// Open. Safe for concurrent use once open.
type Store struct {
	// Prefix starts every key of the store, e.g. "tandem:pod-a:". It must
	// not hold braces: the shop is the keys' hash tag.
	Prefix string
	// Retention is how long terminal (claimed, released, expired) carts are
	// remembered for retries, above zero.
	Retention time.Duration
	// Now returns the current time; every expiry decision uses it.
	Now func() time.Time
	// Logger receives the store's warnings (claim and stock-count windows).
	Logger *zap.Logger
	// Registerer receives the store's metrics at Open; nil means no metrics.
	Registerer prometheus.Registerer

	rdb     redis.UniversalClient
	ledger  tandem.Ledger
	scripts scripts
	metrics *metrics

	closeOnce sync.Once
}

// NewStore returns a Store over rdb that claims and counts stock through
// ledger, with the default settings. Call Open before use.
func NewStore(rdb redis.UniversalClient, ledger tandem.Ledger) *Store {
	return &Store{
		Retention: DefaultRetention,
		Now:       time.Now,
		Logger:    zap.NewNop(),
		rdb:       rdb,
		ledger:    ledger,
		scripts:   newScripts(),
	}
}

// validate refuses settings the engine cannot run with.
func (s *Store) validate() error {
	switch {
	case strings.ContainsAny(s.Prefix, "{}"):
		return tandem.Errorf(tandem.EINVALID, "redis key prefix %q must not hold braces (the shop is the hash tag)", s.Prefix)
	case s.Retention <= 0:
		return tandem.Errorf(tandem.EINVALID, "redis retention must be above zero, got %s", s.Retention)
	case s.Now == nil || s.Logger == nil:
		return tandem.Errorf(tandem.EINVALID, "redis store needs a clock and a logger (NewStore sets both)")
	}
	return nil
}

// Open registers the metrics and loads the Lua scripts into Redis within
// ctx and at most 10s. It returns EINVALID for settings the engine cannot
// run with and EUNAVAILABLE when Redis cannot be reached.
func (s *Store) Open(ctx context.Context) error {
	if err := s.validate(); err != nil {
		return err
	}
	if s.Registerer != nil && s.metrics == nil {
		m, err := newMetrics(s.Registerer)
		if err != nil {
			return fmt.Errorf("redisres: register metrics: %w", err)
		}
		s.metrics = m
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	for _, sc := range s.scripts.all() {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return translate("load scripts", err)
		}
	}
	return nil
}

// Close unregisters the store's metrics, so that another store may take
// its place on the same registry. The Redis client belongs to the caller and
// stays open. Safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.metrics != nil && s.Registerer != nil {
			s.Registerer.Unregister(s.metrics.opDuration)
			s.Registerer.Unregister(s.metrics.expired)
			s.Registerer.Unregister(s.metrics.windows)
		}
	})
	return nil
}

// Name returns tandem.StoreRedis.
func (s *Store) Name() string { return tandem.StoreRedis }

// Keys.

func (s *Store) shopTag(shopID int64) string {
	return s.Prefix + "{" + strconv.FormatInt(shopID, 10) + "}:"
}

func (s *Store) cartKey(shopID int64, token string) string {
	return s.shopTag(shopID) + "cart:" + token
}

func (s *Store) expiryKey(shopID int64) string { return s.shopTag(shopID) + "expiry" }

func (s *Store) positionsKey(shopID int64) string { return s.shopTag(shopID) + "positions" }

func (s *Store) shopsKey() string { return s.Prefix + "shops" }

func (s *Store) counterKey(k tandem.Key) string {
	return s.shopTag(k.ShopID) + "item:" + strconv.FormatInt(k.ItemID, 10) + ":" + strconv.FormatInt(k.GroupID, 10)
}

func positionMember(k tandem.Key) string {
	return strconv.FormatInt(k.ItemID, 10) + ":" + strconv.FormatInt(k.GroupID, 10)
}

func parsePositionMember(shopID int64, m string) (tandem.Key, error) {
	item, group, ok := strings.Cut(m, ":")
	if !ok {
		return tandem.Key{}, fmt.Errorf("redisres: bad position %q", m)
	}
	i, err := strconv.ParseInt(item, 10, 64)
	if err != nil {
		return tandem.Key{}, fmt.Errorf("redisres: bad position %q: %w", m, err)
	}
	g, err := strconv.ParseInt(group, 10, 64)
	if err != nil {
		return tandem.Key{}, fmt.Errorf("redisres: bad position %q: %w", m, err)
	}
	return tandem.Key{ShopID: shopID, ItemID: i, GroupID: g}, nil
}

// encodeLines writes lines as the scripts store them: "item:qty:group,...".
func encodeLines(lines []tandem.Line) string {
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(l.ItemID, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(l.Quantity, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(l.GroupID, 10))
	}
	return b.String()
}

func decodeLines(s string) ([]tandem.Line, error) {
	if s == "" {
		return nil, errors.New("redisres: cart without lines")
	}
	parts := strings.Split(s, ",")
	lines := make([]tandem.Line, 0, len(parts))
	for _, p := range parts {
		f := strings.Split(p, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("redisres: bad cart line %q", p)
		}
		var n [3]int64
		for i := range f {
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redisres: bad cart line %q: %w", p, err)
			}
			n[i] = v
		}
		lines = append(lines, tandem.Line{ItemID: n[0], Quantity: n[1], GroupID: n[2]})
	}
	return lines, nil
}

// shape identifies a cart by its items and quantities only; a hold written
// by Rebuild (which knows no group preferences) is matched by it on retry.
func shape(items [][2]int64) string {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(strconv.FormatInt(it[0], 10))
		b.WriteByte('x')
		b.WriteString(strconv.FormatInt(it[1], 10))
	}
	return b.String()
}

func requestShape(req tandem.ReserveRequest) string {
	items := make([][2]int64, len(req.Lines))
	for i, l := range req.Lines {
		items[i] = [2]int64{l.ItemID, l.Quantity}
	}
	return shape(items)
}

func linesShape(lines []tandem.Line) string {
	items := make([][2]int64, len(lines))
	for i, l := range lines {
		items[i] = [2]int64{l.ItemID, l.Quantity}
	}
	return shape(items)
}

func parseMillis(s string) (time.Time, error) {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("redisres: bad expiry %q: %w", s, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// Errors.

// translate turns a Redis client error into the contract's codes: anything
// that means Redis cannot answer now (network, timeouts, a closed client, a
// server that is loading, read-only or in a failover) is EUNAVAILABLE; the
// rest is an internal error wrapped with %w.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	var te *tandem.Error
	if errors.As(err, &te) {
		return err
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "redis is unavailable (%s)", op), err)
	}
	return fmt.Errorf("redisres: %s: %w", op, err)
}

// isNil reports a missing key or field.
func isNil(err error) bool { return errors.Is(err, redis.Nil) }

func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "MOVED", "ASK"} {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
	}
	return false
}
