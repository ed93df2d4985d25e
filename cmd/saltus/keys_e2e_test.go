package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/keys"
)

// keyFile writes an API key list (replacing the file whole, as an editor
// or a config manager does) and returns its path.
func keyFile(t *testing.T, path string, entries ...string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "keys.yaml")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(entries, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// keyEntry is one key of a key list.
func keyEntry(name, secret, extra string) string {
	return "- name: " + name + "\n  hash: " + keys.FormatHash(keys.HashSecret(secret)) + "\n" + extra
}

const keyChat = `{"model":"llama3","messages":[{"role":"user","content":"hello"}]}`

// TestKeysAuth: 401 without a key or with an unknown one (Bearer and
// x-api-key), a key's models (404, the /v1/models filter), its requests
// per minute (429 with Retry-After, x-ratelimit-* counting down).
func TestKeysAuth(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "a")
	file := keyFile(t, "",
		keyEntry("alpha", "sk-alpha-secret-1", "  models: [llama3]\n  rpm: 3\n"),
		keyEntry("beta", "sk-beta-secret-22", ""))
	s := startServeWith(t, []*upstream{up}, func(c *serveConfig) { c.Keys.File = file })
	url := "http://" + s.addr

	a := s.chat(t, keyChat)
	if a.status != 401 || a.header.Get("WWW-Authenticate") != "Bearer" || a.header.Get("X-Request-ID") == "" {
		t.Fatalf("no key: %d %v %s", a.status, a.header, a.body)
	}
	if e := errorOf(t, a.body); e.Error.Code != "invalid_api_key" || e.Error.Type != "invalid_request_error" || !strings.HasPrefix(e.Error.Message, "You didn't provide an API key.") {
		t.Errorf("no key: %s", a.body)
	}
	for _, hdr := range [][]string{{"Authorization", "Bearer sk-not-a-key-at-all"}, {"X-Api-Key", "sk-not-a-key-at-all"}} {
		a = s.chat(t, keyChat, hdr...)
		if e := errorOf(t, a.body); a.status != 401 || e.Error.Code != "invalid_api_key" || !strings.Contains(e.Error.Message, "Incorrect API key provided: sk-no************ll.") {
			t.Errorf("unknown key in %s: %d %s", hdr[0], a.status, a.body)
		}
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("%d requests forwarded without a valid key", n)
	}
	// x-api-key (Anthropic's clients) and an unlimited key: no
	// x-ratelimit-* headers.
	a = s.chat(t, keyChat, "X-Api-Key", "sk-beta-secret-22")
	if a.status != 200 || a.header.Get("x-ratelimit-limit-requests") != "" {
		t.Fatalf("beta by x-api-key: %d %v", a.status, a.header)
	}
	// A model alpha may not use: 404 in OpenAI's words, nothing forwarded.
	calls := up.calls.Load()
	a = s.chat(t, strings.Replace(keyChat, "llama3", "m", 1), "Authorization", "Bearer sk-alpha-secret-1")
	if e := errorOf(t, a.body); a.status != 404 || e.Error.Code != "model_not_found" || e.Error.Message != "The model `m` does not exist or you do not have access to it." || up.calls.Load() != calls {
		t.Fatalf("model not allowed: %d %s", a.status, a.body)
	}
	// GET /v1/models: a key sees the models it may use.
	listed := func(secret string) []string {
		t.Helper()
		a := do(t, "GET", url+"/v1/models", "", "Authorization", "Bearer "+secret)
		var l struct{ Data []struct{ ID string } }
		if err := json.Unmarshal([]byte(a.body), &l); a.status != 200 || err != nil {
			t.Fatalf("GET /v1/models: %d %v %s", a.status, err, a.body)
		}
		var ids []string
		for _, m := range l.Data {
			ids = append(ids, m.ID)
		}
		return ids
	}
	if ids := listed("sk-alpha-secret-1"); strings.Join(ids, ",") != "llama3" {
		t.Errorf("alpha's models: %v", ids)
	}
	if ids := listed("sk-beta-secret-22"); len(ids) != 3 {
		t.Errorf("beta's models: %v, want all three", ids)
	}
	if a := do(t, "GET", url+"/v1/models", ""); a.status != 401 {
		t.Errorf("GET /v1/models without a key: %d", a.status)
	}
	if a := do(t, "GET", url+"/v1/models/m", "", "Authorization", "Bearer sk-alpha-secret-1"); a.status != 404 || !strings.Contains(a.body, "do not have access") {
		t.Errorf("GET /v1/models/m with alpha: %d %s", a.status, a.body)
	}
	// 3 requests per minute: counted down, then 429. The 404 above took
	// none (refused before its limits were charged).
	for i, want := range []string{"2", "1", "0"} {
		a = s.chat(t, keyChat, "Authorization", "Bearer sk-alpha-secret-1")
		h := a.header
		if a.status != 200 || h.Get("x-ratelimit-limit-requests") != "3" || h.Get("x-ratelimit-remaining-requests") != want || h.Get("x-ratelimit-reset-requests") == "" {
			t.Fatalf("request %d: %d limit %q remaining %q (want %s) reset %q", i+1, a.status,
				h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"), want, h.Get("x-ratelimit-reset-requests"))
		}
	}
	a = s.chat(t, keyChat, "Authorization", "Bearer sk-alpha-secret-1")
	e := errorOf(t, a.body)
	if a.status != 429 || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "requests" || a.header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("over rpm: %d %v %s", a.status, a.header, a.body)
	}
	if ra := a.header.Get("Retry-After"); ra == "" || ra == "0" || !strings.Contains(e.Error.Message, "Rate limit reached for key alpha on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in ") {
		t.Errorf("over rpm: Retry-After %q, %s", ra, e.Error.Message)
	}
	// The adapter endpoints keep the admin token: no key asked.
	if a := do(t, "POST", url+"/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/x"}`); a.status == 401 {
		t.Errorf("adapter load asked for an API key: %s", a.body)
	}
	for series, want := range map[string]float64{
		`saltus_keys_loaded`: 2,
		`saltus_keys_unauthorized_total{reason="missing"}`:                 2,
		`saltus_keys_unauthorized_total{reason="unknown"}`:                 2,
		`saltus_key_requests_total{key="alpha",outcome="ok"}`:              3,
		`saltus_key_requests_total{key="beta",outcome="ok"}`:               1,
		`saltus_key_refused_total{key="alpha",reason="rate_requests"}`:     1,
		`saltus_key_refused_total{key="alpha",reason="model_not_allowed"}`: 1,
	} {
		if got := s.metric(t, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// TestKeysOff: without keys nothing asks for one and no answer carries
// x-ratelimit-* headers.
func TestKeysOff(t *testing.T) {
	t.Parallel()
	s := startServeWith(t, []*upstream{newUpstream(t, "a")}, nil)
	a := s.chat(t, keyChat)
	if a.status != 200 {
		t.Fatalf("no key, keys off: %d %s", a.status, a.body)
	}
	for name := range a.header {
		if strings.HasPrefix(strings.ToLower(name), "x-ratelimit") {
			t.Errorf("keys off: header %s", name)
		}
	}
	if got := s.metric(t, "saltus_keys_loaded"); got != 0 {
		t.Errorf("saltus_keys_loaded %v", got)
	}
}

// TestKeysTokens: tokens per minute are charged from the engine's usage
// (streamed answers too, whose usage saltus asks for and removes), and a
// request over what is left is refused 429 type tokens.
func TestKeysTokens(t *testing.T) {
	t.Parallel()
	sim := startSim(t, func(c *vllmsim.Config) { c.Speedup = 100 })
	file := keyFile(t, "", keyEntry("gamma", "sk-gamma-secret-3", "  tpm: 400\n"))
	s := startServeWith(t, nil, func(c *serveConfig) { c.Keys.File = file; c.Router.Policy = "round_robin" }, sim.URL())
	auth := []string{"Authorization", "Bearer sk-gamma-secret-3"}
	body := `{"model":"llama3","max_tokens":8,"messages":[{"role":"user","content":"hello there"}]}`
	a := s.chat(t, body, auth...)
	if a.status != 200 || a.header.Get("x-ratelimit-limit-tokens") != "400" || a.header.Get("x-ratelimit-remaining-tokens") == "" {
		t.Fatalf("first request: %d %v %s", a.status, a.header, a.body)
	}
	var u struct {
		Usage struct{ PromptTokens, CompletionTokens int } `json:"usage"`
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(a.body), &raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(bytes.ReplaceAll(raw["usage"], []byte("_tokens"), []byte("tokens")), &u.Usage); err != nil || u.Usage.PromptTokens == 0 {
		t.Fatalf("the engine's usage: %s (%v)", raw["usage"], err)
	}
	waitFor(t, func() bool {
		return s.metric(t, `saltus_key_tokens_total{key="gamma",kind="prompt"}`) == float64(u.Usage.PromptTokens) &&
			s.metric(t, `saltus_key_tokens_total{key="gamma",kind="completion"}`) == float64(u.Usage.CompletionTokens)
	})
	// Streamed, without include_usage: charged all the same, and the
	// client's stream has no usage chunk.
	a = s.chat(t, strings.Replace(body, `"max_tokens":8`, `"max_tokens":8,"stream":true`, 1), auth...)
	if a.status != 200 || strings.Contains(a.body, `"usage":{`) {
		t.Fatalf("stream: %d %s", a.status, a.body)
	}
	waitFor(t, func() bool {
		return s.metric(t, `saltus_key_tokens_total{key="gamma",kind="prompt"}`) == float64(2*u.Usage.PromptTokens)
	})
	// A request whose max_tokens alone is over the limit: too large.
	a = s.chat(t, strings.Replace(body, `"max_tokens":8`, `"max_tokens":500`, 1), auth...)
	if e := errorOf(t, a.body); a.status != 429 || e.Error.Type != "tokens" || !strings.Contains(e.Error.Message, "Request too large for key gamma on tokens per min (TPM): Limit 400") {
		t.Fatalf("too large: %d %s", a.status, a.body)
	}
	// Spend the rest: within a few requests one is refused for tokens,
	// with Retry-After.
	var refused answer
	for i := 0; i < 40 && refused.status == 0; i++ {
		a = s.chat(t, strings.Replace(body, `"max_tokens":8`, `"max_tokens":100`, 1), auth...)
		switch a.status {
		case 200:
		case 429:
			refused = a
		default:
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	e := errorOf(t, refused.body)
	if refused.status != 429 || e.Error.Type != "tokens" || refused.header.Get("Retry-After") == "" || !strings.Contains(e.Error.Message, "on tokens per min (TPM): Limit 400, Used ") {
		t.Fatalf("over tpm: %d %v %s", refused.status, refused.header, refused.body)
	}
	if got := s.metric(t, `saltus_key_refused_total{key="gamma",reason="rate_tokens"}`); got != 2 {
		t.Errorf("rate_tokens refusals: %v, want 2", got)
	}
}

// TestKeysReload: a rewritten key file is in force within its check
// interval: a new key accepted, a removed one refused; an invalid one
// keeps the keys in force, counted.
func TestKeysReload(t *testing.T) {
	t.Parallel()
	file := keyFile(t, "", keyEntry("old", "sk-old-secret-000", ""))
	s := startServeWith(t, []*upstream{newUpstream(t, "a")}, func(c *serveConfig) { c.Keys.File = file })
	auth := func(secret string) int {
		return s.chat(t, keyChat, "Authorization", "Bearer "+secret).status
	}
	if st := auth("sk-old-secret-000"); st != 200 {
		t.Fatalf("old key: %d", st)
	}
	keyFile(t, file, keyEntry("new", "sk-new-secret-000", ""))
	waitLong(t, "the new key", func() bool { return auth("sk-new-secret-000") == 200 })
	if st := auth("sk-old-secret-000"); st != 401 {
		t.Fatalf("removed key: %d, want 401", st)
	}
	// An invalid file: refused, counted; the keys in force stay.
	keyFile(t, file, "- name: bad\n  hash: sk-plaintext\n")
	waitLong(t, "the invalid file's error", func() bool { return s.metric(t, `saltus_keys_reloads_total{result="error"}`) >= 1 })
	if st := auth("sk-new-secret-000"); st != 200 {
		t.Fatalf("after an invalid file: %d", st)
	}
	if got := s.metric(t, `saltus_keys_reloads_total{result="ok"}`); got != 1 {
		t.Errorf("reloads ok: %v, want 1", got)
	}
	if !strings.Contains(s.logs(), "API key file not loaded") {
		t.Error("the invalid file was not logged")
	}
}

// TestKeysHashCommand: `saltus keys hash` prints the hash of the secret
// on stdin; `keys new` a secret and its hash.
func TestKeysHashCommand(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run([]string{"keys", "hash", "--name", "team-a"}, strings.NewReader("test\n"), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := "- name: team-a\n  hash: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"; out.String() != want {
		t.Fatalf("keys hash printed %q, want %q", out.String(), want)
	}
	for _, in := range []string{"", "\n", "a b\n", strings.Repeat("x", 1025)} {
		out.Reset()
		if code := run([]string{"keys", "hash"}, strings.NewReader(in), &out, &errb); code == 0 {
			t.Errorf("keys hash of %.20q: exit 0, %q", in, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"keys", "new"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("keys new: exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	secret := strings.TrimPrefix(lines[1], "# ")
	if len(lines) != 3 || lines[2] != "hash: "+keys.FormatHash(keys.HashSecret(secret)) {
		t.Fatalf("keys new: %q", out.String())
	}
	specs, err := keys.Parse("printed", []byte(fmt.Sprintf("- name: x\n  %s\n", lines[2])))
	if err != nil || len(specs) != 1 {
		t.Fatalf("the printed hash does not load: %v", err)
	}
	if code := run([]string{"keys"}, strings.NewReader(""), &out, &errb); code != 2 {
		t.Errorf("keys without a command: exit %d", code)
	}
}

// TestKeysSIGHUP: a reload (SIGHUP, POST /admin/reload) reads the key
// file at once, whatever its periodic check would do; a reload whose key
// file is invalid is refused with the file's error, and the keys in force
// stay.
func TestKeysSIGHUP(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "a")
	file := keyFile(t, "", keyEntry("old", "sk-old-secret-000", ""))
	args := []string{"--backend", up.srv.URL, "--api-keys-file", file, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--shards", "2"}
	cfg, _, err := loadServeConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Keys.Interval = time.Hour // only the reload reads the file
	s := startServeCfg(t, cfg, args)
	auth := func(secret string) int {
		return s.chat(t, keyChat, "Authorization", "Bearer "+secret).status
	}
	if st := auth("sk-old-secret-000"); st != 200 {
		t.Fatalf("old key: %d", st)
	}
	keyFile(t, file, keyEntry("new", "sk-new-secret-000", ""))
	s.signals <- syscall.SIGHUP
	waitLong(t, "the new key after SIGHUP", func() bool { return auth("sk-new-secret-000") == 200 })
	if st := auth("sk-old-secret-000"); st != 401 {
		t.Fatalf("removed key after SIGHUP: %d", st)
	}
	keyFile(t, file, "- name: bad\n  hash: sk-plaintext\n")
	if a := s.adm(t, "POST", "/admin/reload", ""); a.status != 400 || !strings.Contains(a.body, "keys[0].hash") {
		t.Fatalf("reload with an invalid key file: %d %s", a.status, a.body)
	}
	if st := auth("sk-new-secret-000"); st != 200 {
		t.Fatalf("after an invalid key file: %d", st)
	}
}

// TestKeysQueuedClientLeaves: a keyed request that waits in the gateway
// queue and whose client leaves gets its tokens back (nothing answers it
// to settle them): the key's outcome "error" counts it (without the
// refund nothing counts it).
func TestKeysQueuedClientLeaves(t *testing.T) {
	t.Parallel()
	sim := startSlowOneSeatSim(t)
	file := keyFile(t, "", keyEntry("delta", "sk-delta-secret-4", "  tpm: 100000\n"))
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = []string{sim.URL()}
		c.Keys.File = file
	})
	const auth = "Authorization: Bearer sk-delta-secret-4\r\n"
	keyed := func(i int) string { return strings.Replace(queuedChat(i, 0), "Host: x\r\n", "Host: x\r\n"+auth, 1) }
	// The engine's two, then one that waits in saltus's queue.
	for i := range 2 {
		c := dialRaw(t, s.addr)
		c.send(t, keyed(i))
		waitLong(t, "the engine to take it", func() bool { st := sim.Stats(); return st.Running+st.Waiting >= i+1 })
	}
	c := dialRaw(t, s.addr)
	c.send(t, keyed(2))
	waitLong(t, "a request queued", func() bool { return metricSum(s.metrics(t), "saltus_queue_depth") == 1 })
	c.Close()
	waitLong(t, "the queued keyed request settled", func() bool {
		return s.metrics(t)[`saltus_key_requests_total{key="delta",outcome="error"}`] == 1 // the series appears with the key's first outcome
	})
}
