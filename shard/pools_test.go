package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/upstream/backend"
	"github.com/saltus-lb/saltus/upstream/fleet"
)

// fakeFleet is a fixed Index; Refresh and Kick record what they were
// asked.
type fakeFleet struct {
	ix        atomic.Pointer[fleet.Index]
	refreshN  atomic.Int64
	kicked    atomic.Int64
	onRefresh func(ids []int) // runs in Refresh (nil: none)
}

func (f *fakeFleet) Index() *fleet.Index { return f.ix.Load() }
func (f *fakeFleet) Refresh(_ context.Context, ids ...int) error {
	f.refreshN.Add(1)
	if f.onRefresh != nil {
		f.onRefresh(ids)
	}
	return nil
}
func (f *fakeFleet) Suspect(int) { f.kicked.Add(1) }

// card is a listed model.
func card(id, parent string) fleet.Model {
	p := "null"
	if parent != "" {
		p = fmt.Sprintf("%q", parent)
	}
	return fleet.Model{ID: id, Parent: parent, OwnedBy: "vllm",
		Card: fmt.Appendf(nil, `{"id":%q,"object":"model","owned_by":"vllm","root":%q,"parent":%s,"max_model_len":4096}`, id, id, p)}
}

// mixedFleet is the fleet on backends 0..4: alpha on 0-2 (the
// adapter alpha-tuned on 0 and 1), beta on 3 and 4.
func mixedFleet(e *env) *fakeFleet {
	listed := map[int][]fleet.Model{
		0: {card("org/alpha", ""), card("alpha-tuned", "org/alpha")},
		1: {card("org/alpha", ""), card("alpha-tuned", "org/alpha")},
		2: {card("org/alpha", "")},
		3: {card("org/beta", "")},
		4: {card("org/beta", "")},
	}
	f := &fakeFleet{}
	f.ix.Store(fleet.NewIndex(e.up.Snapshot(), listed))
	e.r.UseFleet(f)
	return f
}

func modelChat(model, user string) string {
	b, err := json.Marshal(map[string]any{"model": model, "stream": true,
		"messages": []map[string]string{{"role": "system", "content": systemA}, {"role": "user", "content": user}}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestPoolsRouteInsideTheModelsPool(t *testing.T) {
	t.Parallel()
	for _, policy := range policy.Names() {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{loops: 2, backends: 5, policy: policy})
			mixedFleet(e)
			pools := map[string][]int{"org/alpha": {0, 1, 2}, "alpha-tuned": {0, 1}, "org/beta": {3, 4}}
			for i := range 60 {
				model := []string{"org/alpha", "alpha-tuned", "org/beta"}[i%3]
				c := e.serve(t, newExchange(i%2, "POST", "/v1/chat/completions", modelChat(model, fmt.Sprintf("question %d about something long enough to key", i))))
				if c == nil {
					t.Fatalf("%s: answered by the router, want a forward", model)
				}
				for _, id := range c.candidates {
					if !slices.Contains(pools[model], id) {
						t.Fatalf("%s: candidate %d outside its pool %v (candidates %v)", model, id, pools[model], c.candidates)
					}
				}
			}
		})
	}
}

func TestPoolsOtherEndpointsByModel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 5})
	mixedFleet(e)
	for _, tc := range []struct{ path, body string }{
		{"/v1/embeddings", `{"input":["a","b"],"model":"org/beta"}`},
		{"/tokenize", `{"model":"org/beta","prompt":"hello"}`},
		{"/v1/rerank", `{"model":"org/beta","query":"q","documents":["x"]}`},
		{"/score", `{"model": "org/alpha", "model": "org/beta", "text_1":"a","text_2":"b"}`}, // the last occurrence
		{"/v2/rerank", ` {"query":{"nested":{"model":"org/alpha"}}, "model":"org\/beta"}`},
	} {
		for i := range 4 {
			c := e.serve(t, newExchange(i%2, "POST", tc.path, tc.body))
			if c == nil {
				t.Fatalf("%s: answered by the router", tc.path)
			}
			if id := c.candidates[0]; id != 3 && id != 4 {
				t.Fatalf("%s %s: sent to backend %d, want one of org/beta's (3, 4)", tc.path, tc.body, id)
			}
		}
	}
	// An audio upload names its model in a form field.
	for _, path := range []string{"/v1/audio/transcriptions", "/v1/audio/translations"} {
		body := "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF....model\r\n" +
			"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\norg/beta\r\n--XyZ--\r\n"
		for i := range 4 {
			x := newExchange(i%2, "POST", path, body)
			x.req.Header = []reactor.Header{{Name: "Content-Type", Value: "multipart/form-data; boundary=XyZ"}}
			c := e.serve(t, x)
			if c == nil || (c.candidates[0] != 3 && c.candidates[0] != 4) {
				t.Fatalf("%s: %+v, want one of org/beta's backends (3, 4)", path, c)
			}
		}
	}
	// A body without a model (or not JSON) goes to any backend: the
	// engine answers it.
	if c := e.serve(t, newExchange(0, "POST", "/v1/embeddings", `not json`)); c == nil {
		t.Fatal("a body without a model was answered by the router")
	}
	x := newExchange(1, "POST", "/v1/embeddings", `{"model":"nope","input":"x"}`)
	if c := e.serve(t, x); c != nil || x.status != 404 {
		t.Fatalf("unknown model on embeddings: forwarded %v, status %d; want 404", c != nil, x.status)
	}
}

func TestPoolsUnknownModelIs404(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 5})
	mixedFleet(e)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/responses"} {
		body := modelChat("org/gamma", "hi there")
		switch path {
		case "/v1/completions":
			body = `{"model":"org/gamma","prompt":"hello there"}`
		case "/v1/responses":
			body = `{"model":"org/gamma","input":"hello there"}`
		}
		x := newExchange(0, "POST", path, body)
		if c := e.serve(t, x); c != nil {
			t.Fatalf("%s: unknown model forwarded to %v", path, c.candidates)
		}
		var got struct {
			Error struct{ Message, Type, Code, Param string }
		}
		if err := json.Unmarshal(x.body, &got); err != nil {
			t.Fatal(err)
		}
		if x.status != 404 || got.Error.Code != "model_not_found" || got.Error.Param != "model" ||
			got.Error.Message != "The model `org/gamma` does not exist." {
			t.Fatalf("%s: %d %s", path, x.status, x.body)
		}
	}
	if n := sample(exposition(t, e), `saltus_pool_refused_total{model="(other)",reason="model_not_found"}`); n != 3 {
		t.Fatalf("model_not_found counted %v, want 3", n)
	}
}

func TestPoolsDownPoolIs503(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 5})
	mixedFleet(e)
	e.up.down[3].Store(true)
	e.up.down[4].Store(true)
	x := newExchange(0, "POST", "/v1/chat/completions", modelChat("org/beta", "hi there, a question"))
	if c := e.serve(t, x); c != nil {
		t.Fatalf("beta forwarded to %v with its pool down", c.candidates)
	}
	if x.status != 503 || x.header("Retry-After") == "" || !strings.Contains(string(x.body), `"code":"no_backend"`) {
		t.Fatalf("got %d %s (Retry-After %q)", x.status, x.body, x.header("Retry-After"))
	}
	// The other pools are untouched.
	if c := e.serve(t, newExchange(1, "POST", "/v1/chat/completions", modelChat("org/alpha", "hi there, a question"))); c == nil {
		t.Fatal("alpha refused while beta is down")
	}
	// Back: served again at once.
	e.up.down[4].Store(false)
	c := e.serve(t, newExchange(0, "POST", "/v1/chat/completions", modelChat("org/beta", "hi there, a question")))
	if c == nil || c.candidates[0] != 4 {
		t.Fatalf("beta after backend 4 came back: %+v", c)
	}
}

func TestPoolsWildBackendsTakeUnknownModels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 3})
	f := &fakeFleet{}
	// Backend 2 has not listed its models (yet): it may serve anything.
	f.ix.Store(fleet.NewIndex(e.up.Snapshot(), map[int][]fleet.Model{0: {card("a", "")}, 1: {card("b", "")}}))
	e.r.UseFleet(f)
	c := e.serve(t, newExchange(0, "POST", "/v1/chat/completions", modelChat("c", "hi there, a question")))
	if c == nil || !slices.Equal(c.candidates, []int{2}) {
		t.Fatalf("unknown model: %+v, want backend 2 alone", c)
	}
	// A known model never goes to it.
	for range 8 {
		c := e.serve(t, newExchange(0, "POST", "/v1/chat/completions", modelChat("a", "hi there, a question")))
		if c == nil || !slices.Equal(c.candidates, []int{0}) {
			t.Fatalf("model a: %+v, want backend 0 alone", c)
		}
	}
}

func TestPoolsModelsList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 5})
	mixedFleet(e)
	e.up.down[3].Store(true)
	e.up.down[4].Store(true) // beta is not listed while down
	x := newExchange(0, "GET", "/v1/models", "")
	e.r.serve(x)
	<-x.done
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		}
	}
	if err := json.Unmarshal(x.body, &list); err != nil {
		t.Fatal(err, string(x.body))
	}
	var got []string
	for _, m := range list.Data {
		p := ""
		if m.Parent != nil {
			p = *m.Parent
		}
		got = append(got, m.ID+"<"+p)
	}
	if want := []string{"alpha-tuned<org/alpha", "org/alpha<"}; x.status != 200 || !slices.Equal(got, want) {
		t.Fatalf("GET /v1/models: %d %v, want %v", x.status, got, want)
	}
	for _, tc := range []struct {
		id     string
		status int
	}{{"alpha-tuned", 200}, {"org/beta", 503}, {"org/nope", 404}} {
		x := newExchange(0, "GET", "/v1/models/"+tc.id, "")
		e.r.serve(x)
		<-x.done
		if x.status != tc.status {
			t.Fatalf("GET /v1/models/%s: %d %s, want %d", tc.id, x.status, x.body, tc.status)
		}
	}
}

func TestPoolsExplainShowsPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 5})
	mixedFleet(e)
	d, err := e.r.Explain([]byte(modelChat("alpha-tuned", "a question to explain")), "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	if d.Model != "alpha-tuned" || !slices.Equal(d.Pool, []int{0, 1}) || (d.Backend != 0 && d.Backend != 1) {
		t.Fatalf("explain: model %q pool %v backend %d", d.Model, d.Pool, d.Backend)
	}
	if _, err := e.r.Explain([]byte(modelChat("nope", "x")), "/v1/chat/completions"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("explain of an unknown model: %v", err)
	}
}

func TestAdapterLoadGoesToTheBasePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 5})
	f := mixedFleet(e)
	var sent atomic.Pointer[[]string]
	empty := []string{}
	sent.Store(&empty)
	ctl := controlFunc(func(b *backend.Backend, path string, body []byte) (int, []byte, error) {
		for {
			old := sent.Load()
			n := append(slices.Clone(*old), fmt.Sprintf("%d %s %s", b.ID, path, body))
			if sent.CompareAndSwap(old, &n) {
				break
			}
		}
		return 200, []byte("Success: LoRA adapter added successfully."), nil
	})
	e.up.controlFn.Store(&ctl)
	do := func(path, body, auth string) *fakeExchange {
		x := newExchange(0, "POST", path, body)
		if auth != "" {
			x.req.Header = append(x.req.Header, reactorHeader("Authorization", auth))
		}
		e.r.serve(x)
		<-x.done
		return x
	}
	// Two base models: the load must name its base.
	if x := do("/v1/load_lora_adapter", `{"lora_name":"beta-chat","lora_path":"/a"}`, ""); x.status != 400 || !strings.Contains(string(x.body), "base_model") {
		t.Fatalf("load without base_model: %d %s", x.status, x.body)
	}
	x := do("/v1/load_lora_adapter", `{"lora_name":"beta-chat","lora_path":"/a","base_model":"org/beta"}`, "")
	if x.status != 200 {
		t.Fatalf("load: %d %s", x.status, x.body)
	}
	got := *sent.Load()
	slices.Sort(got)
	want := []string{`3 /v1/load_lora_adapter {"lora_name":"beta-chat","lora_path":"/a"}`, `4 /v1/load_lora_adapter {"lora_name":"beta-chat","lora_path":"/a"}`}
	if !slices.Equal(got, want) {
		t.Fatalf("forwarded %q, want %q", got, want)
	}
	if f.refreshN.Load() != 1 {
		t.Fatalf("models refreshed %d times after the load, want 1", f.refreshN.Load())
	}
	// alpha-tuned is listed by 0 and 1: an unload goes to them alone; a
	// load of it to the rest of its base pool (2), its base known.
	sent.Store(&empty)
	if x := do("/v1/unload_lora_adapter", `{"lora_name":"alpha-tuned"}`, ""); x.status != 200 {
		t.Fatalf("unload: %d %s", x.status, x.body)
	}
	if got := *sent.Load(); len(got) != 2 || !strings.HasPrefix(got[0], "0 ") && !strings.HasPrefix(got[0], "1 ") {
		t.Fatalf("unload forwarded %q", got)
	}
	sent.Store(&empty)
	if x := do("/v1/load_lora_adapter", `{"lora_name":"alpha-tuned","lora_path":"/b"}`, ""); x.status != 200 || !strings.Contains(string(x.body), `"already loaded"`) {
		t.Fatalf("load of a listed adapter: %d %s", x.status, x.body)
	}
	if got := *sent.Load(); !slices.Equal(got, []string{`2 /v1/load_lora_adapter {"lora_name":"alpha-tuned","lora_path":"/b"}`}) {
		t.Fatalf("load forwarded %q, want backend 2 alone", got)
	}
	// Unknown adapter, bad bodies, engine refusals, the admin token.
	for _, tc := range []struct {
		path, body, auth string
		status           int
	}{
		{"/v1/unload_lora_adapter", `{"lora_name":"nope"}`, "", 404},
		{"/v1/load_lora_adapter", `{"lora_name":"x"}`, "", 400},
		{"/v1/load_lora_adapter", `[1]`, "", 400},
		{"/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p","base_model":"org/nope"}`, "", 404},
	} {
		if x := do(tc.path, tc.body, tc.auth); x.status != tc.status {
			t.Fatalf("%s %s: %d %s, want %d", tc.path, tc.body, x.status, x.body, tc.status)
		}
	}
	refuse := controlFunc(func(*backend.Backend, string, []byte) (int, []byte, error) {
		return 400, []byte(`{"error":{"message":"The lora adapter 'x' has already been loaded.","type":"BadRequestError","code":400}}`), nil
	})
	e.up.controlFn.Store(&refuse)
	if x := do("/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p","base_model":"org/beta"}`, ""); x.status != 400 || !strings.Contains(string(x.body), "already been loaded") {
		t.Fatalf("engines refusing: %d %s", x.status, x.body)
	}
	e.r.SetAdminToken("s3cret")
	if x := do("/v1/unload_lora_adapter", `{"lora_name":"alpha-tuned"}`, ""); x.status != 401 {
		t.Fatalf("without the admin token: %d %s", x.status, x.body)
	}
	if x := do("/v1/unload_lora_adapter", `{"lora_name":"alpha-tuned"}`, "Bearer s3cret"); x.status == 401 {
		t.Fatalf("with the admin token: %d %s", x.status, x.body)
	}
}

func reactorHeader(name, value string) reactor.Header {
	return reactor.Header{Name: name, Value: value}
}

// An engine's 404 to a request of its pool asks for its models again
// (an adapter unloaded behind saltus's back); other statuses do not.
func TestPools404Refetches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 5})
	f := mixedFleet(e)
	e.serve(t, newExchange(0, "POST", "/v1/chat/completions", modelChat("alpha-tuned", "a question for the adapter")))
	if n := f.kicked.Load(); n != 0 {
		t.Fatalf("a 200 asked for %d refetches", n)
	}
	e.up.status.Store(404)
	e.serve(t, newExchange(0, "POST", "/v1/chat/completions", modelChat("alpha-tuned", "a question for the adapter")))
	if n := f.kicked.Load(); n != 1 {
		t.Fatalf("an engine's 404 asked for %d refetches, want 1", n)
	}
}
