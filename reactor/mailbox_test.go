package reactor

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every posted function runs exactly once, whether its loop is asleep
// (the post wakes it), busy in traffic callbacks (it runs the mailbox as
// it leaves them), or posting to itself, and with posts racing the
// loop's leaving: the mailbox strands nothing.
func TestMailboxRunsEverything(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, func(c *Config) { c.Loops = 2; c.MailboxSize = 1 << 20 })
	const posters, each = 4, 5000
	var ran [posters * each]atomic.Int32
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// Traffic keeps the loops in and out of callbacks meanwhile.
	var traffic sync.WaitGroup
	traffic.Add(1)
	go func() {
		defer traffic.Done()
		nc, br := dial(t, s)
		for {
			select {
			case <-stop:
				return
			default:
			}
			send(t, nc, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
			if r := read(t, br, "GET"); r.status != 200 {
				t.Errorf("traffic: %+v", r)
				return
			}
		}
	}()
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := p*each + i
				fn := func() { ran[k].Add(1) }
				if k%3 == 0 {
					// Posted by a loop, to the other one (or itself).
					inner := fn
					fn = func() {
						if !s.Loops()[(k/3)%2].Post(inner) {
							t.Errorf("post %d from a loop refused", k)
						}
					}
				}
				if !s.Loops()[k%2].Post(fn) {
					t.Errorf("post %d refused", k)
				}
				if i%500 == 0 {
					time.Sleep(time.Millisecond) // let the loops fall asleep now and then
				}
			}
		}()
	}
	wg.Wait()
	close(stop) // no traffic would rescue a stranded function now
	traffic.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		missing := 0
		for i := range ran {
			if ran[i].Load() == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d posted functions never ran", missing)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range ran {
		if n := ran[i].Load(); n != 1 {
			t.Fatalf("function %d ran %d times", i, n)
		}
	}
	posts, _ := strconv.Atoi(counter(set, "saltus_reactor_mailbox_posts_total"))
	wakes, _ := strconv.Atoi(counter(set, "saltus_reactor_mailbox_wakes_total"))
	if posts < posters*each || wakes > posts {
		t.Errorf("posts %d, wakes %d", posts, wakes)
	}
}
