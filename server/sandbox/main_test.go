package sandbox_test

import (
	"testing"

	"github.com/fencelab/fencelab/server/postgres/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.ExportURL = true // the example connects as a program would, to $DATABASE_URL
	pgtest.Main(m)
}
