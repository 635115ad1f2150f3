package mysqlx

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/tandemhq/tandem"
)

// Statements of the schema check behind readiness. The migrations table's
// name is checked by validIdentifier before it is put into a statement.
const (
	schemaTablesSQL = "/* conn_tag='ready' */ SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
)

// createTable finds the table each migration creates.
var createTable = regexp.MustCompile(`(?i)CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?` + "`?" + `([A-Za-z_][A-Za-z0-9_]*)`)

// expectedSchema returns the migrations of dir in fsys (by file name) and
// the tables they create, with the migrations table itself.
func expectedSchema(fsys fs.FS, dir, table string) (migrations, tables []string, err error) {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return nil, nil, err
	}
	tables = []string{table}
	for _, n := range names {
		migrations = append(migrations, path.Base(n))
		body, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, nil, err
		}
		if m := createTable.FindStringSubmatch(string(body)); m != nil {
			tables = append(tables, m[1])
		}
	}
	sort.Strings(migrations)
	return migrations, tables, nil
}

// CheckSchema reports, as EUNAVAILABLE naming what is missing, whether db
// holds every migration of dir and every table they create: readiness
// means the schema this binary needs is there, not only that the server
// answers a ping.
func CheckSchema(ctx context.Context, db *sql.DB, fsys fs.FS, dir, table string) error {
	if !validIdentifier(table) {
		return fmt.Errorf("invalid migrations table name %q", table)
	}
	migrations, tables, err := expectedSchema(fsys, dir, table)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	rows, err := db.QueryContext(ctx, schemaTablesSQL)
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("list tables: %w", err)
		}
		have[strings.ToLower(name)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	var missing []string
	for _, t := range tables {
		if !have[strings.ToLower(t)] {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return tandem.Errorf(tandem.EUNAVAILABLE, "schema: missing table %s (run tandem migrate)", strings.Join(missing, ", "))
	}
	applied := map[string]bool{}
	rows, err = db.QueryContext(ctx, "/* conn_tag='ready' */ SELECT name FROM "+table)
	if err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return fmt.Errorf("read %s: %w", table, err)
		}
		applied[name] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	var pending []string
	for _, m := range migrations {
		if !applied[m] {
			pending = append(pending, m)
		}
	}
	if len(pending) > 0 {
		return tandem.Errorf(tandem.EUNAVAILABLE, "schema: migration %s not applied (run tandem migrate)", strings.Join(pending, ", "))
	}
	return nil
}
