package queue

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

const ms = int64(time.Millisecond)

func newQueue(tb testing.TB, mutate func(*Config)) *Queue[string] {
	tb.Helper()
	cfg := DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	q, err := New[string](cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

// push queues item at priority for tenant with weight and cost 1.
func push(tb testing.TB, q *Queue[string], item string, priority int, tenant string) uint64 {
	tb.Helper()
	id, ok := q.Push(item, priority, tenant, 1, 1, 0)
	if !ok {
		tb.Fatalf("Push(%s) refused", item)
	}
	if err := q.check(); err != nil {
		tb.Fatal(err)
	}
	return id
}

// drain pops everything and returns the items in order.
func drain(tb testing.TB, q *Queue[string]) []string {
	tb.Helper()
	var got []string
	for {
		item, _, ok := q.Pop(0)
		if !ok {
			break
		}
		if err := q.check(); err != nil {
			tb.Fatal(err)
		}
		got = append(got, item)
	}
	return got
}

// TestSizes keeps Config.MaxEntries's memory figures true.
func TestSizes(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(entry[struct{}]{}); n != 64 {
		t.Errorf("entry is %d bytes plus the item, Config says 64", n)
	}
	if n := unsafe.Sizeof(flow{}); n != 96 {
		t.Errorf("tenant record is %d bytes, Config says 96", n)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field  string
		mutate func(*Config)
	}{
		{"MaxEntries", func(c *Config) { c.MaxEntries = 0 }},
		{"MaxEntries", func(c *Config) { c.MaxEntries = 1<<30 + 1 }},
		{"MaxWait", func(c *Config) { c.MaxWait = 0 }},
		{"MaxExpirePerCall", func(c *Config) { c.MaxExpirePerCall = 0 }},
	} {
		cfg := DefaultConfig()
		tc.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate = %v, want an error naming %s", err, tc.field)
		}
		if _, err := New[int](cfg); err == nil {
			t.Errorf("New accepted an invalid %s", tc.field)
		}
	}
}

func TestOrder(t *testing.T) {
	t.Parallel()
	type p struct {
		item     string
		priority int
		tenant   string
	}
	for _, tc := range []struct {
		name   string
		pushes []p
		want   string
	}{
		{"empty", nil, ""},
		{"priority first, lower first", []p{{"n1", 0, "a"}, {"l", 5, "a"}, {"h", -1, "a"}, {"n2", 0, "b"}, {"hh", -3, "b"}, {"l1", 1, "c"}},
			"hh h n1 n2 l1 l"},
		{"clamped priorities share the end class", []p{{"a", -5000, "x"}, {"b", -1000, "x"}, {"c", -999, "x"}, {"d", 1 << 40, "x"}, {"e", 1000, "x"}},
			"a b c d e"},
		{"FIFO inside a tenant", []p{{"a1", 0, "a"}, {"a2", 0, "a"}, {"a3", 0, "a"}, {"a4", 0, "a"}}, "a1 a2 a3 a4"},
		{"tenants alternate, arrival breaks ties", []p{{"a1", 0, "a"}, {"a2", 0, "a"}, {"a3", 0, "a"}, {"b1", 0, "b"}, {"b2", 0, "b"}, {"c1", 0, "c"}},
			"a1 b1 c1 a2 b2 a3"},
		{"fair share is per priority class", []p{{"a1", 0, "a"}, {"a2", 0, "a"}, {"b1", 1, "b"}, {"a3", 1, "a"}, {"b2", 1, "b"}},
			"a1 a2 b1 a3 b2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, nil)
			for _, x := range tc.pushes {
				push(t, q, x.item, x.priority, x.tenant)
			}
			if got := strings.Join(drain(t, q), " "); got != tc.want {
				t.Errorf("order %q, want %q", got, tc.want)
			}
		})
	}
}

// closedLoop runs tenants whose clients re-send as soon as a request is
// popped (zero service time: the queue is the only thing that orders
// them) and returns the tenant of each of pops pops. It checks SFQ's
// fairness bound at every step.
func closedLoop(t *testing.T, clients map[string]int, weights map[string]float64, pops int) []string {
	t.Helper()
	q := newQueue(t, nil)
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range clients {
			if !yield(k) {
				return
			}
		}
	})
	// Clients arrive one per tenant in turn, so no tenant is first by
	// arrival for long.
	for i := 0; ; i++ {
		pushed := false
		for _, name := range names {
			if i < clients[name] {
				if _, ok := q.Push(name, 0, name, weights[name], 1, 0); !ok {
					t.Fatal("full")
				}
				pushed = true
			}
		}
		if !pushed {
			break
		}
	}
	served := map[string]float64{}
	var order []string
	for range pops {
		name, _, ok := q.Pop(0)
		if !ok {
			t.Fatal("empty")
		}
		order = append(order, name)
		served[name]++
		if _, ok := q.Push(name, 0, name, weights[name], 1, 0); !ok {
			t.Fatal("full")
		}
		// Every tenant is backlogged throughout: the weighted services
		// differ by at most cost/w_i + cost/w_j.
		for _, a := range names {
			for _, b := range names {
				wa, wb := weightOr1(weights[a]), weightOr1(weights[b])
				if d := served[a]/wa - served[b]/wb; d > 1/wa+1/wb+1e-9 {
					t.Fatalf("after %d pops %s has %v, %s %v: beyond the SFQ bound", len(order), a, served[a], b, served[b])
				}
			}
		}
	}
	if err := q.check(); err != nil {
		t.Fatal(err)
	}
	return order
}

func weightOr1(w float64) float64 {
	if w == 0 {
		return 1
	}
	return w
}

func count(order []string, name string) int {
	n := 0
	for _, o := range order {
		if o == name {
			n++
		}
	}
	return n
}

func TestFairShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		clients map[string]int
		weights map[string]float64
		want    map[string]int // pops of 1,200
	}{
		{"44 clients against 4 share 1:1", map[string]int{"big": 44, "small": 4}, nil,
			map[string]int{"big": 600, "small": 600}},
		{"weights 2:1 share 2:1", map[string]int{"gold": 10, "free": 10}, map[string]float64{"gold": 2},
			map[string]int{"gold": 800, "free": 400}},
		{"three tenants, one weighted", map[string]int{"a": 30, "b": 3, "c": 1}, map[string]float64{"c": 4},
			map[string]int{"a": 200, "b": 200, "c": 800}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			order := closedLoop(t, tc.clients, tc.weights, 1200)
			for name, want := range tc.want {
				if got := count(order, name); got < want-2 || got > want+2 {
					t.Errorf("%s served %d of 1200, want %d±2", name, got, want)
				}
			}
		})
	}
}

// TestFairShareInterleaves checks the 44-against-4 case pop by pop: while
// both are backlogged neither is served twice in a row.
func TestFairShareInterleaves(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	for i := range 44 {
		push(t, q, fmt.Sprint("big", i), 0, "big")
	}
	for i := range 4 {
		push(t, q, fmt.Sprint("small", i), 0, "small")
	}
	got := drain(t, q)
	for i := 0; i < 8; i += 2 {
		if !strings.HasPrefix(got[i], "big") || !strings.HasPrefix(got[i+1], "small") {
			t.Fatalf("first 8 pops %v, want big and small alternating", got[:8])
		}
	}
	// FIFO inside each tenant.
	for i, item := range got[8:] {
		if want := fmt.Sprint("big", i+4); item != want {
			t.Fatalf("pop %d = %s, want %s", i+8, item, want)
		}
	}
}

// TestNoBankedCredit: a tenant idle while another is served starts at the
// class's virtual time when it comes back, not ahead of the other by all
// the turns it missed.
func TestNoBankedCredit(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	push(t, q, "a0", 0, "a")
	for i := range 110 {
		push(t, q, fmt.Sprint("b", i), 0, "b")
	}
	// a0 and b0 interleave, then b alone for 99 more pops.
	for range 101 {
		q.Pop(0)
	}
	for i := range 10 {
		push(t, q, fmt.Sprint("a", i+1), 0, "a")
	}
	got := drain(t, q)
	run := 1
	for i := 1; i < 18; i++ {
		if got[i][0] == got[i-1][0] {
			run++
		} else {
			run = 1
		}
		if run > 1 {
			t.Fatalf("after a's return: %v, want a and b alternating", got[:18])
		}
	}
}

// TestDebtRemembered: a tenant whose request was just dispatched and that
// sends again at once waits its turn (its start tag is its finish tag, not
// the class's virtual time).
func TestDebtRemembered(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	push(t, q, "a1", 0, "a")
	for _, b := range []string{"b1", "b2", "b3"} {
		push(t, q, b, 0, "b")
	}
	var got []string
	item, _, _ := q.Pop(0)
	got = append(got, item)
	push(t, q, "a2", 0, "a") // a owes a1's span: its start is 1
	got = append(got, drain(t, q)...)
	// Forgetting a's debt would give a1 b1 a2 b2 b3.
	if want := "a1 b1 b2 a2 b3"; strings.Join(got, " ") != want {
		t.Errorf("order %q, want %q", strings.Join(got, " "), want)
	}
}

// TestUnservedNotCharged: entries removed before their dispatch cost their
// tenant nothing.
func TestUnservedNotCharged(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	var ids []uint64
	for i := range 5 {
		ids = append(ids, push(t, q, fmt.Sprint("a", i), 0, "a"))
	}
	for i := range 5 {
		push(t, q, fmt.Sprint("b", i), 0, "b")
	}
	for _, id := range ids[:4] {
		if !q.Remove(id) {
			t.Fatal("Remove = false")
		}
	}
	if got := strings.Join(drain(t, q)[:3], " "); got != "a4 b0 b1" {
		t.Errorf("first pops %q, want a4 first (start tag 0)", got)
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	q := newQueue(t, func(c *Config) { c.MaxEntries = 3 })
	for i := range 3 {
		push(t, q, fmt.Sprint(i), 0, "a")
	}
	if id, ok := q.Push("x", -5, "b", 1, 1, 0); ok || id != 0 {
		t.Fatalf("Push on a full queue = %d, %v; want 0, false", id, ok)
	}
	if q.Len() != 3 {
		t.Fatalf("Len %d after a refused push, want 3", q.Len())
	}
	q.Pop(0)
	push(t, q, "y", 0, "b")
	s := q.Stats()
	if s.Pushed != 4 || s.Refused != 1 || s.Popped != 1 {
		t.Fatalf("stats %+v", s)
	}
	if err := q.check(); err != nil {
		t.Fatal(err)
	}
}

// TestTenantRecordsBounded: tenants coming and going never keep more than
// MaxEntries records, and a drained queue keeps none.
func TestTenantRecordsBounded(t *testing.T) {
	t.Parallel()
	q := newQueue(t, func(c *Config) { c.MaxEntries = 4 })
	push(t, q, "bulk", 0, "bulk")
	next := 0
	for range 100 {
		// One-shot tenants fill the queue; each one dispatched leaves a
		// record owing its span while "bulk" keeps the class busy.
		for q.Len() < 4 {
			push(t, q, "x", 0, fmt.Sprint("t", next))
			next++
		}
		for range 3 {
			if item, _, _ := q.Pop(0); item == "bulk" {
				push(t, q, "bulk", 0, "bulk")
			}
		}
		if s := q.Stats(); s.Tenants > 4 {
			t.Fatalf("%d tenant records, MaxEntries 4", s.Tenants)
		}
		if err := q.check(); err != nil {
			t.Fatal(err)
		}
	}
	if q.Stats().Evicted == 0 {
		t.Error("no record evicted: the test does not reach the bound")
	}
	drain(t, q)
	if s := q.Stats(); s.Tenants != 0 || len(q.classIdx) != 0 {
		t.Errorf("drained queue keeps %d tenant records, %d classes", s.Tenants, len(q.classIdx))
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	a := push(t, q, "a", 0, "t")
	b := push(t, q, "b", 0, "t")
	c := push(t, q, "c", 1, "u")
	for _, tc := range []struct {
		id   uint64
		want bool
	}{
		{b, true},            // middle of a tenant's FIFO
		{b, false},           // already removed
		{0, false},           // never an id
		{1<<32 | 999, false}, // no such slot
		{c, true},            // last of its class: the class goes
	} {
		if got := q.Remove(tc.id); got != tc.want {
			t.Errorf("Remove(%#x) = %v, want %v", tc.id, got, tc.want)
		}
		if err := q.check(); err != nil {
			t.Fatal(err)
		}
	}
	if q.Len() != 1 || q.LenBand(Low) != 0 || q.LenBand(Normal) != 1 {
		t.Fatalf("Len %d, bands %v", q.Len(), q.bands)
	}
	q.Pop(0)
	if q.Remove(a) {
		t.Error("Remove of a popped entry = true")
	}
	// The slot is reused: the old id must not reach the new entry.
	d := push(t, q, "d", 0, "t")
	if d == a || q.Remove(a) {
		t.Errorf("stale id %#x removed the entry %#x now in its slot", a, d)
	}
	if !q.Remove(d) || q.Len() != 0 || q.Stats().Removed != 3 {
		t.Errorf("Remove(d): Len %d, stats %+v", q.Len(), q.Stats())
	}
}

func TestExpire(t *testing.T) {
	t.Parallel()
	q := newQueue(t, func(c *Config) { c.MaxWait = 10 * time.Millisecond; c.MaxExpirePerCall = 2 })
	for i, at := range []int64{0, 1, 2, 5, 10} {
		if _, ok := q.Push(fmt.Sprint("e", i), i%2, fmt.Sprint("t", i%3), 1, 1, at*ms); !ok {
			t.Fatal("full")
		}
	}
	for _, tc := range []struct {
		now  int64
		want string
	}{
		{10 * ms, ""}, // e0 waited exactly MaxWait: not past it
		{10*ms + 1, "e0"},
		{16 * ms, "e1 e2"}, // e3 is due too, but 2 per call
		{16 * ms, "e3"},
		{16 * ms, ""}, // e4 waited 6 ms
		{3 * ms, ""},  // a clock going back expires nothing
	} {
		got := q.Expire(tc.now, nil)
		if strings.Join(got, " ") != tc.want {
			t.Errorf("Expire(%d ms) = %v, want %q", tc.now/ms, got, tc.want)
		}
		if err := q.check(); err != nil {
			t.Fatal(err)
		}
	}
	// dst is appended to.
	if got := q.Expire(23*ms, []string{"x"}); strings.Join(got, " ") != "x e4" {
		t.Errorf("Expire appended %v", got)
	}
	if s := q.Stats(); s.Expired != 5 || q.Len() != 0 || s.Tenants != 0 {
		t.Errorf("stats %+v, Len %d", s, q.Len())
	}
}

func TestWaited(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	q.Push("a", 0, "t", 1, 1, 100*ms)
	q.Push("b", 0, "t", 1, 1, 50*ms) // the clock went back: taken as 100 ms
	if _, w, _ := q.Pop(130 * ms); w != 30*time.Millisecond {
		t.Errorf("waited %v, want 30ms", w)
	}
	if _, w, _ := q.Pop(120 * ms); w != 30*time.Millisecond {
		t.Errorf("waited %v, want 30ms (now never goes back)", w)
	}
	if _, _, ok := q.Pop(0); ok {
		t.Error("Pop on an empty queue: ok")
	}
}

func TestOldest(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	if d := q.Oldest(5 * ms); d != 0 {
		t.Errorf("empty: Oldest = %v", d)
	}
	idA, _ := q.Push("a", 5, "t", 1, 1, 100*ms)
	q.Push("b", -5, "u", 1, 1, 110*ms)
	for _, tc := range []struct {
		now  int64
		want time.Duration
	}{
		{130 * ms, 30 * time.Millisecond},
		{90 * ms, 10 * time.Millisecond}, // a now before the latest seen (110 ms) counts as it; Oldest does not move the clock
	} {
		if d := q.Oldest(tc.now); d != tc.want {
			t.Errorf("Oldest(%d ms) = %v, want %v", tc.now/ms, d, tc.want)
		}
	}
	// Pop takes b (priority -5), the younger: a is still the oldest.
	if item, _, _ := q.Pop(140 * ms); item != "b" {
		t.Fatalf("popped %s", item)
	}
	if d := q.Oldest(140 * ms); d != 40*time.Millisecond {
		t.Errorf("after Pop: Oldest = %v, want 40ms", d)
	}
	q.Remove(idA)
	if d := q.Oldest(150 * ms); d != 0 {
		t.Errorf("emptied: Oldest = %v", d)
	}
}

func TestBands(t *testing.T) {
	t.Parallel()
	for p, want := range map[int]Band{-5000: High, -1: High, 0: Normal, 1: Low, 1 << 40: Low} {
		if got := BandOf(p); got != want {
			t.Errorf("BandOf(%d) = %v, want %v", p, got, want)
		}
	}
	if s := fmt.Sprint(High, Normal, Low); s != "high normal low" {
		t.Errorf("band names %q", s)
	}
	q := newQueue(t, nil)
	for _, p := range []int{-2, -1, 0, 0, 0, 3} {
		push(t, q, "x", p, "t")
	}
	if q.LenBand(High) != 2 || q.LenBand(Normal) != 3 || q.LenBand(Low) != 1 || q.LenBand(NumBands) != 0 {
		t.Errorf("LenBand = %v", q.bands)
	}
}

func TestSpanClamps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ cost, weight, want float64 }{
		{1, 1, 1},
		{0, 0, 1},
		{-3, -1, 1},
		{math.NaN(), math.NaN(), 1},
		{2, 4, 0.5},
		{math.Inf(1), 1, maxCost},
		{1, math.Inf(1), 1 / maxWeight},
		{1e-9, 1, minCost},
		{1, 1e-9, 1 / minWeight},
	} {
		if got := span(tc.cost, tc.weight); got != tc.want {
			t.Errorf("span(%v, %v) = %v, want %v", tc.cost, tc.weight, got, tc.want)
		}
	}
}

// TestItemReleased: a popped, removed or expired entry's slot keeps no
// reference to the caller's item.
func TestItemReleased(t *testing.T) {
	t.Parallel()
	q, _ := New[*int](DefaultConfig())
	id, _ := q.Push(new(int), 0, "t", 1, 1, 0)
	q.Push(new(int), 0, "t", 1, 1, 0)
	q.Push(new(int), 0, "t", 1, 1, 0)
	q.Remove(id)
	q.Pop(0)
	q.Expire(int64(time.Hour), nil)
	for i := range q.entries {
		if q.entries[i].item != nil {
			t.Errorf("slot %d still holds its item", i)
		}
	}
}

// TestRequeue: an entry popped and queued again takes its place back,
// ahead of its tenant's later arrivals and in the arrival order of
// Oldest and Expire, waits from its requeue, and costs its tenant
// nothing; a queue that replaces a dropped one (StartSeq) orders the old
// one's tickets before its own arrivals; PushAt places an earlier arrival.
func TestRequeue(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	if _, ok := q.Requeue("x", 0, "t1", Ticket{}, 0); ok {
		t.Fatal("Requeue took a zero Ticket")
	}
	q.Push("a", 0, "t1", 1, 1, 10)
	q.Push("b", 0, "t1", 1, 1, 20)
	q.Push("c", 0, "t2", 1, 1, 30)
	item, _, tk, _ := q.PopTicket(40)
	if item != "a" {
		t.Fatalf("popped %q, want a", item)
	}
	q.Push("d", 0, "t1", 1, 1, 50)
	if _, ok := q.Requeue("a", 0, "t1", tk, 60); !ok {
		t.Fatal("Requeue refused")
	}
	if got := q.Oldest(70); got != 60 {
		t.Errorf("Oldest %v, want 60ns (a's first arrival at 10)", got)
	}
	item, waited, _ := q.Pop(75)
	if item != "a" || waited != 15 {
		t.Errorf("popped %q after %v, want a after 15ns (from its requeue)", item, waited)
	}
	// t1 was charged for a once (its second dispatch), so t2's c comes
	// before t1's b, as if a had been served only once.
	if got := drain(t, q); !slices.Equal(got, []string{"c", "b", "d"}) {
		t.Errorf("then %v, want [c b d]", got)
	}
	if s := q.Stats(); s.Requeued != 1 || s.Pushed != 4 || s.Popped != 5 {
		t.Errorf("stats %+v", s)
	}

	// A ticket of a dropped queue, in the queue made after it.
	old := newQueue(t, nil)
	old.Push("e", 0, "t1", 1, 1, 100)
	_, _, tk, _ = old.PopTicket(110)
	fresh := newQueue(t, nil)
	fresh.StartSeq(old.Seq())
	fresh.Push("f", 0, "t1", 1, 1, 120)
	fresh.Push("g", 0, "t3", 1, 1, 130)
	fresh.Requeue("e", 0, "t1", tk, 140)
	if got := drain(t, fresh); !slices.Equal(got, []string{"e", "g", "f"}) {
		t.Errorf("fresh queue: %v, want [e g f]", got)
	}
	if err := fresh.check(); err != nil {
		t.Error(err)
	}

	// PushAt: an item that arrived before the ones queued goes ahead of
	// them, and waits from its push.
	at := newQueue(t, nil)
	at.Push("h", 0, "t1", 1, 1, 200)
	at.Push("i", 0, "t2", 1, 1, 210)
	at.PushAt("j", 0, "t1", 1, 1, 150, 220)
	if got := at.Oldest(230); got != 80 {
		t.Errorf("Oldest %v, want 80ns (j arrived at 150)", got)
	}
	if item, waited, _ := at.Pop(240); item != "j" || waited != 20 {
		t.Errorf("popped %q after %v, want j after 20ns", item, waited)
	}
	if got := drain(t, at); !slices.Equal(got, []string{"i", "h"}) {
		t.Errorf("then %v, want [i h] (t1 was charged for j)", got)
	}
}

// TestPopPrefer: a preferred entry of the tenant Pop serves goes first,
// within the window; an entry passed maxPassed times goes at its turn; the
// tenants' shares do not move.
func TestPopPrefer(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	for _, it := range []string{"a0", "a1", "a2", "a3", "a4", "a5"} {
		push(t, q, it, 0, "a")
	}
	pop := func(window, maxPassed int, want string) {
		t.Helper()
		got, _, _, ok := q.PopPrefer(0, window, maxPassed, func(s string) bool { return s == want })
		if err := q.check(); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("PopPrefer(%d, %d, %s): empty", window, maxPassed, want)
		}
		if got != want {
			t.Fatalf("PopPrefer(%d, %d, %s) = %s", window, maxPassed, want, got)
		}
	}
	pop(4, 2, "a3") // within the window: taken ahead of a0-a2
	pop(2, 2, "a0") // a4 is past a window of 2: the head
	pop(8, 2, "a5") // a1 and a2 passed twice now
	if got := drain(t, q); !slices.Equal(got, []string{"a1", "a2", "a4"}) {
		t.Fatalf("rest %v", got)
	}
	q = newQueue(t, nil)
	for _, it := range []string{"a0", "a1", "a2"} {
		push(t, q, it, 0, "a")
	}
	pop(4, 1, "a2")
	// a0 and a1 were passed once: at maxPassed 1 they go first.
	got, _, _, _ := q.PopPrefer(0, 4, 1, func(s string) bool { return s == "a1" })
	if got != "a0" {
		t.Fatalf("a passed entry at its turn: got %s, want a0", got)
	}

	// Two tenants of equal weight alternate whatever is preferred.
	q = newQueue(t, nil)
	for i := range 4 {
		push(t, q, fmt.Sprint("a", i), 0, "a")
		push(t, q, fmt.Sprint("b", i), 0, "b")
	}
	var order []string
	for q.Len() > 0 {
		it, _, _, _ := q.PopPrefer(0, 8, 8, func(s string) bool { return s == "a3" || s == "b2" })
		if err := q.check(); err != nil {
			t.Fatal(err)
		}
		order = append(order, it)
	}
	if want := []string{"a3", "b2", "a0", "b0", "a1", "b1", "a2", "b3"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}
