package reactor

import (
	"math/bits"
	"sync"
)

// Request bodies are the largest per-request allocation (a 4 KB chat is a
// 4 KB copy out of gnet's buffer). Bodies up to maxPooledBody come from
// size-class pools and go back through Request.ReleaseBody, which the
// serving path calls once the request can no longer be read or resent;
// bodies never released are garbage collected like any other.

const (
	minPooledShift = 10 // 1 KiB: smaller bodies are not worth a pool
	maxPooledShift = 16 // 64 KiB
	maxPooledBody  = 1 << maxPooledShift
)

// bodyPools[i] holds *[]byte of capacity 1<<(minPooledShift+i).
var bodyPools [maxPooledShift - minPooledShift + 1]sync.Pool

// bodyClass returns the pool index for a body of n bytes, or -1 when n is
// too large to pool.
func bodyClass(n int) int {
	if n > maxPooledBody {
		return -1
	}
	if n <= 1<<minPooledShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minPooledShift
}

// newBody returns a buffer of n bytes for r.Body, pooled when n allows, and
// remembers it in r for ReleaseBody.
func (r *Request) newBody(n int) []byte {
	c := bodyClass(n)
	if c < 0 {
		return make([]byte, n)
	}
	bp, _ := bodyPools[c].Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 1<<(minPooledShift+c))
		bp = &b
	}
	r.pooled = bp
	return (*bp)[:n]
}

// ReleaseBody gives a pooled body back for
// reuse and sets Body to nil. The
// caller promises that nothing reads the old Body any more, nor will:
// every copy of the slice is dead (the request answered, no retry left).
// A body that was not pooled is simply dropped. Calling it twice is
// harmless. Any goroutine, once the request is no longer shared.
func (r *Request) ReleaseBody() {
	r.Body = nil
	if bp := r.pooled; bp != nil {
		r.pooled = nil
		bodyPools[bodyClass(cap(*bp))].Put(bp)
	}
}
