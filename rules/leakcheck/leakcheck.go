// Package leakcheck holds the goroutine-leak check every test binary of
// saltus runs (rule 1: every goroutine is joined on shutdown), with the
// few third-party goroutines that are not ours to join. Tests only.
//
// # Concurrency
//
// Main is called once, from a test binary's TestMain.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// Ignored are goroutines that outlive every test by their libraries'
// design, not by a leak of ours.
var Ignored = []goleak.Option{
	// gnet's package-level goroutine pool (ants), started by its init in
	// every process that imports gnet.
	goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
	goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	// fasthttp's idle-connection cleaner sleeps IdleConnTimeout before it
	// sees no connections left (shard/backend/doc.go).
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	// fasthttp's Date-header clock: one goroutine per process, started by
	// the first fasthttp.Server, never stopped (header.go updateServerDate).
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
}

// Main runs the tests, then fails the binary if a goroutine other than
// the Ignored ones (and extra) is still running.
func Main(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, append(append([]goleak.Option{}, Ignored...), extra...)...)
}
