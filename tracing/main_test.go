package tracing

import (
	"testing"

	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}
