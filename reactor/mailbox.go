package reactor

import (
	"context"
	"fmt"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/queue"
)

// Each loop's mailbox: Post and Poster queue functions on a lock-free
// queue of the loop's own, and a loop runs what is queued when it leaves
// any of its traffic callbacks (OnTraffic, of a client or an upstream
// connection). A sender wakes the loop with gnet's Execute (an eventfd
// write, and a context switch when the loop sleeps) only when the loop is
// not inside such a callback, and at most once until the wake-up has run.
// Under load a loop is mostly inside callbacks, so most cross-loop
// messages cost a queue node and no system call: gnet's Execute on every
// message (eventfd write, wake-up, an extra epoll round) made the hop to a
// prompt's owner shard and back cost ~2.4 µs per request here.
//
// No message is stranded: a sender links its message, then reads inCB; the
// loop clears inCB, then reads the queue's length (all sequentially
// consistent atomics). Either the sender sees inCB clear and wakes the
// loop, or the loop sees the message and runs it.

// A task's Param is what to run: a mailFn (Post's: counted against
// MailboxSize) or a func() (Poster's). A func is pointer-shaped, so
// neither conversion to any allocates, and the count is taken off in
// leave rather than by a wrapping closure.
type mailFn func()

// enqueue queues fn (a mailFn or a func()) on ls and makes sure the loop
// will run it (unless the server is stopping: callers check s.stopped
// first).
func (s *Server) enqueue(ls *Loop, fn any) {
	t := queue.GetTask()
	t.Param = fn
	ls.mbox.Enqueue(t)
	s.m.mailboxPosts.Inc()
	if ls.inCB.Load() || !ls.wakeQueued.CompareAndSwap(false, true) {
		return // the loop runs it before it leaves its callback, or a wake-up is queued
	}
	if s.execute(ls, ls.wake) {
		s.m.mailboxWakes.Inc()
	} else {
		// Stopping: the loop may never run it, as a task gnet had queued
		// when its engine stopped. It is queued all the same (it cannot
		// be taken back), so it is not refused.
		ls.wakeQueued.Store(false)
	}
}

// enter marks the loop as inside a callback. Loop only.
func (ls *Loop) enter() { ls.inCB.Store(true) }

// leave runs the mailbox until it is empty with inCB clear. Loop only.
func (ls *Loop) leave() {
	for {
		for t := ls.mbox.Dequeue(); t != nil; t = ls.mbox.Dequeue() {
			p := t.Param
			queue.PutTask(t)
			switch fn := p.(type) {
			case mailFn:
				ls.mail.Add(-1)
				fn()
			case func():
				fn()
			default:
				panic(fmt.Sprintf("BUG: reactor: mailbox task %T", p))
			}
		}
		ls.inCB.Store(false)
		if ls.mbox.IsEmpty() {
			return
		}
		ls.inCB.Store(true)
	}
}

// newWake returns the function gnet's Execute runs to wake ls: it runs the
// mailbox like a callback's end. Allowing the next wake-up first means a
// message queued after this drain looked is either seen by it or wakes
// the loop again.
func newWake(ls *Loop) gnet.RunnableFunc {
	return func(context.Context) error {
		ls.wakeQueued.Store(false)
		ls.enter()
		ls.leave()
		return nil
	}
}
