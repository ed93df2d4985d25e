package loopblock

import (
	"sync"
	"time"

	"loopblock/dep"
)

type loop struct {
	mu sync.Mutex
	ch chan int
}

func sleeps() { time.Sleep(time.Millisecond) } // want sleeps:"blocks: time.Sleep"

// onLoop handles a read. Loop only.
func (l *loop) onLoop() { // want onLoop:"blocks: locks a sync.Mutex"
	l.mu.Lock() // want `R2: onLoop runs on an event loop and locks a sync.Mutex`
	l.mu.Unlock()
	sleeps()    // want `R2: onLoop runs on an event loop and calls sleeps, which time.Sleep`
	dep.Locks() // want `R2: onLoop runs on an event loop and calls Locks, which calls deeper, which locks a sync.Mutex`
	l.ch <- 1   // want `R2: onLoop runs on an event loop and sends on a channel`
	select {
	case l.ch <- 2:
	default:
	}
	_ = dep.Free()
	dep.Justified()
	go func() { l.mu.Lock() }() // a literal runs elsewhere: not followed
}

// OnTraffic is a gnet callback: it runs on a loop whatever its doc says.
func (l *loop) OnTraffic() { // want OnTraffic:"blocks: ranges over a channel"
	for range l.ch { // want `R2: OnTraffic runs on an event loop and ranges over a channel`
	}
}

// offLoop may block: nothing says it runs on a loop. Any goroutine.
func (l *loop) offLoop() { // want offLoop:"blocks: locks a sync.Mutex"
	l.mu.Lock()
	l.mu.Unlock()
	<-l.ch
}

// allowedOnLoop blocks once, with a reason. Loop only.
func (l *loop) allowedOnLoop() {
	//saltus:allow R2 an example: buffered and never full
	l.ch <- 3
}

type loops struct{ poster func(func()) }

func (loops) Post(i int, fn func()) bool { return true }

// handOff posts work to a loop; it runs anywhere itself.
func handOff(l loops, once *sync.Once) {
	l.Post(0, func() { sleeps() })   // want `R2: a function posted to a loop runs on an event loop and calls sleeps, which time.Sleep`
	l.Post(0, sleeps)                // want `R2: sleeps is posted to a loop and time.Sleep`
	l.poster(func() { dep.Locks() }) // want `R2: a function posted to a loop runs on an event loop and calls Locks`
	once.Do(func() { sleeps() })     // not a post: Do is a method, not a poster
	l.Post(1, func() { _ = dep.Free() })
}
