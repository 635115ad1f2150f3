// Package redisres is the legacy reservation engine: a quantity counter per
// (shop, item, group) in Redis and a hold per cart with its expiry, as the
// checkout path has run it for years, made as sound as two systems allow.
//
// # Keys
//
// Every key of a shop carries the shop as a hash tag, so that a cart, the
// counters it draws from and the shop's expiry set live in one Redis Cluster
// slot and one Lua script can change them atomically:
//
//	<Prefix>{<shop>}:item:<item>:<group>  hash: available, held, on_hand
//	<Prefix>{<shop>}:cart:<token>         hash: status, fp, expires_at_ms, lines
//	<Prefix>{<shop>}:expiry               zset: active carts by expiry (ms)
//	<Prefix>{<shop>}:positions            set:  "item:group" of every counter
//	<Prefix>shops                         set:  every shop with counters
//
// The untagged shops set is written outside the scripts (it lives in another
// slot); the reaper, ListCounters and the audit use it to find the shops.
//
// On a Redis Cluster every script and every MULTI/EXEC touches one shop's
// keys, hence one slot; reads that span shops are pipelined per master.
// The shops set is the one key outside every shop's slot. It is written
// before the counters it announces, so a shop with counters is listed;
// a failover that loses the newest writes of its master can drop a shop
// from it, which the drift audit reports (that shop's positions read as
// missing) and a resync writes back. A master that cannot answer fails
// the reaper for its own shops only.
// Terminal carts (claimed, released, expired) are kept for Retention so that
// retries get the same answer, then Redis drops them.
//
// # Atomicity
//
// Reserve, release, the claim's Redis step, expiry and the counter update
// of SetOnHand are Lua scripts, loaded once by Open and run with EVALSHA
// (EVAL when the server lost them). Each is all-or-nothing and checks the
// cart's state itself, so a script that go-redis sends twice (it retries a
// command after a read timeout) answers the second time as a replay and
// never holds, releases or expires twice.
//
// # The claim window
//
// A claim writes two systems that cannot commit together: (1) the ledger
// deducts the cart in MySQL (exactly once per cart, by the ledger's claim
// record), then (2) a script marks the cart claimed and removes its hold
// from held and from the on_hand copy. If the process dies between (1) and
// (2), Redis keeps a hold for units already sold. A claim retried while the
// hold is active completes step (2) (the ledger answers "already deducted"
// and changes nothing); after its expiry a retry answers gone. If
// nobody retries and the hold expires instead, the reaper returns sold
// units to available: Redis over-counts by the cart's quantities until a
// stock count (SetOnHand) or a resync, and the drift audit, comparing Redis
// with the ledger, flags the position. When a reaper or a release frees the
// hold between the claim's check and step (2), step (2) takes the sold
// units back from available (see claimSrc) and logs it: the sale stands,
// and a release that raced the claim may have answered "released" for a
// cart that ends claimed.
//
// SetOnHand has the same shape: it checks held, writes the ledger, then a
// script sets available = on_hand - held with held read again. A reserve
// that lands between the check and the script can leave available below
// zero (reserves are refused, CheckInvariants reports it) until the next
// stock count; if the script fails after the ledger write, Redis keeps the
// old count until the next one. Either way the ledger stays right and the
// drift audit flags the position.
//
// A counter missing in Redis counts as zero available: a lost key undersells
// and never oversells.
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

var (
	_ tandem.ReservationStore = (*Store)(nil)
	_ tandem.Resyncer         = (*Store)(nil)
)

// Default settings of a new Store.
const (
	DefaultTTL       = 10 * time.Minute
	DefaultRetention = 24 * time.Hour
)

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
// tandem.ReservationStore and tandem.Resyncer and claims through the pod's
// ledger. Set the exported fields before Open; safe for concurrent use
// afterwards.
type Store struct {
	// Prefix starts every key of the store, e.g. "tandem:pod-a:". It must
	// not hold braces: the shop is the keys' hash tag.
	Prefix string
	// DefaultTTL is the hold time of a request without a TTL.
	DefaultTTL time.Duration
	// Retention is how long terminal (claimed, released, expired) carts are
	// remembered for retries.
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
		DefaultTTL: DefaultTTL,
		Retention:  DefaultRetention,
		Now:        time.Now,
		Logger:     zap.NewNop(),
		rdb:        rdb,
		ledger:     ledger,
		scripts:    newScripts(),
	}
}

// Open loads the Lua scripts into Redis and registers the metrics. It
// returns EUNAVAILABLE when Redis cannot be reached.
func (s *Store) Open() error {
	if strings.ContainsAny(s.Prefix, "{}") {
		return tandem.Errorf(tandem.EINVALID, "redis key prefix %q must not hold braces (the shop is the hash tag)", s.Prefix)
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = zap.NewNop()
	}
	if s.DefaultTTL <= 0 {
		s.DefaultTTL = DefaultTTL
	}
	if s.Retention <= 0 {
		s.Retention = DefaultRetention
	}
	if s.Registerer != nil && s.metrics == nil {
		m, err := newMetrics(s.Registerer)
		if err != nil {
			return fmt.Errorf("redisres: register metrics: %w", err)
		}
		s.metrics = m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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

// Metrics.

type metrics struct {
	opDuration *prometheus.HistogramVec
	expired    prometheus.Counter
	windows    *prometheus.CounterVec
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tandem",
			Subsystem: "redis",
			Name:      "op_duration_seconds",
			Help:      "Duration of Redis engine operations by operation and result code.",
			Buckets:   []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"op", "result"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem",
			Subsystem: "redis",
			Name:      "holds_expired_total",
			Help:      "Holds returned to stock by the reaper of this instance.",
		}),
		windows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem",
			Subsystem: "redis",
			Name:      "two_system_window_total",
			Help:      "Times a claim or stock count hit the window between the ledger write and the Redis script.",
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.opDuration, m.expired, m.windows} {
		if err := r.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records an operation's duration under its result code; use as
// `defer s.observe("reserve", time.Now(), &err)`.
func (s *Store) observe(op string, start time.Time, err *error) {
	if s.metrics == nil {
		return
	}
	result := "ok"
	if *err != nil {
		result = tandem.ErrorCode(*err)
	}
	s.metrics.opDuration.WithLabelValues(op, result).Observe(time.Since(start).Seconds())
}

func (s *Store) countWindow(op string) {
	if s.metrics != nil {
		s.metrics.windows.WithLabelValues(op).Inc()
	}
}
