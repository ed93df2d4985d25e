// Package dep is another package of the module: its blocking functions
// carry a fact the loop package's analysis reads.
package dep

import "sync"

var mu sync.Mutex

// Locks blocks, two calls deep.
func Locks() { deeper() } // want Locks:"blocks: calls deeper, which locks a sync.Mutex"

func deeper() { // want deeper:"blocks: locks a sync.Mutex"
	mu.Lock()
	defer mu.Unlock()
}

// Free does not block.
func Free() int { return 1 }

// Justified blocks only where it says it never runs on a loop.
func Justified() {
	//saltus:allow R2 an example: documented never to run on a loop
	mu.Lock()
	mu.Unlock()
}
