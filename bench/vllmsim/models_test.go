package vllmsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// wantVLLMErr checks a body in vLLM's own error shape: its type, param
// ("" for null), the status as a numeric code, and the message ("" for
// any).
func wantVLLMErr(t *testing.T, code int, body []byte, wantCode int, typ, param, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    int     `json:"code"`
		} `json:"error"`
	}
	err := json.Unmarshal(body, &e)
	gotParam := ""
	if e.Error.Param != nil {
		gotParam = *e.Error.Param
	}
	if err != nil || code != wantCode || e.Error.Code != wantCode || e.Error.Type != typ || gotParam != param ||
		(e.Error.Param == nil) != (param == "") || e.Error.Message == "" || (msg != "" && e.Error.Message != msg) {
		t.Errorf("got %d %s, want %d type %q param %q message %q", code, body, wantCode, typ, param, msg)
	}
}

// card is a /v1/models entry as the tests read it: parent and
// max_model_len are pointers, to tell null from absent and zero.
type card struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen *int    `json:"max_model_len"`
	Permission  []struct {
		ID, Object    string
		AllowSampling bool    `json:"allow_sampling"`
		Organization  string  `json:"organization"`
		Group         *string `json:"group"`
	} `json:"permission"`
}

// listModels is GET /v1/models, decoded; every card's fixed fields
// checked.
func listModels(t *testing.T, s *Sim) []card {
	t.Helper()
	code, b := get(t, s, "/v1/models")
	var r struct {
		Object string `json:"object"`
		Data   []card `json:"data"`
	}
	if err := json.Unmarshal(b, &r); code != 200 || err != nil || r.Object != "list" {
		t.Fatalf("/v1/models: %d %v %s", code, err, b)
	}
	for _, c := range r.Data {
		if c.Object != "model" || c.OwnedBy != "vllm" || c.Created < 1e9 || len(c.Permission) != 1 ||
			!strings.HasPrefix(c.Permission[0].ID, "modelperm-") || len(c.Permission[0].ID) != len("modelperm-")+32 ||
			c.Permission[0].Object != "model_permission" || !c.Permission[0].AllowSampling || c.Permission[0].Organization != "*" || c.Permission[0].Group != nil {
			t.Errorf("card %+v in %s", c, b)
		}
	}
	return r.Data
}

// describe is a card's id, root, parent and max_model_len in one string.
func (c card) describe() string {
	parent, maxLen := "null", "null"
	if c.Parent != nil {
		parent = *c.Parent
	}
	if c.MaxModelLen != nil {
		maxLen = fmt.Sprint(*c.MaxModelLen)
	}
	return c.ID + " root=" + c.Root + " parent=" + parent + " max_model_len=" + maxLen
}

func describeAll(cs []card) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.describe())
	}
	return out
}

func fleetConfig(c *Config) {
	c.ExtraModels = []string{"m2", "org/alias"}
	c.LoRAModules = []LoRA{{Name: "sql", Path: "/loras/sql"}, {Name: "chat-lora", Path: "/loras/chat lora", Base: "m2"}}
}

// TestModelsList: every base model (parent null, root its name,
// max_model_len), then every adapter (root its path, parent its base,
// max_model_len null), as vLLM's show_available_models lists them; GET
// /v1/models/{id} serves each card.
func TestModelsList(t *testing.T) {
	t.Parallel()
	s := startSim(t, fleetConfig)
	want := []string{
		"m root=m parent=null max_model_len=16384",
		"m2 root=m2 parent=null max_model_len=16384",
		"org/alias root=org/alias parent=null max_model_len=16384",
		"sql root=/loras/sql parent=m max_model_len=null",
		"chat-lora root=/loras/chat lora parent=m2 max_model_len=null",
	}
	if got := describeAll(listModels(t, s)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("/v1/models:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, w := range want {
		id, _, _ := strings.Cut(w, " ")
		code, b := get(t, s, "/v1/models/"+id)
		var c card
		if err := json.Unmarshal(b, &c); code != 200 || err != nil || c.describe() != w {
			t.Errorf("GET /v1/models/%s: %d %v %s, want %s", id, code, err, b, w)
		}
	}
}

// TestModelRouting: each endpoint that takes "model" serves every
// served name (echoing it) and no "model" (the primary one), and
// answers vLLM's 404 for any other name, before looking at the prompt.
func TestModelRouting(t *testing.T) {
	t.Parallel()
	s := startSim(t, fleetConfig)
	bodies := map[string]string{
		"/v1/chat/completions": `{%s"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`,
		"/v1/completions":      `{%s"prompt":"hi","max_tokens":2}`,
		"/v1/responses":        `{%s"input":"hi","max_output_tokens":2}`,
		"/tokenize":            `{%s"prompt":"hi"}`,
	}
	for path, body := range bodies {
		for _, tc := range []struct {
			model, echo string
			code        int
		}{
			{"", "m", 200}, {"m", "m", 200}, {"m2", "m2", 200}, {"org/alias", "org/alias", 200},
			{"sql", "sql", 200}, {"chat-lora", "chat-lora", 200},
			{"sim-llama", "", 404}, {"SQL", "", 404}, {"m ", "", 404},
		} {
			field := ""
			if tc.model != "" {
				field = fmt.Sprintf(`"model":%q,`, tc.model)
			}
			code, b := post(t, s, path, fmt.Sprintf(body, field))
			if tc.code == 404 {
				wantVLLMErr(t, code, b, 404, "NotFoundError", "model", "The model `"+tc.model+"` does not exist.")
				continue
			}
			var r struct {
				Model string `json:"model"`
				Count int    `json:"count"`
			}
			if err := json.Unmarshal(b, &r); code != 200 || err != nil || (path != "/tokenize" && r.Model != tc.echo) || (path == "/tokenize" && r.Count != 1) {
				t.Errorf("POST %s model %q: %d %s, want model %q", path, tc.model, code, b, tc.echo)
			}
		}
	}
	// A streamed request to an unknown model gets the 404 too, not a
	// stream; one to an adapter streams chunks naming it.
	code, b := post(t, s, "/v1/chat/completions", `{"model":"nope","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	wantVLLMErr(t, code, b, 404, "NotFoundError", "model", "The model `nope` does not exist.")
	st := stream(t, s, "/v1/chat/completions", `{"model":"sql","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	if st.status != 200 || !st.done || len(st.events) != 3 || !strings.Contains(st.events[2], `"model":"sql"`) {
		t.Errorf("stream to an adapter: %d done=%v %q", st.status, st.done, st.events)
	}
	// The body's own errors come first, as in vLLM (pydantic before
	// _check_model).
	code, b = post(t, s, "/v1/completions", `{"model":"nope","prompt":"x","max_tokens":0}`)
	wantErr(t, code, b, 400, "max_tokens", "")
}

// TestAdapterKeys: an adapter's blocks are its own. A prompt cached
// under the base model is a miss under its adapter, and the other way
// round; two base models of one engine do not share blocks either. Each
// name then hits its own blocks (usage.cached_tokens).
func TestAdapterKeys(t *testing.T) {
	t.Parallel()
	s := startSim(t, fleetConfig)
	cached := func(model, text string) int {
		t.Helper()
		b, err := json.Marshal(map[string]any{"model": model, "prompt": text, "max_tokens": 1})
		if err != nil {
			t.Fatal(err)
		}
		return complete(t, s, "/v1/completions", string(b)).Usage.Details.CachedTokens
	}
	// 400 bytes: 100 tokens, 6 full blocks within the first 99 tokens.
	p, q, r := text("p", 400), text("q", 400), text("r", 400)
	for i, tc := range []struct {
		model, text string
		want        int
	}{
		{"m", p, 0}, {"sql", p, 0}, {"m", p, 96}, {"sql", p, 96}, // base first, then the adapter
		{"chat-lora", q, 0}, {"m2", q, 0}, {"m", q, 0}, {"chat-lora", q, 96}, {"m2", q, 96}, // adapter first
		{"m2", r, 0}, {"org/alias", r, 0}, {"", r, 0}, {"m", r, 96}, {"org/alias", r, 96}, // base models: "" is m
	} {
		if got := cached(tc.model, tc.text); got != tc.want {
			t.Errorf("request %d, model %q: %d cached tokens, want %d", i, tc.model, got, tc.want)
		}
	}
}

// loraPost posts a load or unload body and returns the status and body.
func loraPost(t *testing.T, s *Sim, op, body string) (int, string) {
	t.Helper()
	code, b := post(t, s, "/v1/"+op+"_lora_adapter", body)
	return code, string(b)
}

// TestRuntimeLoRA: load → 200 with vLLM's message, listed at once and
// served; a second load → 400 unless load_inplace; unload → 200, then
// the adapter is a 404 model and a second unload a 404; vLLM's errors
// for missing names, bodies that are not its schema, a base model's
// name; MaxLoRAs bounds static and loaded adapters together.
func TestRuntimeLoRA(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) {
		c.LoRAModules = []LoRA{{Name: "sql", Path: "/loras/sql"}}
		c.MaxLoRAs = 2
	})
	ok := func(op, body, want string) {
		t.Helper()
		code, b := loraPost(t, s, op, body)
		if code != 200 || b != want {
			t.Errorf("%s %s: %d %q, want 200 %q", op, body, code, b, want)
		}
	}
	fail := func(op, body string, code int, typ, param, msg string) {
		t.Helper()
		c, b := loraPost(t, s, op, body)
		wantVLLMErr(t, c, []byte(b), code, typ, param, msg)
	}
	served := func(model string) int {
		t.Helper()
		code, _ := post(t, s, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"hi","max_tokens":1}`, model))
		return code
	}
	listed := func() string {
		t.Helper()
		return strings.Join(describeAll(listModels(t, s)), "; ")
	}

	if served("tide") != 404 {
		t.Fatal("an adapter not loaded yet is served")
	}
	ok("load", `{"lora_name":"tide","lora_path":"/loras/tide-v1"}`, "Success: LoRA adapter 'tide' added successfully.")
	if got, want := listed(), "m root=m parent=null max_model_len=16384; sql root=/loras/sql parent=m max_model_len=null; tide root=/loras/tide-v1 parent=m max_model_len=null"; got != want {
		t.Errorf("after load: %s, want %s", got, want)
	}
	if c := served("tide"); c != 200 {
		t.Errorf("a loaded adapter: %d", c)
	}
	fail("load", `{"lora_name":"tide","lora_path":"/loras/tide-v2"}`, 400, "InvalidUserInput", "",
		"The lora adapter 'tide' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.")
	ok("load", `{"lora_name":"tide","lora_path":"/loras/tide-v2","load_inplace":true}`, "Success: LoRA adapter 'tide' added successfully.")
	if got := listed(); !strings.HasSuffix(got, "; tide root=/loras/tide-v2 parent=m max_model_len=null") {
		t.Errorf("after an in-place load: %s", got)
	}
	// Over MaxLoRAs (2: sql and tide).
	fail("load", `{"lora_name":"more","lora_path":"/p"}`, 400, "InvalidUserInput", "",
		"The lora adapter 'more' cannot be loaded: 2 adapters are loaded, the most this engine holds (max-loras). Unload one first.")
	fail("load", `{"lora_name":"m","lora_path":"/p","load_inplace":true}`, 400, "InvalidUserInput", "",
		"The lora adapter 'm' cannot be loaded: a base model has that name.")
	for _, body := range []string{`{"lora_name":"","lora_path":"/p"}`, `{"lora_name":"x","lora_path":""}`} {
		fail("load", body, 400, "InvalidUserInput", "", "Both 'lora_name' and 'lora_path' must be provided.")
	}
	fail("load", `{"lora_name":"a b","lora_path":"/p"}`, 400, "InvalidUserInput", "", "")
	fail("load", `{"lora_name":"x"}`, 400, "Bad Request", "lora_path", "lora_path: a string is required, missing")
	fail("load", `{"lora_name":7,"lora_path":"/p"}`, 400, "Bad Request", "lora_name", "lora_name: a string is required, got number")
	fail("load", `{"lora_name":"x","lora_path":"/p","load_inplace":"yes"}`, 400, "Bad Request", "load_inplace", "")
	fail("load", `lora_name=x`, 400, "Bad Request", "", "")
	fail("unload", `[]`, 400, "Bad Request", "", "request body must be a JSON object, got array")
	fail("unload", `{"lora_name":"tide","lora_int_id":"one"}`, 400, "Bad Request", "lora_int_id", "")
	fail("unload", `{"lora_name":""}`, 400, "InvalidUserInput", "", "'lora_name' needs to be provided to unload a LoRA adapter.")
	fail("unload", `{"lora_name":"m"}`, 404, "NotFoundError", "", "The lora adapter 'm' cannot be found.")

	ok("unload", `{"lora_name":"tide","lora_int_id":2}`, "Success: LoRA adapter 'tide' removed successfully.")
	if c := served("tide"); c != 404 {
		t.Errorf("an unloaded adapter: %d, want 404", c)
	}
	fail("unload", `{"lora_name":"tide"}`, 404, "NotFoundError", "", "The lora adapter 'tide' cannot be found.")
	// A static adapter unloads too, and its room takes a new one.
	ok("unload", `{"lora_name":"sql"}`, "Success: LoRA adapter 'sql' removed successfully.")
	ok("load", `{"lora_name":"more","lora_path":"/p","is_3d_lora_weight":false,"extra":1}`, "Success: LoRA adapter 'more' added successfully.")
	if got, want := listed(), "m root=m parent=null max_model_len=16384; more root=/p parent=m max_model_len=null"; got != want {
		t.Errorf("at the end: %s, want %s", got, want)
	}
	if code, b := get(t, s, "/v1/load_lora_adapter"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/load_lora_adapter: %d %s", code, b)
	}
}

// TestRuntimeLoRAOff: without RuntimeLoRA both endpoints are unknown, as
// vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING; without adapters either,
// /metrics has no vllm:lora_requests_info (LoRA is not enabled).
func TestRuntimeLoRAOff(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.RuntimeLoRA = false })
	for _, op := range []string{"load", "unload"} {
		code, b := loraPost(t, s, op, `{"lora_name":"x","lora_path":"/p"}`)
		if code != 404 || !strings.Contains(b, "no such endpoint: /v1/"+op+"_lora_adapter") {
			t.Errorf("%s: %d %s", op, code, b)
		}
	}
	if _, b := get(t, s, "/metrics"); bytes.Contains(b, []byte("vllm:lora_requests_info")) {
		t.Errorf("vllm:lora_requests_info without LoRA:\n%s", b)
	}
}

// TestLoRARequestsInfo: /metrics ends with vllm:lora_requests_info, the
// adapters with requests running and waiting (none when idle), max_lora
// and the time as its value.
func TestLoRARequestsInfo(t *testing.T) {
	t.Parallel()
	s := startSim(t, fleetConfig)
	before := float64(time.Now().Unix())
	_, b := get(t, s, "/metrics")
	const want = `vllm:lora_requests_info{max_lora="64",running_lora_adapters="",waiting_lora_adapters=""} `
	i := bytes.Index(b, []byte(want))
	if i < 0 {
		t.Fatalf("no %s in\n%s", want, b)
	}
	line, _, _ := bytes.Cut(b[i+len(want):], []byte("\n"))
	if v, err := strconv.ParseFloat(string(line), 64); err != nil || v < before || v > before+60 {
		t.Errorf("value %q (%v), want the time, about %v", line, err, before)
	}
}

// TestLoRALoadCounts: a request of an adapter counts as waiting from
// submit to admission, then as running until it ends; a base model's
// request is not counted.
func TestLoRALoadCounts(t *testing.T) {
	t.Parallel()
	e, v, start := testEngine(t, nil)
	var load loraLoad
	a := newSeq(distinctKeys(1, 64, 16), 64, 3, &load)
	base := newSeq(distinctKeys(2, 64, 16), 64, 3, nil)
	for _, s := range []*seq{a, base} {
		if err := e.submit(s); err != nil {
			t.Fatal(err)
		}
	}
	if w, r := load.waiting.Load(), load.running.Load(); w != 1 || r != 0 {
		t.Fatalf("submitted: waiting %d running %d", w, r)
	}
	var during [2]int64
	steps := 0
	v.onStep = func() { // on the scheduler, in the first step
		if steps++; steps == 1 {
			during = [2]int64{load.waiting.Load(), load.running.Load()}
		}
	}
	start()
	if wait(a) != seqDone || wait(base) != seqDone {
		t.Fatal("not done")
	}
	if during != [2]int64{0, 1} {
		t.Errorf("in the first step: waiting %d running %d, want 0 and 1", during[0], during[1])
	}
	if w, r := load.waiting.Load(), load.running.Load(); w != 0 || r != 0 {
		t.Errorf("done: waiting %d running %d", w, r)
	}
}

// TestValidateNames: the served names' rules, each error naming its
// flag.
func TestValidateNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mod  func(*Config)
		want string // "" = valid
	}{
		{func(c *Config) { c.ExtraModels = []string{"b", "c"}; c.LoRAModules = []LoRA{{"x", "/p", "c"}} }, ""},
		{func(c *Config) { c.ExtraModels = []string{"sim-llama"} }, `model: "sim-llama" is served already`},
		{func(c *Config) { c.ExtraModels = []string{"a,b"} }, `model: must be 1 to 256 characters`},
		{func(c *Config) { c.LoRAModules = []LoRA{{"sim-llama", "/p", ""}} }, `lora-modules: "sim-llama" is served already`},
		{func(c *Config) { c.LoRAModules = []LoRA{{"x", "/p", ""}, {"x", "/q", ""}} }, `lora-modules: "x" is served already`},
		{func(c *Config) { c.LoRAModules = []LoRA{{"x", "", ""}} }, `lora-modules: adapter "x": the path must be 1 to 4096 bytes, got 0`},
		{func(c *Config) { c.LoRAModules = []LoRA{{"x", "/p", "y"}} }, `lora-modules: adapter "x": base model "y" is not served`},
		{func(c *Config) { c.LoRAModules = []LoRA{{"x", "/p", "z"}, {"z", "/q", ""}} }, `base model "z" is not served`}, // an adapter is no base
		{func(c *Config) { c.MaxLoRAs = 1; c.LoRAModules = []LoRA{{"x", "/p", ""}, {"y", "/q", ""}} }, "lora-modules: 2 adapters, more than max-loras (1)"},
		{func(c *Config) { c.MaxLoRAs = 0 }, "max-loras: must be between 1 and 4096, got 0"},
		{func(c *Config) { c.ExtraModels = make([]string, 256) }, "model: at most 255 names besides the first, got 256"},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v %+v: %v, want %q", c.ExtraModels, c.LoRAModules, err, tc.want)
		}
	}
}

// FuzzDecodeLoRARequest: any load or unload body decodes or gets a 400
// in vLLM's shape, never a panic; a decoded load has its name and path
// as the body's JSON strings.
func FuzzDecodeLoRARequest(f *testing.F) {
	for _, seed := range []string{
		`{"lora_name":"sql","lora_path":"/loras/sql"}`,
		`{"lora_name":"sql","lora_path":"/loras/sql","load_inplace":true,"is_3d_lora_weight":null}`,
		`{"lora_name":"sql","lora_int_id":3}`, `{"lora_name":"a\u0000\"b","lora_path":"\\\\x"}`,
		`{"lora_name":null}`, `{"lora_name":1,"lora_path":[]}`, `{"lora_int_id":1.5,"lora_name":""}`,
		`[]`, `{`, ``, `"x"`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, load bool) {
		r, e := decodeLoRARequest(body, load)
		if e != nil {
			var v struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if e.status != 400 || json.Unmarshal(e.body(), &v) != nil || v.Error.Message == "" || v.Error.Type != "Bad Request" || v.Error.Code != 400 {
				t.Fatalf("error %d %s", e.status, e.body())
			}
			return
		}
		if !load && (r.path != "" || r.inplace) {
			t.Fatalf("an unload decoded %+v from %s", r, body)
		}
		if !utf8.ValidString(r.name) || !utf8.ValidString(r.path) {
			return // encoding/json would replace the invalid bytes
		}
		// What was decoded, encoded again, decodes to the same.
		again, err := json.Marshal(map[string]any{"lora_name": r.name, "lora_path": r.path, "load_inplace": r.inplace})
		if err != nil {
			t.Fatal(err)
		}
		if r2, e := decodeLoRARequest(again, load); e != nil || r2 != r {
			t.Fatalf("decoded %+v from %s, then %+v %v from %s", r, body, r2, e, again)
		}
	})
}

// TestModelsConcurrent: loads and unloads from several goroutines, with
// readers resolving and listing meanwhile (run with -race): each load
// is seen by its own goroutine at once, and the set ends as it began.
func TestModelsConcurrent(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxLoRAs = 4
	ms := newModels(cfg)
	done := make(chan error, 4)
	for g := range 4 {
		go func() { // each loads and unloads its own adapter
			name := fmt.Sprintf("a%d", g)
			for range 50 {
				if _, e := ms.load(name, "/p/"+name, false); e != nil {
					done <- e
					return
				}
				if sm, e := ms.resolve(name); e != nil || sm.parent != "sim-llama" {
					done <- fmt.Errorf("%s after its load: %+v %v", name, sm, e)
					return
				}
				if !bytes.Contains(ms.appendList(nil), []byte(`"id":"`+name+`"`)) {
					done <- fmt.Errorf("%s not listed after its load", name)
					return
				}
				if _, e := ms.unload(name); e != nil {
					done <- e
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if cur := ms.cur.Load(); cur.loras != 0 || len(cur.list) != 1 || len(cur.byName) != 1 {
		t.Errorf("at the end: %d adapters, %d listed", cur.loras, len(cur.list))
	}
}
