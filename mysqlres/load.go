package mysqlres

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"
)

// The throttle's signals from the pod's MySQL: the server's
// Threads_running, and a replica's lag read from a heartbeat row the
// primary writes (pt-heartbeat's way, gh-ost's and Vitess's too). Both
// are read on connections outside the buyers' admission, each statement
// tagged, and neither holds a connection longer than its statement.

// tagThrottle is the caller tag of the throttle's reads and the heartbeat.
const tagThrottle = "throttle"

const (
	threadsRunningSQL = "/* conn_tag='throttle' */ SHOW GLOBAL STATUS LIKE 'Threads_running'"
	beatSQL           = "/* conn_tag='throttle' */ INSERT INTO tandem_heartbeat (id, beat_at) VALUES (1, UTC_TIMESTAMP(6))" +
		" ON DUPLICATE KEY UPDATE beat_at = VALUES(beat_at)"
	lagSQL = "/* conn_tag='throttle' */ SELECT TIMESTAMPDIFF(MICROSECOND, beat_at, UTC_TIMESTAMP(6)) FROM tandem_heartbeat WHERE id = 1"
)

// AdmissionObserver records buyer flows' waits in the store's admission;
// throttle's Throttle satisfies it. ObserveAdmission must not block.
type AdmissionObserver interface {
	ObserveAdmission(d time.Duration)
}

// ThreadsRunning returns the server's Threads_running: how many
// statements it runs at this moment, this one included.
func (s *Store) ThreadsRunning(ctx context.Context) (int, error) {
	var n int
	err := s.withConn(ctx, tagThrottle, func(conn *sql.Conn) error {
		var name, value string
		if err := conn.QueryRowContext(ctx, threadsRunningSQL).Scan(&name, &value); err != nil {
			return err
		}
		v, err := strconv.Atoi(value)
		n = v
		return err
	})
	return n, err
}

// Beat writes the heartbeat row with the primary's time; a replica's Lag
// is how old the row it has is.
func (s *Store) Beat(ctx context.Context) error {
	return s.withConn(ctx, tagThrottle, func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, beatSQL)
		return err
	})
}

// Replica reads the lag of a replica of a pod's MySQL.
type Replica struct {
	db *sql.DB
}

// OpenReplica opens a replica of the pod's database at dsn (go-sql-driver
// format), on one connection.
func OpenReplica(dsn string) (*Replica, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("mysqlres: replica: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(time.Minute)
	return &Replica{db: db}, nil
}

// Lag returns how far the replica is behind the primary: the age of the
// heartbeat row it holds, on its clock (the primary's and the replica's
// clocks are assumed in step, as pt-heartbeat assumes). A replica without
// the row yet has an error.
func (r *Replica) Lag(ctx context.Context) (time.Duration, error) {
	var us sql.NullInt64
	if err := r.db.QueryRowContext(ctx, lagSQL).Scan(&us); err != nil {
		return 0, translate(tagThrottle, err)
	}
	return time.Duration(max(us.Int64, 0)) * time.Microsecond, nil
}

// Close closes the replica's connection.
func (r *Replica) Close() error { return r.db.Close() }
