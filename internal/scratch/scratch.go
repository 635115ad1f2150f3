// Package scratch makes throwaway MySQL databases and Redis key prefixes on
// real servers and removes them: what the tests (through testenv) and the
// bench both need, without the testing package.
package scratch

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// Name returns prefix followed by 12 random hex digits.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Database is a database created on a server for one run; Drop removes it.
type Database struct {
	// Name is the database's name.
	Name string
	// DSN reaches the database, with parseTime set.
	DSN string
	// Addr is the server's address.
	Addr string

	root *sql.DB
}

// CreateDatabase creates the database name through rootDSN, a user that may
// create databases (any database the DSN selects is ignored).
func CreateDatabase(ctx context.Context, rootDSN, name string) (*Database, error) {
	cfg, err := mysql.ParseDSN(rootDSN)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	cfg.DBName = ""
	root, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		root.Close()
		return nil, fmt.Errorf("MariaDB/MySQL on %s: create database %s: %w", cfg.Addr, name, err)
	}
	cfg.DBName = name
	cfg.ParseTime = true
	return &Database{Name: name, DSN: cfg.FormatDSN(), Addr: cfg.Addr, root: root}, nil
}

// Sibling creates another scratch database on the same server, named after
// this one with suffix; dropping it stays the caller's job.
func (d *Database) Sibling(ctx context.Context, suffix string) (*Database, error) {
	cfg, err := mysql.ParseDSN(d.DSN)
	if err != nil {
		return nil, err
	}
	cfg.DBName = ""
	return CreateDatabase(ctx, cfg.FormatDSN(), d.Name+suffix)
}

// Drop drops the database and closes the connection that created it.
func (d *Database) Drop(ctx context.Context) error {
	defer d.root.Close()
	if _, err := d.root.ExecContext(ctx, "DROP DATABASE IF EXISTS "+d.Name); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

// DeletePrefix deletes every key that starts with prefix, on every master
// of a cluster (SCAN only walks the node it is sent to). A prefix without
// a trailing colon is refused, so that a typo cannot delete a key space.
func DeletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	if !strings.HasSuffix(prefix, ":") {
		return fmt.Errorf("refusing to delete keys under prefix %q (want a trailing colon)", prefix)
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				// One key at a time: keys of one SCAN page live in many slots.
				if err := m.Unlink(ctx, iter.Val()).Err(); err != nil {
					return err
				}
			}
			return iter.Err()
		})
	}
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}
