package shard

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/policy"
)

func TestRespTableBound(t *testing.T) {
	t.Parallel()
	tb := newRespTable(100, 1000)
	for i := range 250 {
		tb.insert(fmt.Sprintf("resp_%d", i), i%3, int64(i))
	}
	if tb.len() != 100 || tb.evicted != 150 || tb.expiredIDs != 0 || len(tb.ring) != 100 {
		t.Fatalf("len %d evicted %d expired %d ring %d", tb.len(), tb.evicted, tb.expiredIDs, len(tb.ring))
	}
	// Oldest first: the first 150 are gone, the last 100 kept.
	if _, ok := tb.lookup("resp_149", 250); ok {
		t.Fatal("resp_149 survived eviction")
	}
	for i := 150; i < 250; i++ {
		if b, ok := tb.lookup(fmt.Sprintf("resp_%d", i), 250); !ok || b != i%3 {
			t.Fatalf("resp_%d: %d %v", i, b, ok)
		}
	}
}

func TestRespTableTTL(t *testing.T) {
	t.Parallel()
	tb := newRespTable(10, 100)
	tb.insert("a", 1, 0)
	tb.insert("b", 2, 50)
	if b, ok := tb.lookup("a", 100); !ok || b != 1 {
		t.Fatalf("a at its ttl: %d %v", b, ok)
	}
	if _, ok := tb.lookup("a", 101); ok {
		t.Fatal("a past its ttl")
	}
	if b, ok := tb.lookup("b", 101); !ok || b != 2 {
		t.Fatalf("b: %d %v", b, ok)
	}
	tb.expire(101, 100)
	if tb.len() != 1 || tb.expiredIDs != 1 || tb.evicted != 0 {
		t.Fatalf("after expire: len %d expired %d evicted %d", tb.len(), tb.expiredIDs, tb.evicted)
	}
	tb.expire(1000, 100)
	if tb.len() != 0 || tb.n != 0 || tb.expiredIDs != 2 {
		t.Fatalf("all expired: len %d n %d expired %d", tb.len(), tb.n, tb.expiredIDs)
	}
}

// TestRespTableReinsert: an id inserted again takes its new backend and
// time; its stale slot neither evicts it nor counts.
func TestRespTableReinsert(t *testing.T) {
	t.Parallel()
	tb := newRespTable(3, 100)
	tb.insert("a", 1, 0)
	tb.insert("a", 2, 10)
	tb.insert("b", 3, 20)
	tb.insert("c", 4, 30) // ring full: pops a's stale slot, nothing evicted
	if b, ok := tb.lookup("a", 30); !ok || b != 2 || tb.evicted != 0 || tb.len() != 3 {
		t.Fatalf("a: %d %v evicted %d len %d", b, ok, tb.evicted, tb.len())
	}
	tb.insert("d", 5, 40) // evicts a (its current slot)
	if _, ok := tb.lookup("a", 40); ok || tb.evicted != 1 {
		t.Fatalf("a kept, evicted %d", tb.evicted)
	}
	// Expired ids are dropped by inserts, within their budget.
	tb.insert("e", 6, 200)
	if tb.len() != 1 || tb.expiredIDs != 3 {
		t.Fatalf("len %d expired %d", tb.len(), tb.expiredIDs)
	}
}

// FuzzRespTable checks the table against a map oracle with the same
// rules (ttl, oldest-first eviction over cap).
func FuzzRespTable(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 200, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const capacity, ttl = 4, 50
		tb := newRespTable(capacity, ttl)
		type ent struct {
			b  int
			at int64
		}
		oracle := map[string]ent{}
		var order []string // insertion order of current entries
		now := int64(0)
		for i, op := range ops {
			now += int64(op % 16)
			id := fmt.Sprint(op % 8)
			if op&0x80 != 0 {
				b, ok := tb.lookup(id, now)
				e, want := oracle[id]
				want = want && now-e.at <= ttl
				if ok != want || (ok && b != e.b) {
					t.Fatalf("op %d lookup %s: got %d %v, oracle %+v %v", i, id, b, ok, e, want)
				}
				continue
			}
			tb.insert(id, i, now)
			if _, ok := oracle[id]; ok {
				for j, o := range order {
					if o == id {
						order = append(order[:j], order[j+1:]...)
						break
					}
				}
			}
			oracle[id] = ent{i, now}
			order = append(order, id)
			if tb.len() > capacity {
				t.Fatalf("op %d: len %d over cap", i, tb.len())
			}
			// The oracle keeps what the table keeps: the table may drop
			// more (stale slots count toward its ring), never an entry
			// newer than one it kept.
			for len(order) > 0 {
				if _, ok := tb.m[order[0]]; ok {
					break
				}
				delete(oracle, order[0])
				order = order[1:]
			}
			for _, o := range order {
				if _, ok := tb.m[o]; !ok && now-oracle[o].at <= ttl {
					t.Fatalf("op %d: %s dropped while older ones are kept", i, o)
				}
			}
		}
	})
}

func TestResponsePaths(t *testing.T) {
	t.Parallel()
	f := func(method, path string, wantRoute routeID, wantAllow string) {
		t.Helper()
		if rt, allow := classify(method, path); rt != wantRoute || allow != wantAllow {
			t.Fatalf("%s %s: got %s %q, want %s %q", method, path, routeNames[rt], allow, routeNames[wantRoute], wantAllow)
		}
	}
	f("POST", "/v1/responses", routeResponses, "")
	f("POST", "/v1/messages", routeMessages, "")
	f("GET", "/v1/messages", routeMessages, "POST")
	f("POST", "/v1/messages/count_tokens", routeOther, "")
	f("GET", "/v1/responses", routeResponses, "POST")
	f("GET", "/v1/responses/resp_1", routeResponseID, "")
	f("DELETE", "/v1/responses/resp_1", routeResponseID, "")
	f("POST", "/v1/responses/resp_1", routeResponseID, "GET, DELETE")
	f("E", "/v1/responses/resp_1", routeResponseID, "GET, DELETE")
	f("POST", "/v1/responses/resp_1/cancel", routeResponseID, "")
	f("GET", "/v1/responses/resp_1/cancel", routeResponseID, "POST")
	f("GET", "/v1/responses/resp_1/input_items", routeResponseID, "")
	f("POST", "/v1/responses/resp_1/other", routeOther, "")
	f("GET", "/v1/models/org/model-a", routeModels, "")
	f("POST", "/v1/models/m", routeModels, "GET, HEAD")
	if id, _, ok := openai.ResponsePathID("/v1/responses/resp_9/cancel"); !ok || id != "resp_9" {
		t.Fatalf("id %q %v", id, ok)
	}
	if id := openai.ModelPathID("/v1/models/org/m"); id != "org/m" {
		t.Fatalf("model id %q", id)
	}
}

// TestRouterResponseIDs: a request naming a remembered response goes to
// its backend under every policy, with one candidate; an unroutable or
// unknown one is routed as any request and counted. Explain shows it.
func TestRouterResponseIDs(t *testing.T) {
	t.Parallel()
	for _, pol := range policy.Names() {
		t.Run(pol, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{loops: 2, backends: 3, policy: pol})
			e.r.remember(-1, "resp_x", 2)
			e.loops.settle(t)
			body := `{"model":"m","input":"` + strings.Repeat("long enough for a few blocks of keys ", 8) + `","previous_response_id":"resp_x"}`
			for loop := range 2 {
				c := e.serve(t, newExchange(loop, "POST", "/v1/responses", body))
				if c == nil || !slices.Equal(c.candidates, []int{2}) || !strings.HasSuffix(c.header(HeaderRoute), " "+ReasonResponseID) {
					t.Fatalf("loop %d: %+v", loop, c)
				}
				c = e.serve(t, newExchange(loop, "DELETE", "/v1/responses/resp_x", ""))
				if c == nil || !slices.Equal(c.candidates, []int{2}) || c.header(HeaderRoute) != "0/0 "+ReasonResponseID {
					t.Fatalf("loop %d: DELETE: %+v", loop, c)
				}
			}
			d, err := e.r.Explain([]byte(body), "/v1/responses")
			if err != nil || d.Backend != 2 || d.Reason != ReasonResponseID {
				t.Fatalf("explain: %+v %v", d, err)
			}
			e.up.down[2].Store(true)
			c := e.serve(t, newExchange(0, "POST", "/v1/responses", body))
			if c == nil || slices.Contains(c.candidates, 2) || strings.HasSuffix(c.header(HeaderRoute), ReasonResponseID) {
				t.Fatalf("down: %+v", c)
			}
			c = e.serve(t, newExchange(1, "GET", "/v1/responses/resp_unknown", ""))
			if c == nil || strings.HasSuffix(c.header(HeaderRoute), ReasonResponseID) {
				t.Fatalf("unknown: %+v", c)
			}
			hit := e.set.GetOrCreateCounter(`saltus_responses_id_lookups_total{result="hit"}`).Get()
			unroutable := e.set.GetOrCreateCounter(`saltus_responses_id_lookups_total{result="unroutable"}`).Get()
			unknown := e.set.GetOrCreateCounter(`saltus_responses_id_lookups_total{result="unknown"}`).Get()
			if hit != 5 || unroutable != 1 || unknown != 1 {
				t.Fatalf("hit %d unroutable %d unknown %d", hit, unroutable, unknown)
			}
		})
	}
}
