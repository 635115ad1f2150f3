package mysqlx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Statements of the migration runner. The table name is checked by
// validIdentifier before it is put into a statement.
const (
	migrateLockSQL    = "/* conn_tag='migrate' */ SELECT GET_LOCK(CONCAT('tandem_mig_', SHA1(CONCAT(DATABASE(), '.', ?))), ?)"
	migrateUnlockSQL  = "/* conn_tag='migrate' */ SELECT RELEASE_LOCK(CONCAT('tandem_mig_', SHA1(CONCAT(DATABASE(), '.', ?))))"
	migrateCreateSQL  = "/* conn_tag='migrate' */ CREATE TABLE IF NOT EXISTS %s (name VARCHAR(255) NOT NULL PRIMARY KEY, applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
	migrateAppliedSQL = "/* conn_tag='migrate' */ SELECT name FROM %s"
	migrateRecordSQL  = "/* conn_tag='migrate' */ INSERT INTO %s (name, applied_at) VALUES (?, ?)"
	migrateStmtPrefix = "/* conn_tag='migrate' */ "
	createDBSQL       = "/* conn_tag='migrate' */ CREATE DATABASE IF NOT EXISTS `%s`"
)

// migrateLockTimeout bounds how long a migration waits for another process
// that migrates the same database.
const migrateLockTimeout = 60 * time.Second

// Migrate creates cfg's database when it is missing and the user may, then
// applies the migrations under dir of fsys, recorded in table. Idempotent;
// safe from many processes at once. The caller translates its error.
func Migrate(ctx context.Context, cfg mysql.Config, fsys fs.FS, dir, table string) error {
	if cfg.DBName != "" {
		if err := createDatabase(ctx, cfg); err != nil {
			return err
		}
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("migrate: open %s: %w", cfg.DBName, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return err
	}
	return applyMigrations(ctx, db, sub, table)
}

// createDatabase creates cfg's database if it is missing. A user without
// the right to create databases gets no error here: the database may exist,
// and the migration that follows says clearly if it does not.
func createDatabase(ctx context.Context, cfg mysql.Config) error {
	name := cfg.DBName
	cfg.DBName = ""
	root, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("migrate: open: %w", err)
	}
	defer root.Close()
	_, err = root.ExecContext(ctx, fmt.Sprintf(createDBSQL, strings.ReplaceAll(name, "`", "``")))
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == 1044 || me.Number == 1045 || me.Number == 1227) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrate: create database %s: %w", name, err)
	}
	return nil
}

// applyMigrations applies, in name order, every *.sql file of fsys not yet recorded in table (created if missing), one statement per file, recording each.
//
// MySQL commits DDL implicitly, so a file holds exactly one statement and is
// recorded right after it ran; a crash in between reruns that one statement,
// which is why migration statements are written to be rerunnable (IF NOT
// EXISTS; an ADD COLUMN or ADD KEY that finds its column or index is
// taken as applied). Two processes migrating the same database at once serialise on a
// named lock (GET_LOCK) scoped to the database and table, held by one
// connection for the whole run.
func applyMigrations(ctx context.Context, db *sql.DB, fsys fs.FS, table string) (err error) {
	if !validIdentifier(table) {
		return fmt.Errorf("migrate: invalid migrations table name %q", table)
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return fmt.Errorf("migrate: list migrations: %w", err)
	}
	sort.Strings(names)

	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close()

	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, migrateLockSQL, table, int(migrateLockTimeout/time.Second)).Scan(&got); err != nil {
		return fmt.Errorf("migrate: take migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("migrate: another process holds the migration lock of %s for more than %s", table, migrateLockTimeout)
	}
	defer func() {
		// Released on a fresh context: the caller's may be done, and a lock
		// left behind would block the next migration until this
		// connection closes.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var released sql.NullInt64
		if uerr := conn.QueryRowContext(uctx, migrateUnlockSQL, table).Scan(&released); uerr != nil && err == nil {
			err = fmt.Errorf("migrate: release migration lock: %w", uerr)
		}
	}()

	if _, err := conn.ExecContext(ctx, fmt.Sprintf(migrateCreateSQL, table)); err != nil {
		return fmt.Errorf("migrate: create %s: %w", table, err)
	}
	applied, err := appliedMigrations(ctx, conn, table)
	if err != nil {
		return err
	}
	for _, name := range names {
		if applied[name] {
			continue
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("migrate: read %s: %w", name, err)
		}
		stmt, err := migrationStatement(string(body))
		if err != nil {
			return fmt.Errorf("migrate: %s: %w", name, err)
		}
		if _, err := conn.ExecContext(ctx, migrateStmtPrefix+stmt); err != nil && !rerun(err) {
			return fmt.Errorf("migrate: apply %s: %w", name, err)
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(migrateRecordSQL, table), path.Base(name), time.Now().UTC()); err != nil {
			return fmt.Errorf("migrate: record %s: %w", name, err)
		}
	}
	return nil
}

// rerun reports whether a migration statement failed only because an
// earlier run applied it and crashed before recording it: a column or an
// index it adds is there (MySQL 8.0 has no ADD COLUMN IF NOT EXISTS nor
// ADD KEY IF NOT EXISTS). The migration is then recorded as applied.
func rerun(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDupFieldName || me.Number == errDupKeyName)
}

// errDupFieldName is ER_DUP_FIELDNAME, "Duplicate column name";
// errDupKeyName ER_DUP_KEYNAME, "Duplicate key name".
const (
	errDupFieldName = 1060
	errDupKeyName   = 1061
)

func appliedMigrations(ctx context.Context, conn *sql.Conn, table string) (map[string]bool, error) {
	rows, err := conn.QueryContext(ctx, fmt.Sprintf(migrateAppliedSQL, table))
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", table, err)
	}
	defer rows.Close()
	applied := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("migrate: read %s: %w", table, err)
		}
		applied[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", table, err)
	}
	return applied, nil
}

// migrationStatement returns the one statement of a migration file, without
// its "--" comment lines and trailing semicolon.
func migrationStatement(body string) (string, error) {
	var lines []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		lines = append(lines, line)
	}
	stmt := strings.TrimSpace(strings.Join(lines, "\n"))
	stmt = strings.TrimSpace(strings.TrimRight(stmt, "; \t\n"))
	if stmt == "" {
		return "", errors.New("no statement")
	}
	if strings.Contains(stmt, ";") {
		return "", errors.New("more than one statement (MySQL commits DDL implicitly: one statement per file)")
	}
	return stmt, nil
}

// validIdentifier reports whether s is a plain SQL identifier that needs no
// quoting.
func validIdentifier(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
