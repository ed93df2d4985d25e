// Package reactor stands in for saltus's reactor: where loops start,
// locking a thread is allowed.
package reactor

import (
	"runtime"

	"github.com/panjf2000/gnet/v2"
)

func start() {
	runtime.LockOSThread()
	_ = gnet.WithLockOSThread(true)
}
