package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/saltus-lb/saltus/admin"
	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/shard"
	"github.com/saltus-lb/saltus/shard/backend"
	chatpkg "github.com/saltus-lb/saltus/tokenpool/chat"
)

// serveConfig is everything `saltus serve` is configured with. Each field
// is a YAML key of the --config file and a flag of the same name (the
// list `backends` is the repeatable flag --backend). Precedence: the
// defaults, then the file, then the flags actually given. It is immutable
// once validated; buildDataPlane maps it onto the components' configs.
type serveConfig struct {
	// Listen: host:port of the OpenAI-compatible API (the data plane).
	Listen string `yaml:"listen"`
	// AdminListen: host:port of the admin listener (metrics, probes, API).
	AdminListen string `yaml:"admin-listen"`
	// AdminToken: bearer token the admin API requires (all but /health);
	// "" = no auth.
	AdminToken string `yaml:"admin-token"`
	// AdminPprof: serve Go's runtime profiles under /debug/pprof/ on the
	// admin listener (behind the token).
	AdminPprof bool `yaml:"admin-pprof"`
	// Backends: http://host:port of each inference engine at start, or
	// name=http://host:port to name it (default names: backend-<id>);
	// more can be added through the admin API.
	Backends []string `yaml:"backends"`
	// Tokenizer: path of a HuggingFace tokenizer.json (or a directory or
	// .json.gz); "" = byte-block mode.
	Tokenizer string `yaml:"tokenizer"`
	// ChatTemplate: built-in chat template by name; "" = detect from the
	// tokenizer_config.json next to the tokenizer.
	ChatTemplate string `yaml:"chat-template"`
	// BlockSize: tokens per route-table block; match the engine's KV block
	// size (vLLM: 16).
	BlockSize int `yaml:"block-size"`
	// Shards: event loops, each owning a part of the route table;
	// 0 = GOMAXPROCS.
	Shards int `yaml:"shards"`
	// PinShards: lock each event loop to an OS thread.
	PinShards bool `yaml:"pin-shards"`
	// Policy: the routing policy: prefix (the least estimated time to
	// first token: queue plus prefill of the blocks a backend lacks), or
	// ranvier (the tree's deepest holder, load bound load-factor ×
	// median), or a baseline that never uses the tree: round_robin,
	// least_request (fewer in flight of two random backends),
	// consistent_hash (rendezvous hash of the first 4 blocks, load bound
	// 1.25 × average) or body_hash (rendezvous hash of the body's first
	// 512 bytes, no load term).
	Policy string `yaml:"policy"`
	// SessionHeader (policy prefix): a request header naming a session,
	// pinned to its backend while that one is routable and not queueing;
	// "" = off.
	SessionHeader string `yaml:"session-header"`
	// MaxBody: largest request body accepted (413 over it).
	MaxBody byteSize `yaml:"max-body"`
	// MaxBodyValues: most JSON values a chat or completion body may hold
	// (413 over it), counted before it is parsed.
	MaxBodyValues int `yaml:"max-body-values"`
	// MaxBodyDepth: deepest nesting of objects and arrays in such a body
	// (413 over it).
	MaxBodyDepth int `yaml:"max-body-depth"`
	// MaxHeader: largest request head accepted (431 over it).
	MaxHeader byteSize `yaml:"max-header"`
	// MaxConns: most open client connections (503 and close over it).
	MaxConns int `yaml:"max-conns"`
	// HeaderTimeout: time a client has to send a request head.
	HeaderTimeout duration `yaml:"header-timeout"`
	// IdleTimeout: keep-alive time of an idle client connection.
	IdleTimeout duration `yaml:"idle-timeout"`
	// ConnectTimeout: time to connect to a backend.
	ConnectTimeout duration `yaml:"connect-timeout"`
	// FirstByteTimeout: time from sending a request to a backend to its
	// response head (time to first byte); 504 over it. A non-streamed
	// answer's head comes only when its generation ends (vLLM), so this
	// bounds non-streamed generations: 10m, the OpenAI SDKs' own timeout.
	FirstByteTimeout duration `yaml:"first-byte-timeout"`
	// RequestTimeout: limit on a whole request (retries and the streamed
	// answer included); 504 before the head, an SSE error event after.
	// 0 = no limit.
	RequestTimeout duration `yaml:"request-timeout"`
	// StreamIdleTimeout: a streamed answer whose backend sends nothing
	// this long after its head ends with an SSE error event, counted.
	StreamIdleTimeout duration `yaml:"stream-idle-timeout"`
	// ResponseTimeout: deprecated alias of FirstByteTimeout (which it was
	// until issue 15); a warning says so. Never printed by --dry-run.
	ResponseTimeout duration `yaml:"response-timeout,omitempty"`
	// MaxResponseBody: largest non-streamed answer buffered whole; a
	// larger one is relayed as it comes (backend/spill.go).
	MaxResponseBody byteSize `yaml:"max-response-body"`
	// BackendHeader: how clients see a backend in X-Saltus-Backend and in
	// error messages: url, name (URLs expose the internal network) or
	// none (no header; names in messages).
	BackendHeader string `yaml:"backend-header"`
	// MaxRetries: further backends tried when one fails before its first
	// byte.
	MaxRetries int `yaml:"max-retries"`
	// UpstreamIO: deprecated: every request talks to its backend on the
	// client connection's event loop ("loop", the only value accepted;
	// the goroutine path was removed). Never printed by --dry-run.
	UpstreamIO string `yaml:"upstream-io,omitempty"`
	// HealthInterval: time between health probes of each healthy backend.
	HealthInterval duration `yaml:"health-interval"`
	// HealthDownInterval: time between health probes of a backend that is
	// down (or whose breaker tripped); one good probe brings it back.
	HealthDownInterval duration `yaml:"health-down-interval"`
	// DrainTimeout: on SIGTERM/SIGINT, how long requests in flight may
	// still run.
	DrainTimeout duration `yaml:"drain-timeout"`
	// MaxBlocks: route-table capacity in blocks, per shard.
	MaxBlocks int `yaml:"max-blocks"`
	// RouteTTL: a learned route expires when not refreshed for this long.
	RouteTTL duration `yaml:"route-ttl"`
	// LoadFactor (policy ranvier): a backend with more than LoadFactor ×
	// the median in-flight requests is skipped for the least loaded one.
	LoadFactor float64 `yaml:"load-factor"`
	// LoadSlack (policy prefix): a backend with (1 + LoadSlack) × the
	// mean in-flight requests queues (bounded load).
	LoadSlack float64 `yaml:"load-slack"`
	// LoadTokens (policy prefix): one request in flight on a backend costs
	// as much as this many prompt tokens of prefill.
	LoadTokens int `yaml:"load-tokens"`
	// KVTokens (policy prefix): the engines' KV cache capacity in tokens;
	// 0: unknown (relative to the fleet's fullest).
	KVTokens int `yaml:"kv-tokens"`
	// LearnFromUsage: ask the engine for a streamed request's usage
	// (stream_options.include_usage) when the client did not, and remove
	// that usage chunk before the client sees it.
	LearnFromUsage bool `yaml:"learn-from-usage"`
	// ScrapeInterval: how often each backend's engine /metrics is read
	// (vLLM's waiting and running requests, KV usage and capacity: the
	// prefix policy's view of each engine's queue); 0 = off. Default 1s.
	ScrapeInterval duration `yaml:"scrape-interval"`
	// GCHeapFloor: a pointer-free block that is never written (address
	// space, not memory) and counts as live heap, so the garbage
	// collector (GOGC=100) waits until about this much garbage beyond the
	// live heap has piled up; 0 = none (Go's own 4 MiB minimum). A
	// router's live heap is small and its garbage is per request, so
	// without one it collects dozens of times a second under load.
	GCHeapFloor byteSize `yaml:"gc-heap-floor"`
	// TokenBudget: the most tokenizer work one request may cause, in
	// bytes of prose (a byte of a long run of one letter counts 32); text
	// past it is keyed as byte blocks.
	TokenBudget byteSize `yaml:"token-budget"`
	// LogFormat: text or json.
	LogFormat string `yaml:"log-format"`
	// LogLevel: debug, info, warn or error.
	LogLevel string `yaml:"log-level"`
}

// defaultServeConfig returns the defaults: the components' own, read from
// dataplane.DefaultConfig (each component's DefaultConfig comments them),
// plus the keys only serve has. The flags' help and saltus.example.yaml
// show the same values (a test checks the file).
func defaultServeConfig() serveConfig {
	d := dataplane.DefaultConfig()
	rc, bc, sc := d.Reactor, d.Backend, d.Router
	return serveConfig{
		Listen:             rc.Listen,
		AdminListen:        "127.0.0.1:9180",
		BlockSize:          sc.BlockSize,
		Shards:             rc.Loops,
		PinShards:          rc.LockOSThread,
		Policy:             sc.Policy,
		SessionHeader:      sc.SessionHeader,
		MaxBody:            byteSize(rc.MaxBodyBytes),
		MaxBodyValues:      sc.Body.MaxValues,
		MaxBodyDepth:       sc.Body.MaxDepth,
		MaxHeader:          byteSize(rc.MaxHeaderBytes),
		MaxConns:           rc.MaxConns,
		HeaderTimeout:      duration(rc.HeaderTimeout),
		IdleTimeout:        duration(rc.IdleTimeout),
		ConnectTimeout:     duration(bc.ConnectTimeout),
		FirstByteTimeout:   duration(bc.FirstByteTimeout),
		RequestTimeout:     duration(bc.RequestTimeout),
		StreamIdleTimeout:  duration(bc.StreamIdleTimeout),
		MaxResponseBody:    byteSize(bc.MaxResponseBody),
		BackendHeader:      bc.BackendHeader,
		MaxRetries:         bc.MaxRetries,
		HealthInterval:     duration(bc.HealthInterval),
		HealthDownInterval: duration(bc.HealthDownInterval),
		DrainTimeout:       duration(30 * time.Second),
		MaxBlocks:          sc.Tree.MaxBlocks,
		RouteTTL:           duration(sc.Tree.TTL),
		LoadFactor:         sc.LoadFactor,
		LoadSlack:          sc.LoadSlack,
		LoadTokens:         sc.LoadTokens,
		KVTokens:           sc.KVTokens,
		LearnFromUsage:     sc.LearnFromUsage,
		ScrapeInterval:     duration(bc.ScrapeInterval),
		TokenBudget:        byteSize(sc.Pool.TokenBudget),
		GCHeapFloor:        32 << 20,
		LogFormat:          "text",
		LogLevel:           "info",
	}
}

// Bounds Validate enforces.
const (
	maxBlockSize = 1024
	maxShards    = 1024
	maxRetries   = 10
	maxMaxBlocks = 1<<31 - 2 // tree.Config's bound
)

// Validate reports every invalid value, each error naming its key.
func (c serveConfig) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: "+format, append([]any{key}, args...)...))
	}
	checkAddr := func(key, v string) {
		if _, port, err := net.SplitHostPort(v); err != nil {
			bad(key, "want host:port, got %q", v)
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			bad(key, "want host:port with a port number in [0, 65535], got %q", v)
		}
	}
	checkAddr("listen", c.Listen)
	checkAddr("admin-listen", c.AdminListen)
	if c.Listen == c.AdminListen && !strings.HasSuffix(c.Listen, ":0") {
		bad("admin-listen", "must differ from listen, both are %q", c.Listen)
	}
	for i := 0; i < len(c.AdminToken); i++ {
		if b := c.AdminToken[i]; b <= ' ' || b >= 0x7f {
			bad("admin-token", "must be printable ASCII without spaces (byte %d is %#x)", i, b)
			break
		}
	}
	names := map[string]int{}
	for i, nu := range c.Backends {
		name, u := dataplane.SplitBackend(nu)
		if name != "" || strings.HasPrefix(nu, "=") {
			if err := backend.CheckName(name); err != nil {
				bad(fmt.Sprintf("backends[%d]", i), "%v", err)
			} else if j, dup := names[name]; dup {
				bad(fmt.Sprintf("backends[%d]", i), "the name %q repeats backends[%d]'s", name, j)
			}
			names[name] = i
		}
		if err := admin.CheckBackendURL(u); err != nil {
			bad(fmt.Sprintf("backends[%d]", i), "%v", err)
		} else if j := slices.IndexFunc(c.Backends[:i], func(o string) bool { _, ou := dataplane.SplitBackend(o); return ou == u }); j >= 0 {
			bad(fmt.Sprintf("backends[%d]", i), "%q repeats backends[%d]", u, j)
		}
	}
	if c.Tokenizer != "" {
		if _, err := os.Stat(c.Tokenizer); err != nil {
			bad("tokenizer", "cannot read it: %v", err)
		}
	}
	if c.ChatTemplate != "" && !slices.Contains(chatpkg.Names(), c.ChatTemplate) {
		bad("chat-template", "unknown template %q, want one of %s (or empty: detect from the tokenizer)", c.ChatTemplate, strings.Join(chatpkg.Names(), ", "))
	}
	if c.BlockSize < 1 || c.BlockSize > maxBlockSize || c.BlockSize&(c.BlockSize-1) != 0 {
		bad("block-size", "must be a power of two between 1 and %d, got %d", maxBlockSize, c.BlockSize)
	}
	if c.Shards < 0 || c.Shards > maxShards {
		bad("shards", "must be between 0 (GOMAXPROCS) and %d, got %d", maxShards, c.Shards)
	}
	if !slices.Contains(shard.Policies(), c.Policy) {
		bad("policy", "unknown policy %q, want one of %s", c.Policy, strings.Join(shard.Policies(), ", "))
	}
	if c.MaxBody < 1<<10 || c.MaxBody > 1<<30 {
		bad("max-body", "must be between 1KiB and 1GiB, got %v", c.MaxBody)
	}
	if c.MaxBodyValues < 1 {
		bad("max-body-values", "must be at least 1, got %d", c.MaxBodyValues)
	}
	if c.MaxBodyDepth < 1 || c.MaxBodyDepth > shard.MaxScanDepth {
		bad("max-body-depth", "must be between 1 and %d, got %d", shard.MaxScanDepth, c.MaxBodyDepth)
	}
	if c.GCHeapFloor < 0 || c.GCHeapFloor > 4<<30 {
		bad("gc-heap-floor", "must be between 0 and 4GiB, got %v", c.GCHeapFloor)
	}
	if c.MaxHeader < 1<<10 || c.MaxHeader > 1<<20 {
		bad("max-header", "must be between 1KiB and 1MiB, got %v", c.MaxHeader)
	}
	if c.MaxConns < 1 {
		bad("max-conns", "must be at least 1, got %d", c.MaxConns)
	}
	for _, d := range []struct {
		key string
		v   duration
	}{
		{"header-timeout", c.HeaderTimeout},
		{"idle-timeout", c.IdleTimeout},
		{"connect-timeout", c.ConnectTimeout},
		{"first-byte-timeout", c.FirstByteTimeout},
		{"stream-idle-timeout", c.StreamIdleTimeout},
		{"health-interval", c.HealthInterval},
		{"health-down-interval", c.HealthDownInterval},
		{"route-ttl", c.RouteTTL},
	} {
		if d.v <= 0 {
			bad(d.key, "must be positive, got %v", d.v)
		}
	}
	if c.RequestTimeout < 0 {
		bad("request-timeout", "must not be negative (0 = no limit), got %v", c.RequestTimeout)
	}
	if c.ResponseTimeout != 0 {
		bad("response-timeout", "BUG: the deprecated alias was not resolved")
	}
	if c.MaxResponseBody < 1<<10 || c.MaxResponseBody > 1<<30 {
		bad("max-response-body", "must be between 1KiB and 1GiB, got %v", c.MaxResponseBody)
	}
	if c.BackendHeader != "url" && c.BackendHeader != "name" && c.BackendHeader != "none" {
		bad("backend-header", `must be "url", "name" or "none", got %q`, c.BackendHeader)
	}
	if c.DrainTimeout < 0 {
		bad("drain-timeout", "must not be negative (0 = do not wait), got %v", c.DrainTimeout)
	}
	if c.MaxRetries < 0 || c.MaxRetries > maxRetries {
		bad("max-retries", "must be between 0 and %d, got %d", maxRetries, c.MaxRetries)
	}
	if c.UpstreamIO != "" && c.UpstreamIO != "loop" {
		bad("upstream-io", `was removed: every request takes the loop path (drop the key), got %q`, c.UpstreamIO)
	}
	if c.ScrapeInterval < 0 {
		bad("scrape-interval", "must not be negative (0 = off), got %v", c.ScrapeInterval)
	}
	if c.MaxBlocks < 1 || c.MaxBlocks > maxMaxBlocks {
		bad("max-blocks", "must be between 1 and %d, got %d", maxMaxBlocks, c.MaxBlocks)
	}
	if !(c.LoadFactor >= 1) || math.IsInf(c.LoadFactor, 0) {
		bad("load-factor", "must be a finite number of at least 1, got %v", c.LoadFactor)
	}
	if !(c.LoadSlack >= 0) || math.IsInf(c.LoadSlack, 0) {
		bad("load-slack", "must be a finite number of at least 0, got %v", c.LoadSlack)
	}
	if c.LoadTokens < 0 {
		bad("load-tokens", "must not be negative, got %d", c.LoadTokens)
	}
	if c.KVTokens < 0 {
		bad("kv-tokens", "must not be negative (0 = unknown), got %d", c.KVTokens)
	}
	if c.TokenBudget < 1<<10 || c.TokenBudget > 1<<30 {
		bad("token-budget", "must be between 1KiB and 1GiB, got %v", c.TokenBudget)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format", `must be "text" or "json", got %q`, c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("log-level", "%v", err)
	}
	return errors.Join(errs...)
}

// servingConfig maps the serving keys straight onto the components'
// configs (dataplane.Config holds them; the keys serve does not set keep
// the components' defaults).
func (c serveConfig) servingConfig() dataplane.Config {
	d := dataplane.DefaultConfig()
	d.Backends, d.Tokenizer = c.Backends, c.Tokenizer

	rc := &d.Reactor
	rc.Listen, rc.Loops, rc.LockOSThread = c.Listen, c.Shards, c.PinShards
	rc.MaxBodyBytes, rc.MaxHeaderBytes, rc.MaxConns = int(c.MaxBody), int(c.MaxHeader), c.MaxConns
	rc.HeaderTimeout, rc.IdleTimeout = c.HeaderTimeout.D(), c.IdleTimeout.D()

	bc := &d.Backend
	bc.ConnectTimeout, bc.FirstByteTimeout = c.ConnectTimeout.D(), c.FirstByteTimeout.D()
	bc.RequestTimeout, bc.StreamIdleTimeout = c.RequestTimeout.D(), c.StreamIdleTimeout.D()
	bc.MaxResponseBody, bc.BackendHeader, bc.MaxRetries = int(c.MaxResponseBody), c.BackendHeader, c.MaxRetries
	bc.HealthInterval, bc.HealthDownInterval = c.HealthInterval.D(), c.HealthDownInterval.D()
	bc.ScrapeInterval = c.ScrapeInterval.D()

	sc := &d.Router
	sc.BlockSize, sc.ChatTemplate, sc.Policy, sc.SessionHeader = c.BlockSize, c.ChatTemplate, c.Policy, c.SessionHeader
	sc.Body = shard.BodyLimits{MaxValues: c.MaxBodyValues, MaxDepth: c.MaxBodyDepth}
	sc.Tree.MaxBlocks, sc.Tree.TTL = c.MaxBlocks, c.RouteTTL.D()
	sc.LoadFactor, sc.LoadSlack, sc.LoadTokens, sc.KVTokens = c.LoadFactor, c.LoadSlack, c.LoadTokens, c.KVTokens
	sc.Pool.TokenBudget, sc.LearnFromUsage = int(c.TokenBudget), c.LearnFromUsage
	return d
}

// adminConfig maps the admin keys onto admin.Config; ready is the data
// plane's readiness (nil: a routable backend in the admin's list).
func (c serveConfig) adminConfig(ready func() error) admin.Config {
	ac := admin.DefaultConfig()
	ac.Listen = c.AdminListen
	ac.BearerToken = c.AdminToken
	ac.Pprof = c.AdminPprof
	ac.Ready = ready
	ac.MaxBodyBytes = int64(c.MaxBody) // /admin/explain takes what the API takes
	return ac
}

// configField is one key of serveConfig: its YAML key, flag name and
// field index.
type configField struct {
	key, flag string
	index     int
}

// configFields lists serveConfig's keys in declaration order.
func configFields() []configField {
	t := reflect.TypeFor[serveConfig]()
	fields := make([]configField, t.NumField())
	for i := range fields {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if key == "" {
			panic("BUG: serveConfig." + t.Field(i).Name + " has no yaml tag")
		}
		fl := key
		if key == "backends" {
			fl = "backend" // repeatable: --backend A --backend B
		}
		fields[i] = configField{key, fl, i}
	}
	return fields
}

// serveFlags holds the serve command's flag set: the config's keys bound
// to a serveConfig of their own, and --config and --dry-run.
type serveFlags struct {
	fs         *flag.FlagSet
	values     serveConfig // what the flags set, over the defaults
	configPath string
	dryRun     bool
}

func newServeFlags(out io.Writer) *serveFlags {
	f := &serveFlags{fs: flag.NewFlagSet("serve", flag.ContinueOnError), values: defaultServeConfig()}
	fs, v := f.fs, &f.values
	fs.SetOutput(out)
	fs.StringVar(&v.Listen, "listen", v.Listen, "`host:port` of the OpenAI-compatible API; port 0 picks a free one")
	fs.StringVar(&v.AdminListen, "admin-listen", v.AdminListen, "`host:port` of the admin listener: /metrics, /health, /ready, /admin/*")
	fs.StringVar(&v.AdminToken, "admin-token", v.AdminToken, "bearer `token` the admin listener requires on all but /health; empty: no auth (prefer the config file: flags show in ps)")
	fs.BoolVar(&v.AdminPprof, "admin-pprof", v.AdminPprof, "serve Go's runtime profiles (CPU, heap, goroutines, trace) under /debug/pprof/ on the admin listener, behind --admin-token")
	fs.Var((*stringList)(&v.Backends), "backend", "backend `URL` http://host:port, or name=http://host:port to name it (default names: backend-<id>); repeat the flag (or separate by commas) for several; replaces the file's backends; YAML key: backends")
	fs.StringVar(&v.Tokenizer, "tokenizer", v.Tokenizer, "`path` of the model's HuggingFace tokenizer.json (or its directory, or a .json.gz); empty: byte-block keys (64-byte blocks of the rendered prompt)")
	fs.StringVar(&v.ChatTemplate, "chat-template", v.ChatTemplate, "chat template `name` ("+strings.Join(chatpkg.Names(), ", ")+"); empty: detect from tokenizer_config.json next to --tokenizer")
	fs.Var(&v.TokenBudget, "token-budget", "most tokenizer work one request may cause (`size` of prose: B, KiB, MiB; a byte of a run of 64+ bytes of one class, e.g. one repeated letter, counts 32), 1KiB–1GiB; text past it is keyed as 64-byte blocks")
	fs.IntVar(&v.BlockSize, "block-size", v.BlockSize, "`tokens` per route-table block, a power of two ≤ 1024; use the engine's KV-cache block size (vLLM: 16)")
	fs.IntVar(&v.Shards, "shards", v.Shards, "`count` of event loops (shards), each owning a part of the route table; 0: GOMAXPROCS")
	fs.BoolVar(&v.PinShards, "pin-shards", v.PinShards, "lock each event loop to its own OS thread")
	fs.StringVar(&v.Policy, "policy", v.Policy, "routing `policy`: prefix (least estimated time to first token: queue wait plus prefill of the blocks a backend does not hold); "+
		"ranvier (deepest cached prefix, else rendezvous hash of the first blocks; load bound --load-factor × median); "+
		"baselines without the route table: round_robin, least_request (fewer in flight of two random backends), "+
		"consistent_hash (rendezvous hash of the first 4 blocks, load bound 1.25 × average), body_hash (rendezvous hash of the body's first 512 bytes, no load term)")
	fs.StringVar(&v.SessionHeader, "session-header", v.SessionHeader, "request `header` naming a session (e.g. X-Session-ID) that policy prefix pins to its backend while that one is routable and not queueing; empty: off")
	fs.Var(&v.MaxBody, "max-body", "largest request body (`size`: B, KiB, MiB, GiB), 1KiB–1GiB; larger ones get 413")
	fs.IntVar(&v.MaxBodyValues, "max-body-values", v.MaxBodyValues, "most JSON `values` (objects, arrays, strings, numbers, literals) a chat or completion body may hold, counted before parsing; more get 413")
	fs.IntVar(&v.MaxBodyDepth, "max-body-depth", v.MaxBodyDepth, "deepest nesting (`levels` of objects and arrays), 1–256, of a chat or completion body; deeper ones get 413")
	fs.Var(&v.MaxHeader, "max-header", "largest request head (`size`), 1KiB–1MiB; larger ones get 431")
	fs.IntVar(&v.MaxConns, "max-conns", v.MaxConns, "most open client `connections`; over it a new one gets 503 and is closed")
	fs.Var(&v.HeaderTimeout, "header-timeout", "`duration` a client has to send a request head (e.g. 10s) before the connection is closed")
	fs.Var(&v.IdleTimeout, "idle-timeout", "`duration` an idle keep-alive client connection stays open")
	fs.Var(&v.ConnectTimeout, "connect-timeout", "`duration` to connect to a backend before trying the next one")
	fs.Var(&v.FirstByteTimeout, "first-byte-timeout", "`duration` from sending a request to a backend to its response head (time to first byte); 504 over it, not retried. "+
		"A non-streamed answer's head comes only when its generation ends (vLLM), so this bounds non-streamed generations")
	fs.Var(&v.StreamIdleTimeout, "stream-idle-timeout", "`duration` a streamed answer's backend may send nothing after its head: then an SSE error event ends it (counted, saltus_upstream_errors_total{kind=\"stream_idle\"})")
	fs.Var(&v.RequestTimeout, "request-timeout", "`duration` a whole request may take, retries and streamed answer included: 504 before the response head, an SSE error event after; 0: no limit")
	fs.Var(&v.ResponseTimeout, "response-timeout", "deprecated alias of --first-byte-timeout (`duration`); prints a warning")
	fs.Var(&v.MaxResponseBody, "max-response-body", "largest non-streamed answer (`size`) buffered whole, 1KiB–1GiB; larger ones are relayed as they come (their usage is not read)")
	fs.StringVar(&v.BackendHeader, "backend-header", v.BackendHeader, "how clients see a backend in X-Saltus-Backend and error messages (`mode`): url, name (backend names: URLs expose the internal network) or none (no header; names in messages)")
	fs.IntVar(&v.MaxRetries, "max-retries", v.MaxRetries, "further `backends` tried, 0–10, when one fails before its first byte")
	fs.StringVar(&v.UpstreamIO, "upstream-io", v.UpstreamIO, "deprecated, `mode` loop only: every request talks to its backend on the client connection's event loop")
	fs.Var(&v.HealthInterval, "health-interval", "`duration` between health probes (GET /health) of each healthy backend; 3 failed probes in a row mark it down")
	fs.Var(&v.HealthDownInterval, "health-down-interval", "`duration` between health probes of a backend that is down or whose breaker tripped; one good probe (or one answered request) brings it back")
	fs.Var(&v.DrainTimeout, "drain-timeout", "`duration` requests in flight may still run after SIGTERM or SIGINT; 0: do not wait")
	fs.IntVar(&v.MaxBlocks, "max-blocks", v.MaxBlocks, "route-table capacity in `blocks` per shard; least recently used routes go first")
	fs.Var(&v.RouteTTL, "route-ttl", "`duration` after which a learned route not used again expires")
	fs.Var(&v.GCHeapFloor, "gc-heap-floor", "`size` of a never-written block counted as live Go heap (address space, not memory), so the garbage collector lets about this much garbage pile up before it runs: "+
		"fewer collections under load for up to this much more resident memory; 0: none (Go's own 4MiB minimum)")
	fs.Float64Var(&v.LoadFactor, "load-factor", v.LoadFactor, "bounded load of policy ranvier: a backend above `factor` × the median in-flight count is skipped for the least loaded one; at least 1")
	fs.Float64Var(&v.LoadSlack, "load-slack", v.LoadSlack, "bounded load of policy prefix: a backend with (1 + `slack`) × the mean in-flight count (at least 4) counts as queueing, so a prefix it holds may gain another holder; at least 0")
	fs.IntVar(&v.LoadTokens, "load-tokens", v.LoadTokens, "policy prefix: one request in flight on a backend costs as much as this many prompt `tokens` of prefill (decode steps grow with the batch)")
	fs.IntVar(&v.KVTokens, "kv-tokens", v.KVTokens, "policy prefix: the engines' KV cache capacity in `tokens` (vLLM logs GPU blocks × block size at start); a miss is priced by how full of prefixes in use a backend's cache is; a scraped vllm:cache_config_info wins; 0: unknown, relative to the fleet's fullest")
	fs.BoolVar(&v.LearnFromUsage, "learn-from-usage", v.LearnFromUsage, "ask the engine for a streamed chat or completion's usage (stream_options.include_usage) when the client did not, "+
		"to learn its cached tokens, and remove that usage chunk before the client sees it")
	fs.Var(&v.ScrapeInterval, "scrape-interval", "`duration` between scrapes of each backend's engine /metrics (vLLM's waiting and running requests, KV usage and capacity: policy prefix learns each engine's running limit and prices the wait for a slot); 0: off (an engine without /metrics costs one failed GET per interval, counted)")
	fs.StringVar(&v.LogFormat, "log-format", v.LogFormat, "log `format`: text or json (to stderr)")
	fs.StringVar(&v.LogLevel, "log-level", v.LogLevel, "log `level`: debug, info, warn or error")
	fs.StringVar(&f.configPath, "config", "", "YAML config `file`; its keys are these flags' names (backends: a list); flags given override it")
	fs.BoolVar(&f.dryRun, "dry-run", false, "load and validate the configuration, print it as YAML and exit")
	fs.Usage = func() { f.usage(fs.Output()) }
	return f
}

func (f *serveFlags) usage(w io.Writer) {
	fmt.Fprint(w, `Usage: saltus serve [--config FILE] [--backend URL]... [flags]

Runs the load balancer: the OpenAI-compatible API on --listen, sending each
request to the backend most likely to hold its prompt prefix in its KV
cache, and the admin listener on --admin-listen. SIGTERM or SIGINT drains
(/ready answers 503, no new connections, requests in flight finish within
--drain-timeout) and exits 0; a second signal exits at once with 1.

Settings come from the defaults, then the --config file, then the flags
given. Durations take a unit (500ms, 10s, 1h); sizes take B, KiB, MiB, GiB
(or KB, MB, GB: powers of 1000).

Flags:
`)
	names := []string{"config", "dry-run"}
	for _, cf := range configFields() {
		names = append(names, cf.flag)
	}
	printFlags(w, f.fs, names)
}

// errUsage: the flags were wrong and the flag package has said so.
var errUsage = errors.New("usage")

// loadServeConfig parses args, reads the --config file and applies the
// flags given over it, then validates. It returns flag.ErrHelp for -h,
// errUsage for a flag error (already reported on out).
func loadServeConfig(args []string, out io.Writer) (cfg serveConfig, dryRun bool, err error) {
	f := newServeFlags(out)
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, false, err
		}
		return cfg, false, errUsage
	}
	if f.fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected argument %q (flags start with --)", f.fs.Arg(0))
	}
	cfg = defaultServeConfig()
	if f.configPath != "" {
		data, err := os.ReadFile(f.configPath)
		if err != nil {
			return cfg, false, fmt.Errorf("config: cannot read %v", err)
		}
		if err := decodeServeYAML(f.configPath, data, &cfg); err != nil {
			return cfg, false, err
		}
	}
	// Only the flags actually given override the file.
	byFlag := map[string]int{}
	for _, cf := range configFields() {
		byFlag[cf.flag] = cf.index
	}
	dst, src := reflect.ValueOf(&cfg).Elem(), reflect.ValueOf(&f.values).Elem()
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) {
		given[fl.Name] = true
		if i, ok := byFlag[fl.Name]; ok {
			dst.Field(i).Set(src.Field(i))
		}
	})
	if given["response-timeout"] {
		if given["first-byte-timeout"] {
			return cfg, false, errors.New("config: response-timeout: deprecated alias of first-byte-timeout; give only first-byte-timeout")
		}
		cfg.FirstByteTimeout = cfg.ResponseTimeout
		cfg.ResponseTimeout = 1 // the warning below; any non-zero value
	}
	if cfg.ResponseTimeout != 0 {
		fmt.Fprintf(out, "saltus serve: warning: response-timeout is deprecated: use first-byte-timeout (set to %v); request-timeout bounds a whole request\n", cfg.FirstByteTimeout)
		cfg.ResponseTimeout = 0
	}
	return cfg, f.dryRun, cfg.Validate()
}

// decodeServeYAML applies the keys of a YAML config file onto cfg. Each
// top-level key is decoded on its own, so that every error names its key
// and line: an unknown key, a repeated key, a value of the wrong type.
// (yaml.v3's KnownFields(true) also rejects unknown keys, but its type
// errors name neither the key nor the field.)
func decodeServeYAML(name string, data []byte, cfg *serveConfig) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file: the defaults
		}
		return fmt.Errorf("config %s: %v", name, cleanYAMLError(err))
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: want one YAML document, found more", name)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s: line %d: want a mapping of keys (listen, backends, ...) to values", name, root.Line)
	}
	byKey := map[string]configField{}
	for _, cf := range configFields() {
		byKey[cf.key] = cf
	}
	v := reflect.ValueOf(cfg).Elem()
	seen := map[string]int{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, val := root.Content[i], root.Content[i+1]
		cf, ok := byKey[k.Value]
		if !ok {
			hint := ""
			for _, c := range byKey {
				if c.flag == k.Value {
					hint = fmt.Sprintf(" (the key is %q)", c.key)
				}
			}
			errs = append(errs, fmt.Errorf("config %s: line %d: unknown key %q%s", name, k.Line, k.Value, hint))
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			errs = append(errs, fmt.Errorf("config %s: line %d: %s: repeats the key of line %d", name, k.Line, k.Value, prev))
			continue
		}
		seen[k.Value] = k.Line
		if err := val.Decode(v.Field(cf.index).Addr().Interface()); err != nil {
			errs = append(errs, fmt.Errorf("config %s: line %d: %s: %v", name, val.Line, cf.key, cleanYAMLError(err)))
		}
	}
	// The deprecated alias: its value goes to its successor;
	// loadServeConfig warns (cfg.ResponseTimeout stays set until then).
	if line, ok := seen["response-timeout"]; ok {
		if _, both := seen["first-byte-timeout"]; both {
			errs = append(errs, fmt.Errorf("config %s: line %d: response-timeout: deprecated alias of first-byte-timeout; give only first-byte-timeout", name, line))
		} else {
			cfg.FirstByteTimeout = cfg.ResponseTimeout
			if cfg.ResponseTimeout == 0 {
				cfg.ResponseTimeout = 1 // the warning; first-byte-timeout's Validate names the 0
			}
		}
	}
	return errors.Join(errs...)
}

// cleanYAMLError drops yaml.v3's "yaml: unmarshal errors:\n  line N: "
// wrapping: the caller names the line and key.
func cleanYAMLError(err error) string {
	if te, ok := errors.AsType[*yaml.TypeError](err); ok {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			if _, rest, ok := strings.Cut(m, ": "); ok && strings.HasPrefix(m, "line ") {
				m = rest
			}
			msgs[i] = m
		}
		return strings.Join(msgs, "; ")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// writeEffective prints cfg as a YAML config file that loads back to the
// same values (the admin token is redacted).
func writeEffective(w io.Writer, cfg serveConfig) error {
	if cfg.AdminToken != "" {
		cfg.AdminToken = "REDACTED"
	}
	if cfg.Backends == nil {
		cfg.Backends = []string{} // "[]", not "null"
	}
	var buf bytes.Buffer
	buf.WriteString("# saltus serve: effective configuration (defaults, then --config, then flags)\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// parseLevel reads a slog level name: debug, info, warn, error (any case,
// optionally with an offset such as warn+2, as slog writes them).
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("want debug, info, warn or error, got %q", s)
	}
	return l, nil
}
