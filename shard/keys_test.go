package shard

import (
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/keys"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/openai/openaitest"
	"github.com/saltus-lb/saltus/reactor"
)

// keyRing is a Ring of keys given as a YAML list.
func keyRing(t *testing.T, list string) *keys.Ring {
	t.Helper()
	cfg := keys.DefaultConfig()
	cfg.Env = []byte(list)
	ring, err := keys.New(cfg, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

func keyEntry(name, secret, extra string) string {
	return "- name: " + name + "\n  hash: " + keys.FormatHash(keys.HashSecret(secret)) + "\n" + extra
}

// serveKeyed serves x and returns the Forward it caused (nil: answered
// directly): serve with keys forwards a wrapper of x.
func (e *env) serveKeyed(t *testing.T, x *fakeExchange) *forwardCall {
	t.Helper()
	for !e.loops.post(x.loop, func() { e.r.serve(x) }) {
		time.Sleep(time.Millisecond)
	}
	select {
	case c := <-e.up.calls:
		if kx, ok := c.x.(*keyedExchange); !ok || kx.exchange != x {
			t.Fatalf("forwarded %T, want the request's keyed exchange", c.x)
		}
		e.loops.settle(t)
		return &c
	case <-x.done:
		return nil
	case <-time.After(10 * time.Second):
		t.Fatal("no Forward and no answer within 10 s")
		return nil
	}
}

func TestRouterKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 2})
	e.r.UseKeys(keyRing(t, keyEntry("alpha", "sk-alpha-000000", "  models: [m]\n  rpm: 2\n")+keyEntry("beta", "sk-beta-0000000", "")))
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	req := func(path, body string, hdr ...string) *fakeExchange {
		x := newExchange(1, "POST", path, body)
		for i := 0; i+1 < len(hdr); i += 2 {
			x.req.Header = append(x.req.Header, reactor.Header{Name: hdr[i], Value: hdr[i+1]})
		}
		return x
	}
	// Missing and unknown keys: 401 before the body is read (a bad body
	// would be a 400 otherwise).
	x := req("/v1/chat/completions", `{"model":`)
	if e.serveKeyed(t, x) != nil || x.status != 401 || x.header("WWW-Authenticate") != "Bearer" {
		t.Fatalf("no key: %d %v", x.status, x.hdr)
	}
	openaitest.CheckErrorBody(t, x.body, "invalid_request_error", "invalid_api_key", "")
	if !strings.Contains(string(x.body), "You didn't provide an API key") {
		t.Errorf("no key: %s", x.body)
	}
	x = req("/v1/chat/completions", chat, "Authorization", "Bearer sk-wrong-123456789")
	if e.serveKeyed(t, x) != nil || x.status != 401 || !strings.Contains(string(x.body), "Incorrect API key provided: sk-wr***********89.") {
		t.Fatalf("unknown key: %d %s", x.status, x.body)
	}
	// A model the key may not use: 404, nothing forwarded.
	x = req("/v1/chat/completions", strings.Replace(chat, `"m"`, `"other"`, 1), "Authorization", "Bearer sk-alpha-000000")
	if e.serveKeyed(t, x) != nil || x.status != 404 || x.header("x-ratelimit-remaining-requests") != "2" {
		t.Fatalf("model not allowed: %d %v", x.status, x.hdr)
	}
	openaitest.CheckErrorBody(t, x.body, "invalid_request_error", "model_not_found", "model")
	// Allowed: forwarded, with its limits; x-api-key works too.
	for i, h := range []string{"Authorization", "X-Api-Key"} {
		v := "sk-alpha-000000"
		if h == "Authorization" {
			v = "Bearer " + v
		}
		x = req("/v1/chat/completions", chat, h, v)
		c := e.serveKeyed(t, x)
		if c == nil {
			t.Fatalf("%s: not forwarded: %d %s", h, x.status, x.body)
		}
		kx := c.x.(*keyedExchange)
		want := map[string]string{"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": []string{"1", "0"}[i]}
		for _, hd := range kx.hdr {
			if w, ok := want[hd.Name]; ok && w != hd.Value {
				t.Errorf("%s: %s %q, want %q", h, hd.Name, hd.Value, w)
			}
			delete(want, hd.Name)
		}
		if len(want) > 0 || strings.Contains(headerNames(kx.hdr), "tokens") {
			t.Errorf("%s: headers %v (no tokens limit: no tokens headers)", h, kx.hdr)
		}
	}
	// The third request in the minute: 429 with Retry-After.
	x = req("/v1/completions", `{"model":"m","prompt":"hi"}`, "Authorization", "Bearer sk-alpha-000000")
	if e.serveKeyed(t, x) != nil || x.status != 429 || x.header("Retry-After") != "30" || x.header("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("over rpm: %d %v", x.status, x.hdr)
	}
	openaitest.CheckErrorBody(t, x.body, "requests", "rate_limit_exceeded", "")
	if !strings.Contains(string(x.body), "Rate limit reached for key alpha on requests per min (RPM): Limit 2, Used 2, Requested 1. Please try again in ") {
		t.Errorf("over rpm: %s", x.body)
	}
	// An unlimited key: forwarded without x-ratelimit headers; the
	// adapter endpoints keep the admin token (no key asked).
	x = req("/v1/embeddings", `{"model":"any","input":"x"}`, "Authorization", "Bearer sk-beta-0000000")
	if c := e.serveKeyed(t, x); c == nil || len(c.x.(*keyedExchange).hdr) != 0 {
		t.Fatalf("unlimited key: %d %v", x.status, c)
	}
}

func headerNames(h []reactor.Header) string {
	var b strings.Builder
	for _, x := range h {
		b.WriteString(x.Name + " ")
	}
	return b.String()
}

func TestTenantOf(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 1, config: func(c *Config) { c.TenantHeader = "X-Team" }})
	ring := keyRing(t, keyEntry("gold", "sk-gold-0000000", "  weight: 4\n"))
	f := func(key *keys.Key, hdr []reactor.Header, wantTenant string, wantWeight float64) {
		t.Helper()
		x := newExchange(0, "POST", "/v1/chat/completions", "")
		x.req.Header = hdr
		tenant, w := e.r.tenantOf(&job{r: e.r, x: x, key: key})
		if tenant != wantTenant || w != wantWeight {
			t.Errorf("tenantOf(key %v, %v) = %q, %v; want %q, %v", key != nil, hdr, tenant, w, wantTenant, wantWeight)
		}
	}
	gold := ring.Lookup("sk-gold-0000000")
	f(gold, []reactor.Header{{Name: "Authorization", Value: "Bearer sk-gold-0000000"}}, "gold", 4)
	bearer, _ := e.r.tenantOf(&job{r: e.r, x: &fakeExchange{req: &reactor.Request{Header: []reactor.Header{{Name: "Authorization", Value: "Bearer a"}}}}})
	if bearer == "" || bearer == "gold" || strings.HasPrefix(bearer, "h:") {
		t.Errorf("bearer tenant %q", bearer)
	}
	f(nil, []reactor.Header{{Name: "Authorization", Value: "Bearer a"}, {Name: "X-Team", Value: "t1"}}, bearer, 1)
	f(nil, []reactor.Header{{Name: "X-Team", Value: "t1"}}, "h:t1", 1)
	f(nil, []reactor.Header{{Name: "X-Team", Value: strings.Repeat("a", 1000)}}, "h:"+strings.Repeat("a", maxTenantLen), 1)
	f(nil, nil, "", 1)
	if tn, w := e.r.tenantOf(&job{r: e.r}); tn != "" || w != 1 {
		t.Errorf("Explain's job: %q %v", tn, w)
	}
}

func TestMaxTokensOf(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]int64{
		`{"model":"m","max_tokens":100}`:                100,
		`{"max_tokens":100,"max_completion_tokens":7}`:  7,
		`{"max_completion_tokens":null,"max_tokens":9}`: 9,
		`{"max_output_tokens":64}`:                      64,
		`{"max_tokens":-1}`:                             0,
		`{"max_tokens":"10"}`:                           0,
		`{"max_tokens":1e3}`:                            0,
		`{"max_tokens":99999999999999999999}`:           0,
		`{"max_tokens":10000000000000}`:                 keys.MaxTPM,
		`{"model":"m"}`:                                 0,
		`[1]`:                                           0,
		``:                                              0,
		`{"messages":[{"max_tokens":5}],"max_tokens":3}`: 3,
		`{"a":"\"max_tokens\":5"}`:                       0,
	} {
		if got := maxTokensOf([]byte(body)); got != want {
			t.Errorf("maxTokensOf(%s) = %d, want %d", body, got, want)
		}
	}
}

func TestFilterModels(t *testing.T) {
	t.Parallel()
	ring := keyRing(t, keyEntry("a", "sk-aaaaaaaaaaaa", "  models: [m1, org/m3]\n"))
	k := ring.Lookup("sk-aaaaaaaaaaaa")
	got := string(openai.FilterModels([]byte(`{"object":"list","data":[{"id":"m1","object":"model"},{"id":"m2"},{"id":"org/m3","parent":null}]}`), k.Allows))
	if want := `{"object":"list","data":[{"id":"m1","object":"model"},{"id":"org/m3","parent":null}]}`; got != want {
		t.Fatalf("FilterModels = %s\nwant %s", got, want)
	}
}
