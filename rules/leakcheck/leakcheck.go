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
	// Its idle workers: gnet's EventLoop.Enroll (reactor.DialUpstream)
	// runs on that pool; a worker waits for its next task until the pool
	// purges it.
	goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*goWorker).run.func1"),
	// fasthttp's idle-connection cleaner sleeps IdleConnTimeout before it
	// sees no connections left (upstream/backend/doc.go).
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	// fasthttp's Date-header clock: one goroutine per process, started by
	// the first fasthttp.Server, never stopped (header.go updateServerDate).
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	// zmq4's PUB writer (v0.17.0): NewPub starts it and the socket's
	// Close never stops it (pubMWriter.Close is not called), so each PUB
	// socket leaves one goroutine parked on a condition variable
	// (upstream/kvevents' Publisher: one per simulator).
	goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
}

// Main runs the tests, then fails the binary if a goroutine other than
// the Ignored ones (and extra) is still running.
func Main(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, append(append([]goleak.Option{}, Ignored...), extra...)...)
}
