package scratch

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// MarkerTable is the table that marks a database as scratch: a tool that
// wipes and rewrites a database (tandem replay) works only on one that
// carries it.
const MarkerTable = "tandem_scratch_marker"

// Statements of the scratch marker.
const (
	markTableSQL = "CREATE TABLE IF NOT EXISTS " + MarkerTable + " (created_at DATETIME(6) NOT NULL, note VARCHAR(255) NOT NULL) ENGINE=InnoDB"
	markRowSQL   = "INSERT INTO " + MarkerTable + " (created_at, note) VALUES (?, ?)"
	markedSQL    = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '" + MarkerTable + "'"
	tablesSQL    = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name <> '" + MarkerTable + "'"
)

// Mark marks the database db is connected to as scratch, saying why.
func Mark(ctx context.Context, db *sql.DB, note string) error {
	if _, err := db.ExecContext(ctx, markTableSQL); err != nil {
		return fmt.Errorf("create the scratch marker: %w", err)
	}
	if _, err := db.ExecContext(ctx, markRowSQL, time.Now().UTC(), note); err != nil {
		return fmt.Errorf("write the scratch marker: %w", err)
	}
	return nil
}

// Marked reports whether the database db is connected to carries the
// scratch marker.
func Marked(ctx context.Context, db *sql.DB) (bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, markedSQL).Scan(&n); err != nil {
		return false, fmt.Errorf("look for the scratch marker: %w", err)
	}
	return n > 0, nil
}

// Wipe drops every table of a marked database but the marker; it refuses
// a database without the marker.
func Wipe(ctx context.Context, db *sql.DB) error {
	ok, err := Marked(ctx, db)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("refusing to wipe a database without the scratch marker (table %s)", MarkerTable)
	}
	rows, err := db.QueryContext(ctx, tablesSQL)
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+t+"`"); err != nil {
			return fmt.Errorf("drop %s: %w", t, err)
		}
	}
	return nil
}
