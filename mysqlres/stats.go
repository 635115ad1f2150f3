package mysqlres

import (
	"context"
	"sync"

	"go.uber.org/zap"
)

// analyzeSQL refreshes the optimizer's statistics of the tables a bulk
// copy fills. ANALYZE TABLE samples a few pages of each index
// (innodb_stats_persistent_sample_pages): milliseconds, no row lock. It
// no longer makes new statements wait for running ones to close the table
// (MariaDB 10.11, checked here with a statement running for seconds;
// MySQL since 8.0.24).
const analyzeSQL = "/* conn_tag='rebuild' */ ANALYZE TABLE reservations, reservation_lines, unit_pool"

// analyzeMinHolds is the bulk writes that first make a refresh worth it.
const analyzeMinHolds = 10_000

// bulkStats refreshes the statistics of the reservation tables while bulk
// writes (the backfill's copy, a rebuild) fill them. InnoDB recomputes a
// table's statistics in the background once a tenth of it changed, but at
// most every 10 seconds and only after the change: a backfill that fills
// empty tables with 200,000 holds in 3 s leaves the optimizer believing
// them empty through the audit that follows (MariaDB then read every held
// line of the pod for each page of one shop). As pt-online-schema-change
// analyzes before its swap, the store refreshes them as it copies, each
// time the holds written since the last refresh reach those written
// before it (at least analyzeMinHolds): a few refreshes a copy, and the
// statistics never off by more than a factor of two.
type bulkStats struct {
	mu       sync.Mutex
	written  int64
	analyzed int64
}

// wroteInBulk counts holds written in bulk, and refreshes the statistics
// when they are due. A refresh that fails is logged, not returned: the
// holds are written, and the background recomputation follows.
func (s *Store) wroteInBulk(ctx context.Context, holds int) {
	b := &s.bulk
	b.mu.Lock()
	b.written += int64(holds)
	due := b.written-b.analyzed >= max(analyzeMinHolds, b.analyzed)
	if due {
		b.analyzed = b.written
	}
	b.mu.Unlock()
	if !due {
		return
	}
	if err := s.analyze(ctx); err != nil {
		s.Logger.Warn("mysql: refresh of the reservation tables' statistics failed", zap.Error(err))
	}
}

// analyze runs analyzeSQL and reads its report (a row per table).
func (s *Store) analyze(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, analyzeSQL)
	if err != nil {
		return translate(tagRebuild, err)
	}
	defer rows.Close()
	for rows.Next() {
	}
	return translate(tagRebuild, rows.Err())
}
