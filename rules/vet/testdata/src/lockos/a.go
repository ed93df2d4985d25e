package lockos

import (
	"runtime"

	"github.com/panjf2000/gnet/v2"
)

func bad() {
	runtime.LockOSThread()          // want `R6: runtime.LockOSThread outside package reactor`
	_ = gnet.WithLockOSThread(true) // want `R6: gnet.WithLockOSThread outside package reactor`
}

func allowed() {
	runtime.UnlockOSThread()
	//saltus:allow R6 an example of an exception with its reason
	runtime.LockOSThread()
}
