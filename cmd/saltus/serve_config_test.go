package main

import (
	"bytes"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/gossip"
)

// writeFile writes a config file into a test's temp dir.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestServeConfigMerge(t *testing.T) {
	t.Parallel()
	const file = `
listen: 0.0.0.0:8000
backends: [http://10.0.0.1:8000, http://10.0.0.2:8000]
block-size: 32
max-body: 1MiB
drain-timeout: 45s
load-factor: 1.5
log-format: json
`
	for _, tc := range []struct {
		name  string
		yaml  string // "" = no --config
		flags []string
		want  func(*serveConfig)
	}{
		{"defaults", "", nil, func(*serveConfig) {}},
		{"empty file", "\n", nil, func(*serveConfig) {}},
		{"comments only", "# nothing\n", nil, func(*serveConfig) {}},
		{"file", file, nil, func(c *serveConfig) {
			c.Reactor.Listen = "0.0.0.0:8000"
			c.Backends = []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"}
			c.Router.BlockSize = 32
			c.Reactor.MaxBodyBytes = 1 << 20
			c.DrainTimeout = 45 * time.Second
			c.Router.LoadFactor = 1.5
			c.LogFormat = "json"
		}},
		{"flags over file", file, []string{"--block-size", "64", "--max-body=512KiB", "--log-format", "text", "--pin-shards"}, func(c *serveConfig) {
			c.Reactor.Listen = "0.0.0.0:8000"
			c.Backends = []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"}
			c.Router.BlockSize = 64
			c.Reactor.MaxBodyBytes = 512 << 10
			c.DrainTimeout = 45 * time.Second
			c.Router.LoadFactor = 1.5
			c.LogFormat = "text"
			c.Reactor.LockOSThread = true
		}},
		// A flag given with the default's value still wins over the file:
		// what counts is that it was given (flag.Visit), not its value.
		{"flag equal to default", file, []string{"--block-size=16", "--drain-timeout", "30s", "--listen", "127.0.0.1:8080"}, func(c *serveConfig) {
			c.Backends = []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"}
			c.Reactor.MaxBodyBytes = 1 << 20
			c.Router.LoadFactor = 1.5
			c.LogFormat = "json"
		}},
		{"backend flags replace the file's", file, []string{"--backend", "http://b:1", "--backend=http://c:2,http://d:3"}, func(c *serveConfig) {
			c.Reactor.Listen = "0.0.0.0:8000"
			c.Backends = []string{"http://b:1", "http://c:2", "http://d:3"}
			c.Router.BlockSize = 32
			c.Reactor.MaxBodyBytes = 1 << 20
			c.DrainTimeout = 45 * time.Second
			c.Router.LoadFactor = 1.5
			c.LogFormat = "json"
		}},
		{"every flag", "", []string{
			"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--admin-token", "tok",
			"--backend", "http://[::1]:9", "--tokenizer", ".", "--chat-template", "qwen3",
			"--block-size", "1", "--shards", "3", "--pin-shards=true", "--policy", "least_request",
			"--max-body", "2MB", "--max-body-values", "1000", "--max-body-depth", "8", "--max-header", "1KiB", "--max-conns", "7",
			"--header-timeout", "1s", "--idle-timeout", "2s", "--connect-timeout", "3s",
			"--first-byte-timeout", "4s", "--request-timeout", "1h", "--stream-idle-timeout", "5s", "--max-response-body", "1MiB", "--backend-header", "name",
			"--max-retries", "0", "--health-interval", "500ms", "--health-down-interval", "200ms",
			"--drain-timeout", "0s", "--max-blocks", "5", "--route-ttl", "90m",
			"--load-factor", "1", "--learn-from-usage=false", "--scrape-interval", "1s", "--gc-heap-floor", "1MiB", "--token-budget", "64KiB", "--admin-pprof", "--log-format", "json", "--log-level", "DEBUG",
		}, func(c *serveConfig) {
			c.Reactor.Listen, c.Admin.Listen, c.Admin.BearerToken, c.Admin.Pprof = "127.0.0.1:0", "127.0.0.1:0", "tok", true
			c.Backends, c.Tokenizer, c.Router.ChatTemplate = []string{"http://[::1]:9"}, ".", "qwen3"
			c.Router.BlockSize, c.Reactor.Loops, c.Reactor.LockOSThread, c.Router.Policy = 1, 3, true, "least_request"
			c.Reactor.MaxBodyBytes, c.Router.Body.MaxValues, c.Router.Body.MaxDepth, c.Reactor.MaxHeaderBytes, c.Reactor.MaxConns = 2e6, 1000, 8, 1<<10, 7
			c.Reactor.HeaderTimeout, c.Reactor.IdleTimeout = time.Second, 2*time.Second
			c.Backend.ConnectTimeout, c.Backend.FirstByteTimeout = 3*time.Second, 4*time.Second
			c.Backend.RequestTimeout, c.Backend.StreamIdleTimeout, c.Backend.MaxResponseBody, c.Backend.BackendHeader = time.Hour, 5*time.Second, 1<<20, "name"
			c.Backend.MaxRetries, c.Backend.HealthInterval, c.Backend.HealthDownInterval, c.DrainTimeout = 0, 500*time.Millisecond, 200*time.Millisecond, 0
			c.Router.Tree.MaxBlocks, c.Router.Tree.TTL, c.Router.LoadFactor, c.Router.LearnFromUsage = 5, 90*time.Minute, 1, false
			c.Backend.ScrapeInterval, c.GCHeapFloor, c.Router.Pool.TokenBudget = time.Second, 1<<20, 64<<10
			c.LogFormat, c.LogLevel = "json", "DEBUG"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := tc.flags
			if tc.yaml != "" {
				args = append([]string{"--config", writeFile(t, "saltus.yaml", tc.yaml)}, args...)
			}
			got, dry, err := loadServeConfig(args, io.Discard)
			if err != nil || dry {
				t.Fatalf("loadServeConfig(%q) = %v (dry %v)", args, err, dry)
			}
			want := defaultServeConfig()
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("loadServeConfig(%q)\n got %+v\nwant %+v", args, got, want)
			}
		})
	}
}

func TestServeConfigValidate(t *testing.T) {
	t.Parallel()
	if err := defaultServeConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		mut  func(*serveConfig)
		want string
	}{
		{func(c *serveConfig) { c.Reactor.Listen = "8080" }, `config: listen: want host:port, got "8080"`},
		{func(c *serveConfig) { c.Reactor.Listen = "h:99999" }, `config: listen: want host:port with a port number in [0, 65535], got "h:99999"`},
		{func(c *serveConfig) { c.Admin.Listen = "" }, `config: admin-listen: want host:port, got ""`},
		{func(c *serveConfig) { c.Admin.Listen = c.Reactor.Listen }, `config: admin-listen: must differ from listen, both are "127.0.0.1:8080"`},
		{func(c *serveConfig) { c.Admin.BearerToken = "a\tb" }, `config: admin-token: must be printable ASCII without spaces (byte 1 is 0x9)`},
		{func(c *serveConfig) { c.Backends = []string{"http://a:1", "a:1"} }, `config: backends[1]: want http://host:port or https://host:port, got "a:1": scheme must be http or https`},
		{func(c *serveConfig) { c.Backends = []string{"http://a:1", "http://a:1"} }, `config: backends[1]: "http://a:1" repeats backends[0]`},
		{func(c *serveConfig) { c.Backends = []string{"http://a"} }, `config: backends[0]: want http://host:port or https://host:port, got "http://a": address a: missing port in address`},
		{func(c *serveConfig) { c.Tokenizer = "/nonexistent/tokenizer.json" }, `config: tokenizer: cannot read it: stat /nonexistent/tokenizer.json: no such file or directory`},
		{func(c *serveConfig) { c.Router.ChatTemplate = "llama4" }, `config: chat-template: unknown template "llama4", want one of llama3, chatml, qwen3, mistral, llama2, harmony, none (or empty: detect from the tokenizer)`},
		{func(c *serveConfig) { c.Router.ChatTemplate, c.Router.ChatTemplateFile = "llama3", "t.jinja" }, `config: chat-template-file: excludes chat-template ("llama3"): give one`},
		{func(c *serveConfig) { c.Router.ChatTemplateFile = "/nonexistent/t.jinja" }, `config: chat-template-file: cannot read it: stat /nonexistent/t.jinja: no such file or directory`},
		{func(c *serveConfig) { c.Router.BlockSize = 0 }, `config: block-size: must be a power of two between 1 and 1024, got 0`},
		{func(c *serveConfig) { c.Router.BlockSize = 24 }, `config: block-size: must be a power of two between 1 and 1024, got 24`},
		{func(c *serveConfig) { c.Router.BlockSize = 2048 }, `config: block-size: must be a power of two between 1 and 1024, got 2048`},
		{func(c *serveConfig) { c.Reactor.Loops = -1 }, `config: shards: must be between 0 (GOMAXPROCS) and 1024, got -1`},
		{func(c *serveConfig) { c.Router.Policy = "round-robin" }, `config: policy: unknown policy "round-robin", want one of prefix, round_robin, least_request, consistent_hash, body_hash, ranvier`},
		{func(c *serveConfig) { c.Router.Policy = "" }, `config: policy: unknown policy "", want one of prefix, round_robin, least_request, consistent_hash, body_hash, ranvier`},
		{func(c *serveConfig) { c.Reactor.MaxBodyBytes = 1000 }, `config: max-body: must be between 1KiB and 1GiB, got 1000B`},
		{func(c *serveConfig) { c.Reactor.MaxBodyBytes = 2 << 30 }, `config: max-body: must be between 1KiB and 1GiB, got 2GiB`},
		{func(c *serveConfig) { c.Reactor.MaxHeaderBytes = 2 << 20 }, `config: max-header: must be between 1KiB and 1MiB, got 2MiB`},
		{func(c *serveConfig) { c.Router.Body.MaxValues = 0 }, `config: max-body-values: must be at least 1, got 0`},
		{func(c *serveConfig) { c.Router.Body.MaxDepth = 300 }, `config: max-body-depth: must be between 1 and 256, got 300`},
		{func(c *serveConfig) { c.GCHeapFloor = 5 << 30 }, `config: gc-heap-floor: must be between 0 and 4GiB, got 5GiB`},
		{func(c *serveConfig) { c.Router.Pool.TokenBudget = 100 }, `config: token-budget: must be between 1KiB and 1GiB, got 100B`},
		{func(c *serveConfig) { c.Reactor.MaxConns = 0 }, `config: max-conns: must be at least 1, got 0`},
		{func(c *serveConfig) { c.Reactor.HeaderTimeout = 0 }, `config: header-timeout: must be positive, got 0s`},
		{func(c *serveConfig) { c.Reactor.IdleTimeout = -1 }, `config: idle-timeout: must be positive, got -1ns`},
		{func(c *serveConfig) { c.Backend.ConnectTimeout = 0 }, `config: connect-timeout: must be positive, got 0s`},
		{func(c *serveConfig) { c.Backend.FirstByteTimeout = 0 }, `config: first-byte-timeout: must be positive, got 0s`},
		{func(c *serveConfig) { c.Backend.HealthInterval = 0 }, `config: health-interval: must be positive, got 0s`},
		{func(c *serveConfig) { c.Backend.HealthDownInterval = 0 }, `config: health-down-interval: must be positive, got 0s`},
		{func(c *serveConfig) { c.Backend.RequestTimeout = -time.Second }, `config: request-timeout: must not be negative (0 = no limit), got -1s`},
		{func(c *serveConfig) { c.Backend.MaxResponseBody = 100 }, `config: max-response-body: must be between 1KiB and 1GiB, got 100B`},
		{func(c *serveConfig) { c.Backend.BackendHeader = "ip" }, `config: backend-header: must be "url", "name" or "none", got "ip"`},
		{func(c *serveConfig) { c.Backends = []string{"a=http://h:1", "a=http://h:2"} }, `config: backends[1]: the name "a" repeats backends[0]'s`},
		{func(c *serveConfig) { c.Backends = []string{"a=http://h:1", "b=http://h:1"} }, `config: backends[1]: "http://h:1" repeats backends[0]`},
		{func(c *serveConfig) { c.Backends = []string{"=http://h:1"} }, `config: backends[0]: backend: name "" must be 1 to 64 characters`},
		{func(c *serveConfig) { c.Backends = []string{"a b=http://h:1"} }, `config: backends[0]: backend: name "a b": only letters, digits, '.', '_' and '-' are allowed`},
		{func(c *serveConfig) { c.Backends = []string{"backend-7=http://h:1"} }, `config: backends[0]: backend: name "backend-7" is reserved (backend-<id> names the backends without a name)`},
		{func(c *serveConfig) { c.Router.Tree.TTL = 0 }, `config: route-ttl: must be positive, got 0s`},
		{func(c *serveConfig) { c.DrainTimeout = -time.Second }, `config: drain-timeout: must not be negative (0 = do not wait), got -1s`},
		{func(c *serveConfig) { c.Backend.MaxRetries = 11 }, `config: max-retries: must be between 0 and 10, got 11`},
		{func(c *serveConfig) { c.UpstreamIO = "epoll" }, `config: upstream-io: was removed: every request takes the loop path (drop the key), got "epoll"`},
		{func(c *serveConfig) { c.Router.Tree.MaxBlocks = 0 }, `config: max-blocks: must be between 1 and 2147483646, got 0`},
		{func(c *serveConfig) { c.Router.LoadFactor = 0.5 }, `config: load-factor: must be a finite number of at least 1, got 0.5`},
		{func(c *serveConfig) { c.Router.LoadFactor = math.NaN() }, `config: load-factor: must be a finite number of at least 1, got NaN`},
		{func(c *serveConfig) { c.Router.LoadFactor = math.Inf(1) }, `config: load-factor: must be a finite number of at least 1, got +Inf`},
		{func(c *serveConfig) { c.LogFormat = "logfmt" }, `config: log-format: must be "text" or "json", got "logfmt"`},
		{func(c *serveConfig) { c.LogLevel = "loud" }, `config: log-level: want debug, info, warn or error, got "loud"`},
		// Every invalid key is reported, one line each.
		{func(c *serveConfig) { c.Router.BlockSize, c.Reactor.MaxConns = 3, -5 },
			"config: block-size: must be a power of two between 1 and 1024, got 3\nconfig: max-conns: must be at least 1, got -5"},
	} {
		c := defaultServeConfig()
		tc.mut(&c)
		if err := c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("Validate() = %v\nwant %s", err, tc.want)
		}
	}
	// Both listeners on port 0 is fine (tests).
	c := defaultServeConfig()
	c.Reactor.Listen, c.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	if err := c.Validate(); err != nil {
		t.Errorf("both on port 0: %v", err)
	}
}

func TestServeYAMLErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"listen: a:1\nlisten_addr: b:2\n", `config F: line 2: unknown key "listen_addr"`},
		{"backend: [http://a:1]\n", `config F: line 1: unknown key "backend" (the key is "backends")`},
		{"block-size: 16\nblock-size: 32\n", `config F: line 2: block-size: repeats the key of line 1`},
		{"block-size: abc\n", "config F: line 1: block-size: cannot unmarshal !!str `abc` into int"},
		{"pin-shards: maybe\n", "config F: line 1: pin-shards: cannot unmarshal !!str `maybe` into bool"},
		{"backends: http://a:1\n", "config F: line 1: backends: cannot unmarshal !!str `http://a:1` into []string"},
		{"header-timeout: 10\n", `config F: line 1: header-timeout: want a duration with a unit, like 10s, 500ms or 1h, got "10"`},
		{"header-timeout: [1s]\n", `config F: line 1: header-timeout: want a duration with a unit, like 10s, 500ms or 1h`},
		{"max-body: 16 parsecs\n", `config F: line 1: max-body: unknown size unit "parsecs" in "16 parsecs": want B, KiB, MiB, GiB, KB, MB or GB`},
		{"max-header: -1KiB\n", `config F: line 1: max-header: want a size like 16MiB, 512KiB or 65536 (bytes), got "-1KiB"`},
		{"- listen\n", `config F: line 1: want a mapping of keys (listen, backends, ...) to values`},
		{"listen: a:1\n---\nlisten: b:1\n", `config F: want one YAML document, found more`},
		{"listen: [a\n", `config F: line 1: did not find expected ',' or ']'`},
		// Several errors: all of them.
		{"\nfoo: 1\nshards: x\n", "config F: line 2: unknown key \"foo\"\nconfig F: line 3: shards: cannot unmarshal !!str `x` into int"},
	} {
		cfg := defaultServeConfig()
		err := decodeServeYAML("F", []byte(tc.yaml), &cfg)
		if err == nil || err.Error() != tc.want {
			t.Errorf("decodeServeYAML(%q) = %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
	// Decoding mentions only what it changed: a failed key keeps its value.
	cfg := defaultServeConfig()
	_ = decodeServeYAML("F", []byte("block-size: x\nshards: 4\n"), &cfg)
	if cfg.Router.BlockSize != 16 || cfg.Reactor.Loops != 4 {
		t.Errorf("after a partial decode: block-size %d shards %d, want 16 4", cfg.Router.BlockSize, cfg.Reactor.Loops)
	}
}

func TestServeConfigFileErrors(t *testing.T) {
	t.Parallel()
	_, _, err := loadServeConfig([]string{"--config", "/nonexistent/saltus.yaml"}, io.Discard)
	if err == nil || err.Error() != "config: cannot read open /nonexistent/saltus.yaml: no such file or directory" {
		t.Errorf("missing file: %v", err)
	}
	// Validation runs on the merged result: the flag fixes the file.
	p := writeFile(t, "s.yaml", "block-size: 3\n")
	if _, _, err := loadServeConfig([]string{"--config", p}, io.Discard); err == nil ||
		err.Error() != "config: block-size: must be a power of two between 1 and 1024, got 3" {
		t.Errorf("invalid file: %v", err)
	}
	if _, _, err := loadServeConfig([]string{"--config", p, "--block-size", "8"}, io.Discard); err != nil {
		t.Errorf("flag over an invalid file value: %v", err)
	}
	var out bytes.Buffer
	if _, _, err := loadServeConfig([]string{"--block-size", "x"}, &out); err != errUsage ||
		!strings.Contains(out.String(), `invalid value "x" for flag -block-size`) {
		t.Errorf("bad flag value: %v, output %q", err, out.String())
	}
	if _, _, err := loadServeConfig([]string{"--max-body", "2 furlongs"}, &out); err != errUsage ||
		!strings.Contains(out.String(), `unknown size unit "furlongs"`) {
		t.Errorf("bad size flag: %v, output %q", err, out.String())
	}
	if _, _, err := loadServeConfig([]string{"--help"}, io.Discard); err != flag.ErrHelp {
		t.Errorf("--help: %v", err)
	}
}

// TestExampleConfig: the committed example loads, validates, holds every
// key, and states the defaults (but for its two backends).
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	const path = "../../saltus.example.yaml"
	got, _, err := loadServeConfig([]string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := defaultServeConfig()
	want.Backends = []string{"http://127.0.0.1:8001", "http://127.0.0.1:8002"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("example config\n got %+v\nwant %+v", got, want)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cf := range serveKeys {
		if cf.key == "response-timeout" || cf.key == "upstream-io" {
			continue // deprecated: not shown
		}
		if !bytes.Contains(data, []byte("\n"+cf.key+":")) {
			t.Errorf("saltus.example.yaml lacks the key %q", cf.key)
		}
	}
}

// TestEveryKeyHasFlag: each config key is a flag, each flag (but --config
// and --dry-run) a key, and the help shows each with a default.
func TestEveryKeyHasFlag(t *testing.T) {
	t.Parallel()
	f := newServeFlags(io.Discard, nil)
	keys := map[string]bool{"config": true, "dry-run": true}
	for _, cf := range serveKeys {
		keys[cf.flagName()] = true
		if f.fs.Lookup(cf.flagName()) == nil {
			t.Errorf("key %q has no flag --%s", cf.key, cf.flagName())
		}
	}
	var help bytes.Buffer
	f.usage(&help)
	f.fs.VisitAll(func(fl *flag.Flag) {
		if !keys[fl.Name] {
			t.Errorf("flag --%s is no config key", fl.Name)
		}
		i := strings.Index(help.String(), "\n  --"+fl.Name+" ")
		if i < 0 {
			i = strings.Index(help.String(), "\n  --"+fl.Name+"\n")
		}
		if i < 0 {
			t.Errorf("help lacks --%s", fl.Name)
			return
		}
		entry, _, _ := strings.Cut(help.String()[i+1:], "\n  --")
		if !strings.Contains(entry, "(default ") {
			t.Errorf("help of --%s has no default: %q", fl.Name, entry)
		}
	})
	for _, want := range []string{
		"  --max-body size\n      largest request body (size: B, KiB, MiB, GiB), 1KiB–1GiB; larger ones get 413 [reloadable] (default 16MiB)\n",
		"  --idle-timeout duration\n      duration an idle keep-alive client connection stays open [reloadable] (default 1m)\n",
		"  --backend URL\n",
		"  --pin-shards\n      lock each event loop to its own OS thread (default false)\n",
	} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

const defaultYAML = `# saltus serve: effective configuration (defaults, then --config, then flags)
listen: 127.0.0.1:8080
tls-cert-file: ""
tls-key-file: ""
tls-handshake-timeout: 10s
admin-listen: 127.0.0.1:9180
admin-token: ""
admin-pprof: false
admin-tls-cert-file: ""
admin-tls-key-file: ""
admin-tls-client-ca-file: ""
backends: []
backend-models: []
models-interval: 5s
backend-priority: []
model-priority: []
backend-max-concurrency: []
kv-events: []
kv-events-port: 0
kv-events-replay: []
kv-events-replay-port: 0
kv-events-ranks: 1
kv-events-listen: ""
kv-events-bridge: 10s
queue-max-entries: 1024
queue-max-wait: 1m
engine-queue: -1
queue-affinity: 32
api-keys-file: ""
tenant-header: ""
adapter-updates: true
adapter-engines: 0
backend-tls-ca-file: ""
backend-tls-insecure-skip-verify: false
tokenizer: ""
chat-template: ""
chat-template-file: ""
block-size: 16
shards: 0
pin-shards: false
policy: prefix
session-header: ""
max-body: 16MiB
max-body-values: 1100000
max-body-depth: 64
max-header: 64KiB
max-conns: 10000
header-timeout: 10s
idle-timeout: 1m
connect-timeout: 2s
first-byte-timeout: 10m
request-timeout: 0s
stream-idle-timeout: 2m
max-response-body: 8MiB
backend-header: url
max-retries: 2
retry-server-errors: false
health-interval: 5s
health-down-interval: 1s
drain-timeout: 30s
max-blocks: 1000000
route-ttl: 1h
load-factor: 2
load-slack: 1
load-tokens: 500
kv-tokens: 0
learn-from-usage: true
scrape-interval: 1s
gc-heap-floor: 32MiB
memory-limit: 0B
memory-give-back: 5s
token-budget: 128KiB
cluster-bind: ""
cluster-advertise: ""
join: []
cluster-key-file: ""
node-name: ""
discovery: ""
k8s-service: ""
k8s-namespace: ""
k8s-port-name: ""
k8s-kubeconfig: ""
k8s-model-selector: []
state-dir: ""
state-interval: 1m
otel-endpoint: ""
otel-sample-ratio: -1
log-format: text
log-level: info
access-log: ""
access-log-format: json
access-log-max-size: 0B
access-log-max-files: 5
access-log-sample: 1
access-log-buffer: 8192
`

func TestDryRun(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--dry-run"}, nil, &out, &errb); code != 0 || out.String() != defaultYAML || errb.Len() != 0 {
		t.Errorf("serve --dry-run: %d, stdout\n%s\nstderr %q", code, out.String(), errb.String())
	}

	args := []string{"serve", "--dry-run", "--backend", "http://a:1,http://b:2", "--max-body", "1000000",
		"--route-ttl", "90m", "--admin-token", "secret", "--load-factor", "1.25", "--health-interval", "1500ms"}
	out.Reset()
	if code := run(args, nil, &out, &errb); code != 0 {
		t.Fatalf("%q: %d %s", args, code, errb.String())
	}
	want := strings.NewReplacer(
		`admin-token: ""`, "admin-token: REDACTED",
		"backends: []", "backends:\n  - http://a:1\n  - http://b:2",
		"max-body: 16MiB", "max-body: 1000000B",
		"route-ttl: 1h", "route-ttl: 1h30m",
		"load-factor: 2", "load-factor: 1.25",
		"health-interval: 5s", "health-interval: 1.5s",
	).Replace(defaultYAML)
	if out.String() != want {
		t.Errorf("dry-run output\n%s\nwant\n%s", out.String(), want)
	}
	// What dry-run prints loads back to the same configuration.
	p := writeFile(t, "effective.yaml", out.String())
	back, _, err := loadServeConfig([]string{"--config", p}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	orig, _, _ := loadServeConfig(args[1:], io.Discard)
	orig.Admin.BearerToken = "REDACTED"
	if !reflect.DeepEqual(back, orig) {
		t.Errorf("dry-run output loads back as\n%+v\nwant\n%+v", back, orig)
	}

	// Errors: exit 2, one line per key, nothing on stdout.
	out.Reset()
	errb.Reset()
	if code := run([]string{"serve", "--dry-run", "--block-size", "0", "--log-format", "xml"}, nil, &out, &errb); code != 2 || out.Len() != 0 ||
		errb.String() != "saltus serve: config: block-size: must be a power of two between 1 and 1024, got 0\n"+
			"saltus serve: config: log-format: must be \"text\" or \"json\", got \"xml\"\n" {
		t.Errorf("invalid dry-run: %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	ok := func(in string, want byteSize, str string) {
		t.Helper()
		got, err := parseByteSize(in)
		if err != nil || got != want || got.String() != str {
			t.Errorf("parseByteSize(%q) = %d (%v), %v; want %d (%s)", in, got, got, err, want, str)
		}
	}
	ok("16MiB", 16<<20, "16MiB")
	ok("512KiB", 512<<10, "512KiB")
	ok(" 512 kib ", 512<<10, "512KiB")
	ok("2GiB", 2<<30, "2GiB")
	ok("65536", 64<<10, "64KiB")
	ok("1000", 1000, "1000B")
	ok("1000B", 1000, "1000B")
	ok("16MB", 16e6, "15625KiB")
	ok("1KB", 1000, "1000B")
	ok("1GB", 1e9, "1000000000B")
	ok("0", 0, "0B")
	bad := func(in, want string) {
		t.Helper()
		if _, err := parseByteSize(in); err == nil || err.Error() != want {
			t.Errorf("parseByteSize(%q) = %v, want %q", in, err, want)
		}
	}
	bad("", `want a size like 16MiB, 512KiB or 65536 (bytes), got ""`)
	bad("MiB", `want a size like 16MiB, 512KiB or 65536 (bytes), got "MiB"`)
	bad("1.5MiB", `unknown size unit ".5MiB" in "1.5MiB": want B, KiB, MiB, GiB, KB, MB or GB`)
	bad("16M", `unknown size unit "M" in "16M": want B, KiB, MiB, GiB, KB, MB or GB`)
	bad("9999999999GiB", `size "9999999999GiB" is too large`)
	bad("99999999999999999999", `want a size like 16MiB, 512KiB or 65536 (bytes), got "99999999999999999999"`)
}

func TestDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"10s": "10s", "60s": "1m", "1h": "1h", "90m": "1h30m", "3600s": "1h", "1h0m1s": "1h0m1s",
		"500ms": "500ms", "0s": "0s", " 2s ": "2s", "61m": "1h1m",
	} {
		var d duration
		if err := d.Set(in); err != nil || d.String() != want {
			t.Errorf("duration %q: %v %v, want %s", in, d, err, want)
		}
		var back duration
		if err := back.Set(d.String()); err != nil || back != d {
			t.Errorf("duration %q does not read back: %v %v", d.String(), back, err)
		}
	}
	for _, in := range []string{"10", "", "ten seconds", "1d"} {
		var d duration
		if err := d.Set(in); err == nil {
			t.Errorf("duration %q accepted", in)
		}
	}
}

// FuzzByteSize: parsing never panics, and what String writes parses back
// to the same size.
func FuzzByteSize(f *testing.F) {
	for _, s := range []string{"16MiB", "1000", "1KB", "9223372036854775807", "8EiB", " 3 gib"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseByteSize(s)
		if err != nil {
			return
		}
		if v < 0 {
			t.Fatalf("parseByteSize(%q) = %d", s, v)
		}
		back, err := parseByteSize(v.String())
		if err != nil || back != v {
			t.Fatalf("parseByteSize(%q) = %d; its String %q reads back as %d, %v", s, v, v.String(), back, err)
		}
	})
}

// FuzzServeYAML: decoding any file never panics, and a file that decodes
// and validates reads back the same from its dry-run output.
func FuzzServeYAML(f *testing.F) {
	data, err := os.ReadFile("../../saltus.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(data))
	f.Add("block-size: 32\nbackends: [http://a:1]\nmax-body: 1MB\n")
	f.Add("idle-timeout: 1h1m1s\nload-factor: 1e3\n")
	f.Fuzz(func(t *testing.T, s string) {
		cfg := defaultServeConfig()
		if decodeServeYAML("F", []byte(s), &cfg) != nil || cfg.Validate() != nil {
			return
		}
		var out bytes.Buffer
		if err := writeEffective(&out, cfg); err != nil {
			t.Fatal(err)
		}
		back := defaultServeConfig()
		if err := decodeServeYAML("F", out.Bytes(), &back); err != nil {
			t.Fatalf("dry-run output does not decode: %v\n%s", err, out.String())
		}
		if cfg.Admin.BearerToken != "" {
			cfg.Admin.BearerToken = "REDACTED"
		}
		if cfg.Backends == nil {
			cfg.Backends = []string{}
		}
		if cfg.Cluster.Join == nil {
			cfg.Cluster.Join = []string{}
		}
		if cfg.K8s.ModelSelectors == nil {
			cfg.K8s.ModelSelectors = []string{}
		}
		if !reflect.DeepEqual(back, cfg) {
			t.Fatalf("round trip of %q\n got %+v\nwant %+v", s, back, cfg)
		}
	})
}

// TestResponseTimeoutAlias: the deprecated response-timeout still sets
// the first-byte timeout, from the file or a flag, with one warning;
// with first-byte-timeout beside it in the same place it is an error.
func TestResponseTimeoutAlias(t *testing.T) {
	t.Parallel()
	const warn = "saltus serve: warning: response-timeout is deprecated: use first-byte-timeout (set to 4s); request-timeout bounds a whole request\n"
	for _, tc := range []struct {
		name, yaml string
		flags      []string
		want       time.Duration
		warn, err  string
	}{
		{"flag", "", []string{"--response-timeout", "4s"}, 4 * time.Second, warn, ""},
		{"file", "response-timeout: 4s\n", nil, 4 * time.Second, warn, ""},
		{"file then new flag", "response-timeout: 2s\n", []string{"--first-byte-timeout", "3s"}, 3 * time.Second,
			"saltus serve: warning: response-timeout is deprecated: use first-byte-timeout (set to 3s); request-timeout bounds a whole request\n", ""},
		{"both flags", "", []string{"--response-timeout", "4s", "--first-byte-timeout", "5s"}, 0, "",
			"config: response-timeout: deprecated alias of first-byte-timeout; give only first-byte-timeout"},
		{"both keys", "response-timeout: 4s\nfirst-byte-timeout: 5s\n", nil, 0, "", "line 1: response-timeout: deprecated alias of first-byte-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := tc.flags
			if tc.yaml != "" {
				args = append([]string{"--config", writeFile(t, "saltus.yaml", tc.yaml)}, args...)
			}
			var out bytes.Buffer
			got, _, err := loadServeConfig(args, &out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Backend.FirstByteTimeout != tc.want || got.ResponseTimeout != 0 || out.String() != tc.warn {
				t.Errorf("first-byte-timeout %v (want %v), response-timeout %v (want 0), output %q (want %q)",
					got.Backend.FirstByteTimeout, tc.want, got.ResponseTimeout, out.String(), tc.warn)
			}
			// --dry-run never prints the alias.
			var y bytes.Buffer
			if err := writeEffective(&y, got); err != nil || strings.Contains(y.String(), "response-timeout") {
				t.Errorf("dry-run output has response-timeout (%v):\n%s", err, y.String())
			}
		})
	}
}

// TestEveryServingKeyReachesItsComponent: each key but serve's own,
// changed alone, changes the components' configs servingConfig builds
// (no key is silently dropped), and the defaults map onto the
// components' defaults unchanged (one layer of defaults).
func TestEveryServingKeyReachesItsComponent(t *testing.T) {
	// admin-token also reaches the data plane: the adapter endpoints
	// require it (dataplane.Config.AdminToken).
	serveOnly := map[string]bool{"admin-listen": true, "admin-pprof": true,
		"drain-timeout": true, "gc-heap-floor": true, "log-format": true, "log-level": true,
		"memory-limit": true, "memory-give-back": true, // the process's (internal/memlimit), set up by serveWith
		"response-timeout": true, // resolved into first-byte-timeout before the mapping
		"upstream-io":      true, // deprecated: loop is the only path
		"cluster-key-file": true, // read into Cluster.Key once validated
		// loaded into reloadable holders by loadTLS, which sets Reactor.TLS and Admin.TLS
		"tls-cert-file": true, "tls-key-file": true,
		"admin-tls-cert-file": true, "admin-tls-key-file": true, "admin-tls-client-ca-file": true,
		"backend-tls-ca-file": true, "backend-tls-insecure-skip-verify": true}
	def := defaultServeConfig()
	base := def.servingConfig()
	if want := dataplane.DefaultConfig(); !reflect.DeepEqual(base, want) {
		t.Fatalf("the defaults do not map onto the components' defaults:\n got %+v\nwant %+v", base, want)
	}
	for _, f := range serveKeys {
		c := def
		v := f.bind(&c)
		var err error
		switch x := v.(type) {
		case strV:
			err = v.Set(v.String() + "-changed")
		case boolV:
			err = v.Set(strconv.FormatBool(!*x.p))
		case intV:
			err = v.Set(strconv.Itoa(*x.p + 1))
		case floatV:
			err = v.Set(strconv.FormatFloat(*x.p+0.5, 'g', -1, 64))
		case durV:
			err = v.Set((*x.p + time.Second).String())
		case sizeV:
			err = v.Set(strconv.Itoa(*x.p + 1024))
		case size64V:
			err = v.Set(strconv.FormatInt(*x.p+1024, 10))
		case listV:
			err = v.Set("http://changed:1")
		default:
			t.Fatalf("%s: value %T not covered", f.key, v)
		}
		if err != nil {
			t.Fatalf("%s: %v", f.key, err)
		}
		changed := !reflect.DeepEqual(c.servingConfig(), base)
		if changed == serveOnly[f.key] {
			t.Errorf("%s: changes the components' configs: %v, want %v", f.key, changed, !serveOnly[f.key])
		}
	}
}

// TestClusterConfig: the cluster keys are validated together, each error
// naming its key, and the key file is read into the config.
func TestClusterConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	if err := os.WriteFile(good, []byte(gossip.NewKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("c2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string // "" = valid
	}{
		{[]string{"--cluster-bind", "127.0.0.1:7946", "--join", "10.0.0.2:7946,10.0.0.3:7946", "--cluster-key-file", good}, ""},
		{[]string{"--join", "10.0.0.2:7946"}, "cluster-bind is required"},
		{[]string{"--cluster-key-file", good}, "cluster-key-file: needs cluster-bind"},
		{[]string{"--cluster-bind", "127.0.0.1:7946", "--cluster-key-file", short}, "16, 24 or 32 bytes, got 5"},
		{[]string{"--cluster-bind", "127.0.0.1:7946", "--cluster-key-file", filepath.Join(dir, "none")}, "cannot read the cluster key file"},
		{[]string{"--cluster-bind", "nohostport"}, "cluster-bind \"nohostport\""},
		{[]string{"--cluster-bind", "127.0.0.1:7946", "--join", "10.0.0.2"}, "join \"10.0.0.2\": want host:port"},
	} {
		cfg, _, err := loadServeConfig(tc.args, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want == "" && (len(cfg.Cluster.Key) != 32 || len(cfg.Cluster.Join) != 2):
			t.Errorf("%v: key of %d bytes, join %v", tc.args, len(cfg.Cluster.Key), cfg.Cluster.Join)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
