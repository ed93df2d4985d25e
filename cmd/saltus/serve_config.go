package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/saltus-lb/saltus/admin"
	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/gossip"
	"github.com/saltus-lb/saltus/internal/memlimit"
	"github.com/saltus-lb/saltus/internal/tlsconf"
	"github.com/saltus-lb/saltus/policy"
	chatpkg "github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// serveConfig is everything `saltus serve` is configured with: the
// components' own configs, which the keys of serveKeys set directly (no
// copies: each component's DefaultConfig comments its defaults and its
// Validate names its fields), and the few settings only serve has. Each
// key is a YAML key of the --config file and a flag of the same name
// (the list `backends` is the repeatable flag --backend). Precedence: the
// defaults, then the file, then the flags actually given. It is
// immutable once validated.
type serveConfig struct {
	// The serving path: Reactor (listener, loops, request limits),
	// Backend (upstream transport, health, scrape), Router (policy,
	// route table, tokenizer pool), Backends and Tokenizer.
	dataplane.Config
	// Admin is the admin listener's (its Ready and MaxBodyBytes are set
	// by adminConfig).
	Admin admin.Config
	// DrainTimeout: on SIGTERM/SIGINT, how long requests in flight may
	// still run.
	DrainTimeout time.Duration
	// GCHeapFloor: a pointer-free block that is never written (address
	// space, not memory) and counts as live heap, so the garbage
	// collector (GOGC=100) waits until about this much garbage beyond the
	// live heap has piled up; 0 = none (Go's own 4 MiB minimum). A
	// router's live heap is small and its garbage is per request, so
	// without one it collects dozens of times a second under load.
	GCHeapFloor int64
	// Memory: the soft memory limit and the give-back of the heap after
	// bursts (internal/memlimit).
	Memory memlimit.Config
	// LogFormat: text or json. LogLevel: debug, info, warn or error.
	LogFormat, LogLevel string
	// ResponseTimeout: deprecated alias of Backend.FirstByteTimeout
	// (which it was until issue 15); a warning says so.
	ResponseTimeout time.Duration
	// UpstreamIO: deprecated: every request talks to its backend on the
	// client connection's event loop ("loop", the only value accepted;
	// the goroutine path was removed).
	UpstreamIO string
	// ClusterKeyFile: the cluster key (base64, 16/24/32 bytes), read
	// into Cluster.Key by loadServeConfig.
	ClusterKeyFile string
	// TLSCertFile and TLSKeyFile: the data plane's certificate chain and
	// key (PEM); both empty: plain HTTP. runServe loads them into a
	// reloadable holder (SIGHUP) behind Reactor.TLS.
	TLSCertFile, TLSKeyFile string
	// AdminTLSCertFile and AdminTLSKeyFile: the admin listener's pair;
	// both empty: plain HTTP (the data plane's pair is not reused: the
	// admin listener has its own name and its own scrapers). With
	// AdminTLSClientCAFile, clients must present a certificate signed by
	// one of its CAs.
	AdminTLSCertFile, AdminTLSKeyFile, AdminTLSClientCAFile string
	// BackendTLSCAFile: PEM CAs trusted for https backends besides the
	// system roots. BackendTLSInsecureSkipVerify: do not verify https
	// backends' certificates (a warning at start). loadTLS sets
	// Backend.TLS from both.
	BackendTLSCAFile             string
	BackendTLSInsecureSkipVerify bool
}

// defaultServeConfig returns the defaults: the components' own
// (dataplane.DefaultConfig, admin.DefaultConfig), plus the keys only
// serve has. The flags' help and saltus.example.yaml show the same
// values (a test checks the file).
func defaultServeConfig() serveConfig {
	return serveConfig{
		Config:       dataplane.DefaultConfig(),
		Admin:        admin.DefaultConfig(),
		DrainTimeout: 30 * time.Second,
		GCHeapFloor:  32 << 20,
		Memory:       memlimit.DefaultConfig(),
		LogFormat:    "text",
		LogLevel:     "info",
	}
}

// serveKey is one key of the configuration: its YAML key, its flag (the
// key unless said), the field it sets, and the flag's help. A deprecated
// key is accepted but neither printed by --dry-run nor shown in
// saltus.example.yaml.
type serveKey struct {
	key, flag  string
	deprecated bool
	// live: a reload (SIGHUP, POST /admin/reload) applies a new value
	// while serving; the others are reported as needing a restart.
	live bool
	bind func(c *serveConfig) value
	help string
}

// serveKeys are the configuration's keys, in the order --help and
// --dry-run list them. Never modified.
var serveKeys = []serveKey{
	{key: "listen", bind: func(c *serveConfig) value { return strV{&c.Reactor.Listen} },
		help: "`host:port` of the OpenAI-compatible API; port 0 picks a free one"},
	{key: "tls-cert-file", bind: func(c *serveConfig) value { return strV{&c.TLSCertFile} },
		help: "`path` of the PEM certificate chain the API serves over TLS 1.2/1.3 (with --tls-key-file); reloaded on SIGHUP without dropping connections; empty: plain HTTP"},
	{key: "tls-key-file", bind: func(c *serveConfig) value { return strV{&c.TLSKeyFile} },
		help: "`path` of the PEM private key of --tls-cert-file"},
	{key: "tls-handshake-timeout", bind: func(c *serveConfig) value { return durV{&c.Reactor.TLSHandshakeTimeout} },
		help: "`duration` a client has to finish its TLS handshake before the connection is closed (counted)"},
	{key: "admin-listen", bind: func(c *serveConfig) value { return strV{&c.Admin.Listen} },
		help: "`host:port` of the admin listener: /metrics, /health, /ready, /admin/*"},
	{key: "admin-token", live: true, bind: func(c *serveConfig) value { return strV{&c.Admin.BearerToken} },
		help: "bearer `token` the admin listener requires on all but /health; empty: no auth (prefer the config file: flags show in ps)"},
	{key: "admin-pprof", bind: func(c *serveConfig) value { return boolV{&c.Admin.Pprof} },
		help: "serve Go's runtime profiles (CPU, heap, goroutines, trace) under /debug/pprof/ on the admin listener, behind --admin-token"},
	{key: "admin-tls-cert-file", bind: func(c *serveConfig) value { return strV{&c.AdminTLSCertFile} },
		help: "`path` of the PEM certificate chain the admin listener serves HTTPS with (with --admin-tls-key-file; reloaded on SIGHUP); empty: plain HTTP (--tls-cert-file is not reused)"},
	{key: "admin-tls-key-file", bind: func(c *serveConfig) value { return strV{&c.AdminTLSKeyFile} },
		help: "`path` of the PEM private key of --admin-tls-cert-file"},
	{key: "admin-tls-client-ca-file", bind: func(c *serveConfig) value { return strV{&c.AdminTLSClientCAFile} },
		help: "`path` of PEM CA certificates; when set, admin clients must present a certificate they signed (mutual TLS); needs --admin-tls-cert-file"},
	{key: "backends", live: true, flag: "backend", bind: func(c *serveConfig) value { return listV{p: &c.Backends, set: new(bool)} },
		help: "backend `URL` http://host:port or https://host:port, or name=URL to name it (default names: backend-<id>); repeat the flag (or separate by commas) for several; replaces the file's backends; YAML key: backends"},
	{key: "backend-models", live: true, bind: func(c *serveConfig) value { return listV{p: &c.BackendModels, set: new(bool)} },
		help: "pin a configured backend to a model: `pin` BACKEND=MODEL, BACKEND its name or URL; repeat (or separate by commas) for several models or backends. " +
			"A pinned backend serves exactly its pinned models (for engines without GET /v1/models, or to keep one out of a pool); the others serve what their /v1/models lists"},
	{key: "models-interval", bind: func(c *serveConfig) value { return durV{&c.Fleet.Interval} },
		help: "`duration` between fetches of each backend's GET /v1/models (its models and LoRA adapters: the pools requests are routed in); " +
			"also fetched when a backend is added or comes back up, and after an adapter load through saltus; 0: never (only pinned models are known)"},
	{key: "backend-priority", live: true, bind: func(c *serveConfig) value { return listV{p: &c.PriorityBackends, set: new(bool)} },
		help: "configured `backends` (name or URL; repeat, or separate by commas) whose engines run vLLM's --scheduling-policy priority: only they are passed a request's \"priority\" field, which vLLM refuses otherwise; saltus's queue orders by it either way"},
	{key: "model-priority", live: true, bind: func(c *serveConfig) value { return listV{p: &c.Router.PriorityModels, set: new(bool)} },
		help: "`models` (repeat, or separate by commas) whose pools' engines all run vLLM's --scheduling-policy priority: their requests keep the \"priority\" field, as for --backend-priority, for engines that cannot be named (discovered); an engine serving one of them gets it for all it serves"},
	{key: "backend-max-concurrency", live: true, bind: func(c *serveConfig) value { return listV{p: &c.BackendMaxConcurrency, set: new(bool)} },
		help: "cap a configured backend: `cap` BACKEND=N (name or URL), at most N requests at once (its engine's --max-num-seqs, say); what its pool cannot send waits in the pool's gateway queue, in priority and fair-share order; repeat (or separate by commas)"},
	{key: "kv-events", live: true, bind: func(c *serveConfig) value { return listV{p: &c.KVEvents, set: new(bool)} },
		help: "subscribe to a configured backend's KV-cache events: `sub` BACKEND=tcp://HOST:PORT (name or URL), its engine's publisher (vLLM's --kv-events-config endpoint, tcp://*:5557 on the engine); " +
			"the backend's route-table holders then follow the blocks its engine reports stored, removed and cleared; repeat (or separate by commas); none by default"},
	{key: "kv-events-port", live: true, bind: func(c *serveConfig) value { return intV{&c.KVEventsPort} },
		help: "`port` of the KV-event publisher of every backend --kv-events does not name, discovered ones included (tcp://<backend host>:PORT; vLLM's default 5557); 0: off"},
	{key: "kv-events-replay", live: true, bind: func(c *serveConfig) value { return listV{p: &c.KVEventsReplay, set: new(bool)} },
		help: "the replay endpoint of a backend's KV-event publisher: `replay` BACKEND=tcp://HOST:PORT (name or URL; vLLM's --kv-events-config replay_endpoint, e.g. tcp://*:5558 on the engine); " +
			"batches its subscription missed (a sequence gap) are asked for there, and the backend's view stays exact if they all come back, instead of being reset; repeat (or separate by commas); none by default"},
	{key: "kv-events-replay-port", live: true, bind: func(c *serveConfig) value { return intV{&c.KVEventsReplayPort} },
		help: "`port` of the replay endpoint of every subscribed backend --kv-events-replay does not name (tcp://<its publisher's host>:PORT); 0: off (a sequence gap resets the backend's view)"},
	{key: "kv-events-ranks", live: true, bind: func(c *serveConfig) value { return intV{&c.KVEventsRanks} },
		help: "data-parallel `ranks` of every subscribed engine (vLLM's --data-parallel-size, the ranks on its publisher's host): rank R publishes at the publisher's port + R and replays at the replay port + R, as vLLM offsets them, and each rank is subscribed, into its backend's one view; " +
			"the --kv-events-listen wiring needs none (the ranks share the engine's topic); at most 64"},
	{key: "kv-events-listen", bind: func(c *serveConfig) value { return strV{&c.KVEventsListen} },
		help: "`endpoint` tcp://HOST:PORT where saltus listens for engines' KV-event publishers to connect (llm-d's wiring; tcp://*:PORT for every interface); each message's topic kv@IP:PORT@MODEL names the backend whose URL has that host:port (a backend with --kv-events or --kv-events-port takes its events from there); empty (the default): off; not reloadable"},
	{key: "kv-events-bridge", live: true, bind: func(c *serveConfig) value { return durV{&c.Router.KVEventsBridge} },
		help: "policies prefix and ranvier, a backend whose KV events feed the route table: how long (`duration`) a route learned by routing there, deeper than what its engine's events confirmed, still counts after it was last used " +
			"(the time from routing a request to the engine's BlockStored: its queue wait and first prefill step); past it only the confirmed blocks count; 0: only those ever"},
	{key: "queue-max-entries", bind: func(c *serveConfig) value { return intV{&c.Router.Queue.MaxEntries} },
		help: "requests that may wait in one model pool's gateway queue while every engine of the pool is full (refused 429 with Retry-After, or at their limit); past it: 429 with Retry-After at once"},
	{key: "queue-max-wait", bind: func(c *serveConfig) value { return durV{&c.Router.Queue.MaxWait} },
		help: "`duration` a request may wait in its pool's gateway queue for an engine with room; past it: 429 with Retry-After"},
	{key: "engine-queue", live: true, bind: func(c *serveConfig) value { return intV{&c.Backend.EngineQueue} },
		help: "requests each engine is sent beyond its running slots once saltus has learned them from its /metrics (vLLM's --max-num-seqs as it runs it); the rest wait in their pool's gateway queue, where priority, fair share and prefix affinity order them, and go to the engine that frees a slot; -1: no bound (engines queue what they are sent)"},
	{key: "queue-affinity", bind: func(c *serveConfig) value { return intV{&c.Router.QueueAffinity} },
		help: "how many times a request in a gateway queue may be passed by later ones of its tenant (among its next 4 × this many) because the engine with a slot free holds more of their prefix than any other; then it goes at its turn; 0: strictly first come; at most 256"},
	{key: "api-keys-file", bind: func(c *serveConfig) value { return strV{&c.Keys.File} },
		help: "`path` of the API keys clients must present (Authorization: Bearer or x-api-key), a YAML or JSON list of name, hash (sha256:<hex> of the secret: saltus keys hash), models, rpm, tpm, weight; " +
			"read again within 2s of a change and on every reload; SALTUS_API_KEYS may hold more in the same format; empty and no SALTUS_API_KEYS: no keys (every request served)"},
	{key: "tenant-header", bind: func(c *serveConfig) value { return strV{&c.Router.TenantHeader} },
		help: "request `header` whose value names the tenant a request's fair share in its pool's gateway queue is counted under, for requests without an API key, bearer token or x-api-key; empty: those share one anonymous tenant"},
	{key: "adapter-updates", bind: func(c *serveConfig) value { return boolV{&c.Router.AdapterUpdates} },
		help: "serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter for the fleet (forwarded to the engines of the adapter's base model, behind --admin-token when set); false: 404"},
	{key: "adapter-engines", bind: func(c *serveConfig) value { return intV{&c.Router.AdapterEngines} },
		help: "how many engines of the base model's pool an adapter load goes to: 0 every routable one, N the N least loaded (those that have it already count)"},
	{key: "backend-tls-ca-file", bind: func(c *serveConfig) value { return strV{&c.BackendTLSCAFile} },
		help: "`path` of PEM CA certificates trusted for https:// backends, besides the system roots (backends' certificates are verified against the URL's host)"},
	{key: "backend-tls-insecure-skip-verify", bind: func(c *serveConfig) value { return boolV{&c.BackendTLSInsecureSkipVerify} },
		help: "do not verify https:// backends' certificates (encrypted, not authenticated: anyone on the path can impersonate a backend); warned at start"},
	{key: "tokenizer", bind: func(c *serveConfig) value { return strV{&c.Tokenizer} },
		help: "`path` of the model's HuggingFace tokenizer.json (or its directory, or a .json.gz); empty: byte-block keys (64-byte blocks of the rendered prompt)"},
	{key: "chat-template", bind: func(c *serveConfig) value { return strV{&c.Router.ChatTemplate} },
		help: "built-in chat template `name` (" + strings.Join(chatpkg.Names(), ", ") + "); empty: the chat_template of tokenizer_config.json next to --tokenizer (a built-in where one renders it exactly, else rendered as Jinja; harmony for a gpt-oss tokenizer without one)"},
	{key: "chat-template-file", bind: func(c *serveConfig) value { return strV{&c.Router.ChatTemplateFile} },
		help: "`path` of a Jinja chat template (as transformers renders it) to use instead of the tokenizer config's; excludes chat-template"},
	{key: "block-size", bind: func(c *serveConfig) value { return intV{&c.Router.BlockSize} },
		help: "`tokens` per route-table block, a power of two ≤ 1024; use the engine's KV-cache block size (vLLM: 16)"},
	{key: "shards", bind: func(c *serveConfig) value { return intV{&c.Reactor.Loops} },
		help: "`count` of event loops (shards), each owning a part of the route table; 0: GOMAXPROCS"},
	{key: "pin-shards", bind: func(c *serveConfig) value { return boolV{&c.Reactor.LockOSThread} },
		help: "lock each event loop to its own OS thread"},
	{key: "policy", bind: func(c *serveConfig) value { return strV{&c.Router.Policy} },
		help: "routing `policy`: prefix (least estimated time to first token: queue wait plus prefill of the blocks a backend does not hold); " +
			"ranvier (deepest cached prefix, else rendezvous hash of the first blocks; load bound --load-factor × median); " +
			"baselines without the route table: round_robin, least_request (fewer in flight of two random backends), " +
			"consistent_hash (rendezvous hash of the first 4 blocks, load bound 1.25 × average), body_hash (rendezvous hash of the body's first 512 bytes, no load term)"},
	{key: "session-header", bind: func(c *serveConfig) value { return strV{&c.Router.SessionHeader} },
		help: "request `header` naming a session (e.g. X-Session-ID) that policy prefix pins to its backend while that one is routable and not queueing; empty: off"},
	{key: "max-body", live: true, bind: func(c *serveConfig) value { return sizeV{&c.Reactor.MaxBodyBytes} },
		help: "largest request body (`size`: B, KiB, MiB, GiB), 1KiB–1GiB; larger ones get 413"},
	{key: "max-body-values", bind: func(c *serveConfig) value { return intV{&c.Router.Body.MaxValues} },
		help: "most JSON `values` (objects, arrays, strings, numbers, literals) a chat or completion body may hold, counted before parsing; more get 413"},
	{key: "max-body-depth", bind: func(c *serveConfig) value { return intV{&c.Router.Body.MaxDepth} },
		help: "deepest nesting (`levels` of objects and arrays), 1–256, of a chat or completion body; deeper ones get 413"},
	{key: "max-header", live: true, bind: func(c *serveConfig) value { return sizeV{&c.Reactor.MaxHeaderBytes} },
		help: "largest request head (`size`), 1KiB–1MiB; larger ones get 431"},
	{key: "max-conns", live: true, bind: func(c *serveConfig) value { return intV{&c.Reactor.MaxConns} },
		help: "most open client `connections`; over it a new one gets 503 and is closed"},
	{key: "header-timeout", live: true, bind: func(c *serveConfig) value { return durV{&c.Reactor.HeaderTimeout} },
		help: "`duration` a client has to send a request head (e.g. 10s) before the connection is closed"},
	{key: "idle-timeout", live: true, bind: func(c *serveConfig) value { return durV{&c.Reactor.IdleTimeout} },
		help: "`duration` an idle keep-alive client connection stays open"},
	{key: "connect-timeout", live: true, bind: func(c *serveConfig) value { return durV{&c.Backend.ConnectTimeout} },
		help: "`duration` to connect to a backend before trying the next one"},
	{key: "first-byte-timeout", live: true, bind: func(c *serveConfig) value { return durV{&c.Backend.FirstByteTimeout} },
		help: "`duration` from sending a request to a backend to its response head (time to first byte); 504 over it, not retried. " +
			"A non-streamed answer's head comes only when its generation ends (vLLM), so this bounds non-streamed generations"},
	{key: "request-timeout", live: true, bind: func(c *serveConfig) value { return durV{&c.Backend.RequestTimeout} },
		help: "`duration` a whole request may take, retries and streamed answer included: 504 before the response head, an SSE error event after; 0: no limit"},
	{key: "stream-idle-timeout", live: true, bind: func(c *serveConfig) value { return durV{&c.Backend.StreamIdleTimeout} },
		help: "`duration` a streamed answer's backend may send nothing after its head: then an SSE error event ends it (counted, saltus_upstream_errors_total{kind=\"stream_idle\"})"},
	{key: "response-timeout", deprecated: true, bind: func(c *serveConfig) value { return durV{&c.ResponseTimeout} },
		help: "deprecated alias of --first-byte-timeout (`duration`); prints a warning"},
	{key: "max-response-body", bind: func(c *serveConfig) value { return sizeV{&c.Backend.MaxResponseBody} },
		help: "largest non-streamed answer (`size`) buffered whole, 1KiB–1GiB; larger ones are relayed as they come (their usage is not read)"},
	{key: "backend-header", live: true, bind: func(c *serveConfig) value { return strV{&c.Backend.BackendHeader} },
		help: "how clients see a backend in X-Saltus-Backend and error messages (`mode`): url, name (backend names: URLs expose the internal network) or none (no header; names in messages)"},
	{key: "max-retries", bind: func(c *serveConfig) value { return intV{&c.Backend.MaxRetries} },
		help: "further `backends` tried, 0–10, when one fails before its first byte"},
	{key: "retry-server-errors", bind: func(c *serveConfig) value { return boolV{&c.Backend.RetryServerErrors} },
		help: "an engine's 500, 502 or 504 before any answer byte goes to the next candidate backend (within --max-retries) instead of the client; the last one's answer is the client's"},
	{key: "upstream-io", deprecated: true, bind: func(c *serveConfig) value { return strV{&c.UpstreamIO} },
		help: "deprecated, `mode` loop only: every request talks to its backend on the client connection's event loop"},
	{key: "health-interval", live: true, bind: func(c *serveConfig) value { return durV{&c.Backend.HealthInterval} },
		help: "`duration` between health probes (GET /health) of each healthy backend; 3 failed probes in a row mark it down"},
	{key: "health-down-interval", live: true, bind: func(c *serveConfig) value { return durV{&c.Backend.HealthDownInterval} },
		help: "`duration` between health probes of a backend that is down or whose breaker tripped; one good probe (or one answered request) brings it back"},
	{key: "drain-timeout", live: true, bind: func(c *serveConfig) value { return durV{&c.DrainTimeout} },
		help: "`duration` requests in flight may still run after SIGTERM or SIGINT; 0: do not wait"},
	{key: "max-blocks", bind: func(c *serveConfig) value { return intV{&c.Router.Tree.MaxBlocks} },
		help: "route-table capacity in `blocks` per shard; least recently used routes go first"},
	{key: "route-ttl", bind: func(c *serveConfig) value { return durV{&c.Router.Tree.TTL} },
		help: "`duration` after which a learned route not used again expires"},
	{key: "load-factor", live: true, bind: func(c *serveConfig) value { return floatV{&c.Router.LoadFactor} },
		help: "bounded load of policy ranvier: a backend above `factor` × the median in-flight count is skipped for the least loaded one; at least 1"},
	{key: "load-slack", live: true, bind: func(c *serveConfig) value { return floatV{&c.Router.LoadSlack} },
		help: "bounded load of policy prefix: a backend with (1 + `slack`) × the mean in-flight count (at least 4) counts as queueing, so a prefix it holds may gain another holder; at least 0"},
	{key: "load-tokens", live: true, bind: func(c *serveConfig) value { return intV{&c.Router.LoadTokens} },
		help: "policy prefix: one request in flight on a backend costs as much as this many prompt `tokens` of prefill (decode steps grow with the batch)"},
	{key: "kv-tokens", live: true, bind: func(c *serveConfig) value { return intV{&c.Router.KVTokens} },
		help: "policy prefix: the engines' KV cache capacity in `tokens` (vLLM logs GPU blocks × block size at start); a miss is priced by how full of prefixes in use a backend's cache is; a scraped vllm:cache_config_info wins; 0: unknown, relative to the fleet's fullest"},
	{key: "learn-from-usage", live: true, bind: func(c *serveConfig) value { return boolV{&c.Router.LearnFromUsage} },
		help: "policy prefix: ask the engine for a streamed chat or completion's usage (stream_options.include_usage) when the client did not, " +
			"to learn its cached tokens, and remove that usage chunk before the client sees it"},
	{key: "scrape-interval", bind: func(c *serveConfig) value { return durV{&c.Backend.ScrapeInterval} },
		help: "`duration` between scrapes of each backend's engine /metrics (vLLM's waiting and running requests, KV usage and capacity: policy prefix learns each engine's running limit and prices the wait for a slot); 0: off (an engine without /metrics costs one failed GET per interval, counted)"},
	{key: "gc-heap-floor", bind: func(c *serveConfig) value { return size64V{&c.GCHeapFloor} },
		help: "`size` of a never-written block counted as live Go heap (address space, not memory), so the garbage collector lets about this much garbage pile up before it runs: " +
			"fewer collections under load for up to this much more resident memory; 0: none (Go's own 4MiB minimum)"},
	{key: "memory-limit", bind: func(c *serveConfig) value { return size64V{&c.Memory.Limit} },
		help: "the Go runtime's soft memory limit (`size`: the collector works harder near it; not a cap); 0: GOMEMLIMIT from the environment when set (GOMEMLIMIT=off: none), else 90% of the container's (cgroup) memory limit, else none"},
	{key: "memory-give-back", bind: func(c *serveConfig) value { return durV{&c.Memory.Interval} },
		help: "`duration` between looks at the heap: when it holds 8MiB more than after the last give-back and stopped growing (a burst of large bodies is over), saltus collects and returns the free memory to the OS; 0: off (the runtime returns it slowly)"},
	{key: "token-budget", bind: func(c *serveConfig) value { return sizeV{&c.Router.Pool.TokenBudget} },
		help: "most tokenizer work one request may cause (`size` of prose: B, KiB, MiB; a byte of a run of 64+ bytes of one class, e.g. one repeated letter, counts 32), 1KiB–1GiB; text past it is keyed as 64-byte blocks"},
	{key: "cluster-bind", bind: func(c *serveConfig) value { return strV{&c.Cluster.Bind} },
		help: "`host:port` (UDP and TCP) where this router meets its peers to share learned routes and backend load (memberlist); empty: no cluster"},
	{key: "cluster-advertise", bind: func(c *serveConfig) value { return strV{&c.Cluster.Advertise} },
		help: "`host:port` peers reach this router at when it is not --cluster-bind's (NAT, containers); empty: --cluster-bind's"},
	{key: "join", bind: func(c *serveConfig) value { return listV{p: &c.Cluster.Join, set: new(bool)} },
		help: "`host:port` of a peer router's --cluster-bind to join (repeat, or separate by commas); peers not reached are retried every 10s"},
	{key: "cluster-key-file", bind: func(c *serveConfig) value { return strV{&c.ClusterKeyFile} },
		help: "`path` of the cluster key (base64 of 16, 24 or 32 random bytes: saltus cluster-key prints one) that encrypts and authenticates the routers' messages; every router needs the same; empty: plaintext, anyone reaching --cluster-bind may join"},
	{key: "node-name", bind: func(c *serveConfig) value { return strV{&c.Cluster.NodeName} },
		help: "this router's `name` in the cluster, unique; empty: host name and --cluster-bind's port"},
	{key: "discovery", bind: func(c *serveConfig) value { return strV{&c.Discovery} },
		help: "service `discovery` adding backends beside the configured ones: k8s (the ready endpoints of --k8s-service's EndpointSlices, and of --k8s-model-selector's; those that leave or turn not ready are drained, then removed once idle); empty: none"},
	{key: "k8s-service", bind: func(c *serveConfig) value { return strV{&c.K8s.Service} },
		help: "with --discovery k8s: the Service `name` whose endpoints are the backends (needs get, list and watch on endpointslices.discovery.k8s.io); it or --k8s-model-selector is required"},
	{key: "k8s-namespace", bind: func(c *serveConfig) value { return strV{&c.K8s.Namespace} },
		help: "with --discovery k8s: the Service's `namespace`; empty: the pod's own (in a cluster), the kubeconfig context's, else default"},
	{key: "k8s-port-name", bind: func(c *serveConfig) value { return strV{&c.K8s.PortName} },
		help: "with --discovery k8s: the endpoints' port `name` to send to (e.g. http); empty: the Service's only, or first, port"},
	{key: "k8s-kubeconfig", bind: func(c *serveConfig) value { return strV{&c.K8s.Kubeconfig} },
		help: "with --discovery k8s: a kubeconfig `file` (its current context) to reach the API server; empty: in-cluster (the pod's service account)"},
	{key: "k8s-model-selector", bind: func(c *serveConfig) value { return listV{p: &c.K8s.ModelSelectors, set: new(bool), whole: true} },
		help: "with --discovery k8s: MODEL=SELECTOR, a Kubernetes label `selector` of EndpointSlices (they carry their Service's labels: e.g. llama-3-8b=app=vllm,tier=a) " +
			"in --k8s-namespace, watched besides (or instead of) --k8s-service; its ready endpoints are pinned to MODEL (they serve exactly the models of the selectors that find them, " +
			"even when --k8s-service finds them). Repeat the flag for several; each use is one entry, not split at commas (selectors hold commas); YAML: a list. At most 64"},
	{key: "state-dir", bind: func(c *serveConfig) value { return strV{&c.State.Dir} },
		help: "`directory` where the route table (the routes this router learned, with their ages) is saved every --state-interval and at shutdown, and restored from at start (created if missing); empty: not kept across restarts"},
	{key: "state-interval", bind: func(c *serveConfig) value { return durV{&c.State.Interval} },
		help: "`duration` between route table snapshots in --state-dir"},
	{key: "otel-endpoint", bind: func(c *serveConfig) value { return strV{&c.Tracing.Endpoint} },
		help: "`URL` of an OpenTelemetry collector's OTLP/HTTP receiver (e.g. http://collector:4318; a URL without a path gets /v1/traces) to export a span per request to; " +
			"empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT when set, else off. The other OTEL_* variables (headers, timeout, service name) apply as the OpenTelemetry SDK reads them"},
	{key: "otel-sample-ratio", bind: func(c *serveConfig) value { return floatV{&c.Tracing.SampleRatio} },
		help: "share (`ratio` 0 to 1) of requests without a client traceparent whose span is sampled and exported; a client's traceparent decides by its sampled flag (parent-based); -1: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, else every request"},
	{key: "log-format", bind: func(c *serveConfig) value { return strV{&c.LogFormat} },
		help: "log `format`: text or json (to stderr)"},
	{key: "log-level", live: true, bind: func(c *serveConfig) value { return strV{&c.LogLevel} },
		help: "log `level`: debug, info, warn or error"},
	{key: "access-log", bind: func(c *serveConfig) value { return strV{&c.AccessLog.Path} },
		help: "`path` of the access log, one line per finished request (client, key name, model, status, backend, route reason, tokens, timings, bytes; never the prompt or the answer); - for stdout; " +
			"reopened on every reload (SIGHUP, POST /admin/reload: logrotate's create mode); empty: off"},
	{key: "access-log-format", bind: func(c *serveConfig) value { return strV{&c.AccessLog.Format} },
		help: "access log line `format`: json (one object per line) or logfmt"},
	{key: "access-log-max-size", bind: func(c *serveConfig) value { return size64V{&c.AccessLog.MaxSize} },
		help: "rotate the access log when a line would take it past this `size` (PATH.1 the newest old file ... PATH.N); 0: never (rotate it with logrotate and a reload)"},
	{key: "access-log-max-files", bind: func(c *serveConfig) value { return intV{&c.AccessLog.MaxFiles} },
		help: "rotated access log `files` kept (PATH.1 ... PATH.N); the oldest is removed"},
	{key: "access-log-sample", bind: func(c *serveConfig) value { return floatV{&c.AccessLog.Sample} },
		help: "`fraction` in (0, 1] of answers under 400 the access log writes; answers of 400 and up and clients gone are always written"},
	{key: "access-log-buffer", bind: func(c *serveConfig) value { return intV{&c.AccessLog.Buffer} },
		help: "access log `lines` queued for its writer; a line that finds the queue full is dropped and counted (saltus_access_log_dropped_total), never waited for"},
}

// flagName is k's flag: its key unless it says otherwise.
func (k serveKey) flagName() string {
	if k.flag != "" {
		return k.flag
	}
	return k.key
}

// Bounds Validate enforces.
const (
	maxBlockSize = 1024
	maxMaxBlocks = 1<<31 - 2 // tree.Config's bound
)

// Validate reports every invalid value, each error naming its key. The
// components check their own fields (dataplane.Config.Validate, the one
// place, which Build and `saltus bench` run too); what is checked here is
// what only serve knows: addresses and files, sizes in serve's units,
// keys that need one another, and the few bounds serve sets tighter than
// its component (block-size, max-body, max-header, token-budget).
func (c serveConfig) Validate() error {
	var errs []error
	reported := map[string]bool{} // keys bad has reported
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: "+format, append([]any{key}, args...)...))
		reported[key] = true
	}
	checkAddr := func(key, v string) {
		if _, port, err := net.SplitHostPort(v); err != nil {
			bad(key, "want host:port, got %q", v)
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			bad(key, "want host:port with a port number in [0, 65535], got %q", v)
		}
	}
	checkAddr("listen", c.Reactor.Listen)
	checkAddr("admin-listen", c.Admin.Listen)
	if c.Reactor.Listen == c.Admin.Listen && !strings.HasSuffix(c.Reactor.Listen, ":0") {
		bad("admin-listen", "must differ from listen, both are %q", c.Reactor.Listen)
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
	if c.Router.ChatTemplate != "" && !slices.Contains(chatpkg.Names(), c.Router.ChatTemplate) {
		bad("chat-template", "unknown template %q, want one of %s (or empty: detect from the tokenizer)", c.Router.ChatTemplate, strings.Join(chatpkg.Names(), ", "))
	}
	if c.Router.ChatTemplate != "" && c.Router.ChatTemplateFile != "" {
		bad("chat-template-file", "excludes chat-template (%q): give one", c.Router.ChatTemplate)
	} else if c.Router.ChatTemplateFile != "" {
		if _, err := os.Stat(c.Router.ChatTemplateFile); err != nil {
			bad("chat-template-file", "cannot read it: %v", err)
		}
	}
	if c.Router.BlockSize < 1 || c.Router.BlockSize > maxBlockSize || c.Router.BlockSize&(c.Router.BlockSize-1) != 0 {
		bad("block-size", "must be a power of two between 1 and %d, got %d", maxBlockSize, c.Router.BlockSize)
	}
	if !slices.Contains(policy.Names(), c.Router.Policy) {
		bad("policy", "unknown policy %q, want one of %s", c.Router.Policy, strings.Join(policy.Names(), ", "))
	}
	if c.Reactor.MaxBodyBytes < 1<<10 || c.Reactor.MaxBodyBytes > 1<<30 {
		bad("max-body", "must be between 1KiB and 1GiB, got %v", byteSize(c.Reactor.MaxBodyBytes))
	}
	if c.Router.Body.MaxValues < 1 {
		bad("max-body-values", "must be at least 1, got %d", c.Router.Body.MaxValues)
	}
	if c.Memory.Limit < 0 {
		bad("memory-limit", "must not be negative, got %v", byteSize(c.Memory.Limit))
	}
	if c.Memory.Interval < 0 {
		bad("memory-give-back", "must not be negative, got %v", c.Memory.Interval)
	}
	if c.GCHeapFloor < 0 || c.GCHeapFloor > 4<<30 {
		bad("gc-heap-floor", "must be between 0 and 4GiB, got %v", byteSize(c.GCHeapFloor))
	}
	if c.Reactor.MaxHeaderBytes < 1<<10 || c.Reactor.MaxHeaderBytes > 1<<20 {
		bad("max-header", "must be between 1KiB and 1MiB, got %v", byteSize(c.Reactor.MaxHeaderBytes))
	}
	if c.ResponseTimeout != 0 {
		bad("response-timeout", "BUG: the deprecated alias was not resolved")
	}
	if c.Backend.MaxResponseBody < 1<<10 || c.Backend.MaxResponseBody > 1<<30 {
		bad("max-response-body", "must be between 1KiB and 1GiB, got %v", byteSize(c.Backend.MaxResponseBody))
	}
	if c.DrainTimeout < 0 {
		bad("drain-timeout", "must not be negative (0 = do not wait), got %v", duration(c.DrainTimeout))
	}
	if c.UpstreamIO != "" && c.UpstreamIO != "loop" {
		bad("upstream-io", `was removed: every request takes the loop path (drop the key), got %q`, c.UpstreamIO)
	}
	if c.Router.Tree.MaxBlocks < 1 || c.Router.Tree.MaxBlocks > maxMaxBlocks {
		bad("max-blocks", "must be between 1 and %d, got %d", maxMaxBlocks, c.Router.Tree.MaxBlocks)
	}
	if c.Router.Pool.TokenBudget < 1<<10 || c.Router.Pool.TokenBudget > 1<<30 {
		bad("token-budget", "must be between 1KiB and 1GiB, got %v", byteSize(c.Router.Pool.TokenBudget))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format", `must be "text" or "json", got %q`, c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("log-level", "%v", err)
	}
	if c.ClusterKeyFile != "" {
		if !c.Cluster.Enabled() {
			bad("cluster-key-file", "needs cluster-bind")
		} else if _, err := gossip.LoadKey(c.ClusterKeyFile); err != nil {
			bad("cluster-key-file", "%v", err)
		}
	}
	checkPair := func(certKey, keyKey, cert, key string) {
		switch {
		case cert == "" && key == "":
		case cert == "":
			bad(certKey, "needs to be set with %s", keyKey)
		case key == "":
			bad(keyKey, "needs to be set with %s", certKey)
		default:
			if err := tlsconf.Check(cert, key); err != nil {
				bad(certKey, "%v", err)
			}
		}
	}
	checkPair("tls-cert-file", "tls-key-file", c.TLSCertFile, c.TLSKeyFile)
	checkPair("admin-tls-cert-file", "admin-tls-key-file", c.AdminTLSCertFile, c.AdminTLSKeyFile)
	if c.Reactor.TLSHandshakeTimeout <= 0 {
		bad("tls-handshake-timeout", "must be positive, got %v", duration(c.Reactor.TLSHandshakeTimeout))
	}
	if c.BackendTLSCAFile != "" {
		if _, err := tlsconf.LoadCAFile(c.BackendTLSCAFile, false); err != nil {
			bad("backend-tls-ca-file", "%v", err)
		}
	}
	if c.AdminTLSClientCAFile != "" {
		if c.AdminTLSCertFile == "" {
			bad("admin-tls-client-ca-file", "needs admin-tls-cert-file (client certificates need TLS)")
		} else if _, err := tlsconf.LoadCAFile(c.AdminTLSClientCAFile, false); err != nil {
			bad("admin-tls-client-ca-file", "%v", err)
		}
	}
	if err := checkKeys(c.Keys); err != nil {
		errs = append(errs, err)
	}
	if c.Discovery == "" {
		for _, k := range []struct{ key, v string }{{"k8s-service", c.K8s.Service}, {"k8s-namespace", c.K8s.Namespace}, {"k8s-port-name", c.K8s.PortName}, {"k8s-kubeconfig", c.K8s.Kubeconfig},
			{"k8s-model-selector", strings.Join(c.K8s.ModelSelectors, "; ")}} {
			if k.v != "" {
				bad(k.key, "needs discovery: k8s")
			}
		}
	}
	if c.State.Dir != "" {
		if fi, err := os.Stat(c.State.Dir); err == nil && !fi.IsDir() {
			bad("state-dir", "%s is not a directory", c.State.Dir)
		}
	}
	// The components' own checks (dataplane.Config.Validate and the
	// admin listener's), each line under the key that sets its field; a
	// key reported above is not reported twice (a bound stricter than the
	// component's, or a message in the key's units).
	if err := errors.Join(c.Config.Validate(), c.adminConfig(nil).Validate()); err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			key, rest := componentKey(line)
			switch {
			case key == "":
				errs = append(errs, errors.New("config: "+line))
			case !reported[key]:
				bad(key, "%s", rest)
			}
		}
	}
	return errors.Join(errs...)
}

// componentKeys maps the start of a component's Validate error, which
// names the field, to the key that sets the field: the error then reads
// "config: key: must be …" (dataplane.Config.Validate's errors name the
// component's field). A field no key sets is not listed: its error keeps
// the component's words.
var componentKeys = []struct{ prefix, key string }{
	{"reactor: Listen ", "listen"},
	{"reactor: Loops ", "shards"},
	{"reactor: MaxHeaderBytes ", "max-header"},
	{"reactor: MaxBodyBytes ", "max-body"},
	{"reactor: HeaderTimeout ", "header-timeout"},
	{"reactor: IdleTimeout ", "idle-timeout"},
	{"reactor: MaxConns ", "max-conns"},
	{"reactor: TLSHandshakeTimeout ", "tls-handshake-timeout"},
	{"backend: ConnectTimeout ", "connect-timeout"},
	{"backend: FirstByteTimeout ", "first-byte-timeout"},
	{"backend: StreamIdleTimeout ", "stream-idle-timeout"},
	{"backend: HealthInterval ", "health-interval"},
	{"backend: HealthDownInterval ", "health-down-interval"},
	{"backend: ScrapeInterval ", "scrape-interval"},
	{"backend: RequestTimeout ", "request-timeout"},
	{"backend: MaxResponseBody ", "max-response-body"},
	{"backend: MaxRetries ", "max-retries"},
	{"backend: EngineQueue ", "engine-queue"},
	{"backend: BackendHeader ", "backend-header"},
	{"shard: BlockSize ", "block-size"},
	{"shard: PriorityModels", "model-priority"},
	{"shard: Tree: tree: MaxBlocks ", "max-blocks"},
	{"shard: Tree: tree: TTL ", "route-ttl"},
	{"shard: Pool: tokenpool: TokenBudget ", "token-budget"},
	{"tokenpool: TokenBudget ", "token-budget"}, // a second line of the pool's errors
	{"shard: Queue: queue: MaxEntries ", "queue-max-entries"},
	{"shard: Queue: queue: MaxWait ", "queue-max-wait"},
	{"shard: QueueAffinity ", "queue-affinity"},
	{"shard: AdapterEngines ", "adapter-engines"},
	{"policy: LoadFactor ", "load-factor"},
	{"policy: LoadSlack ", "load-slack"},
	{"policy: LoadTokens ", "load-tokens"},
	{"policy: KVTokens ", "kv-tokens"},
	{"shard: Policy ", "policy"},
	{"shard: Body: MaxValues ", "max-body-values"},
	{"shard: Body: MaxDepth ", "max-body-depth"},
	{"shard: KVEventsBridge ", "kv-events-bridge"},
	{"shard: TenantHeader: ", "tenant-header"},
	{"fleet: models-interval ", "models-interval"},
	{"state: Interval ", "state-interval"},
	{"discovery: ", "discovery"},
	{"tracing: Endpoint: ", "otel-endpoint"},
	{"tracing: SampleRatio: ", "otel-sample-ratio"},
	{"admin: Listen ", "admin-listen"},
	{"admin: BearerToken ", "admin-token"},
	{"admin: MaxBodyBytes ", "max-body"}, // adminConfig's, from max-body
}

// componentKey returns the key of a component's error line and the line
// after its field's name ("must be positive, got 0s"); "" if no key sets
// the field.
func componentKey(line string) (key, rest string) {
	for _, k := range componentKeys {
		if r, ok := strings.CutPrefix(line, k.prefix); ok {
			if i := strings.IndexByte(r, ']'); strings.HasPrefix(r, "[") && i > 0 { // a list's entry: key[i]
				return k.key + r[:i+1], strings.TrimPrefix(r[i+1:], ": ")
			}
			if v, want, ok := strings.Cut(strings.TrimPrefix(r, "= "), ": want "); ok && strings.HasPrefix(r, "= ") {
				return k.key, "want " + want + ", got " + v // reactor's "Loops = 2000: want 0 (GOMAXPROCS) to 1024"
			}
			return k.key, strings.TrimPrefix(r, ": ")
		}
	}
	return "", line
}

// servingConfig is the serving path's config: the keys set it directly.
func (c serveConfig) servingConfig() dataplane.Config {
	dc := c.Config
	dc.AdminToken = c.Admin.BearerToken
	return dc
}

// adminConfig is the admin listener's config; ready is the data plane's
// readiness (nil: a routable backend in the admin's list).
func (c serveConfig) adminConfig(ready func() error) admin.Config {
	ac := c.Admin
	ac.Ready = ready
	ac.MaxBodyBytes = int64(c.Reactor.MaxBodyBytes) // /admin/explain takes what the API takes
	return ac
}

// serveFlags is the serve command's flag set: every key's flag, bound to
// a serveConfig, and --config and --dry-run.
type serveFlags struct {
	fs         *flag.FlagSet
	values     serveConfig // what the flags set, over the defaults
	configPath string
	dryRun     bool
}

// newServeFlags binds the keys' flags to cfg (nil: a serveConfig of the
// flag set's own, over the defaults).
func newServeFlags(out io.Writer, cfg *serveConfig) *serveFlags {
	f := &serveFlags{fs: flag.NewFlagSet("serve", flag.ContinueOnError), values: defaultServeConfig()}
	if cfg == nil {
		cfg = &f.values
	}
	fs := f.fs
	fs.SetOutput(out)
	for _, k := range serveKeys {
		help := k.help
		if k.live {
			help += " [reloadable]"
		}
		fs.Var(k.bind(cfg), k.flagName(), help)
	}
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
given. SIGHUP or POST /admin/reload reads them again: the flags marked
[reloadable] change while serving; a changed other one is reported and
waits for a restart; an invalid file changes nothing. Durations take a unit (500ms, 10s, 1h); sizes take B, KiB, MiB, GiB
(or KB, MB, GB: powers of 1000).

Flags:
`)
	names := []string{"config", "dry-run"}
	for _, k := range serveKeys {
		names = append(names, k.flagName())
	}
	printFlags(w, f.fs, names)
}

// errUsage: the flags were wrong and the flag package has said so.
var errUsage = errors.New("usage")

// loadServeConfig parses args, reads the --config file and applies the
// flags given over it, then validates. It returns flag.ErrHelp for -h,
// errUsage for a flag error (already reported on out).
func loadServeConfig(args []string, out io.Writer) (cfg serveConfig, dryRun bool, err error) {
	f := newServeFlags(out, nil)
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
	// Only the flags actually given override the file: the same
	// arguments, parsed again onto cfg (they parsed once: no error).
	if err := newServeFlags(io.Discard, &cfg).fs.Parse(args); err != nil {
		return cfg, false, fmt.Errorf("BUG: flags parsed twice disagree: %v", err)
	}
	if env := os.Getenv(keysEnv); env != "" {
		cfg.Keys.Env = []byte(env)
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if given["response-timeout"] {
		if given["first-byte-timeout"] {
			return cfg, false, errors.New("config: response-timeout: deprecated alias of first-byte-timeout; give only first-byte-timeout")
		}
		cfg.Backend.FirstByteTimeout = cfg.ResponseTimeout
		cfg.ResponseTimeout = 1 // the warning below; any non-zero value
	}
	if cfg.ResponseTimeout != 0 {
		fmt.Fprintf(out, "saltus serve: warning: response-timeout is deprecated: use first-byte-timeout (set to %v); request-timeout bounds a whole request\n", duration(cfg.Backend.FirstByteTimeout))
		cfg.ResponseTimeout = 0
	}
	if err := cfg.Validate(); err != nil {
		return cfg, f.dryRun, err
	}
	if cfg.ClusterKeyFile != "" {
		key, err := gossip.LoadKey(cfg.ClusterKeyFile) // Validate read it once
		if err != nil {
			return cfg, f.dryRun, fmt.Errorf("config: cluster-key-file: %w", err)
		}
		cfg.Cluster.Key = key
	}
	return cfg, f.dryRun, nil
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
	byKey := map[string]serveKey{}
	for _, k := range serveKeys {
		byKey[k.key] = k
	}
	seen := map[string]int{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, val := root.Content[i], root.Content[i+1]
		cf, ok := byKey[k.Value]
		if !ok {
			hint := ""
			for _, c := range byKey {
				if c.flagName() == k.Value {
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
		if err := cf.bind(cfg).decode(val); err != nil {
			errs = append(errs, fmt.Errorf("config %s: line %d: %s: %v", name, val.Line, cf.key, cleanYAMLError(err)))
		}
	}
	// The deprecated alias: its value goes to its successor;
	// loadServeConfig warns (cfg.ResponseTimeout stays set until then).
	if line, ok := seen["response-timeout"]; ok {
		if _, both := seen["first-byte-timeout"]; both {
			errs = append(errs, fmt.Errorf("config %s: line %d: response-timeout: deprecated alias of first-byte-timeout; give only first-byte-timeout", name, line))
		} else {
			cfg.Backend.FirstByteTimeout = cfg.ResponseTimeout
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
// same values (the admin token is redacted; deprecated keys are left out).
func writeEffective(w io.Writer, cfg serveConfig) error {
	if cfg.Admin.BearerToken != "" {
		cfg.Admin.BearerToken = "REDACTED"
	}
	doc := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range serveKeys {
		if k.deprecated {
			continue
		}
		var v yaml.Node
		if err := v.Encode(k.bind(&cfg).yaml()); err != nil {
			return err
		}
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k.key}, &v)
	}
	var buf bytes.Buffer
	buf.WriteString("# saltus serve: effective configuration (defaults, then --config, then flags)\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
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
