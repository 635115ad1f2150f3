package mysqlres

import (
	"context"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/mysqlx"
)

// CheckSchema reports whether the pod's database holds the schema this
// binary needs: every migration applied and every table present. Returns
// EUNAVAILABLE naming what is missing, or when the database cannot be
// reached.
func (s *Store) CheckSchema(ctx context.Context) error {
	if s.db == nil {
		return tandem.Errorf(tandem.EUNAVAILABLE, "mysql store is not open")
	}
	return translate("ready", mysqlx.CheckSchema(ctx, s.db, migrationFS, "migrations", MigrationsTable))
}
