package sandbox_test

import (
	"testing"

	"github.com/fencelab/fencelab/engine/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
