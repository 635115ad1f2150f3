package faulttest_test

import (
	"io"
	"log"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestMain quiets the MySQL driver's logger: these tests cut connections on
// purpose, and the driver logs every one it finds broken.
func TestMain(m *testing.M) {
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(m.Run())
}
