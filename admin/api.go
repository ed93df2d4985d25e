package admin

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
)

// BackendInfo is one backend as the admin API shows it.
type BackendInfo struct {
	ID       int    `json:"id"`
	URL      string `json:"url"`
	Name     string `json:"name,omitempty"` // as clients see it with serve --backend-header name
	Healthy  bool   `json:"healthy"`
	Draining bool   `json:"draining"`
	InFlight int64  `json:"in_flight"`
	// Engine is the engine's own load from its last fresh scrape of its
	// /metrics (serve --scrape-interval); nil when it is not scraped or
	// the values are stale.
	Engine *EngineInfo `json:"engine,omitempty"`
	// Models are the model names it serves (its pools: what its GET
	// /v1/models lists, or what configuration pins), sorted;
	// ModelsState says where they come from: listed, pinned, or unknown
	// (not listed yet: it is sent only models no other backend serves);
	// ModelsError is the last fetch's failure.
	Models      []string `json:"models,omitempty"`
	ModelsState string   `json:"models_state,omitempty"`
	ModelsError string   `json:"models_error,omitempty"`
}

// EngineInfo is what a backend's engine last reported about its load
// (vLLM's vllm:num_requests_waiting, _running, vllm:kv_cache_usage_perc,
// vllm:cache_config_info).
type EngineInfo struct {
	Waiting  int64   `json:"waiting"`
	Running  int64   `json:"running"`
	KVUsage  float64 `json:"kv_usage"`            // fraction of the KV cache in use, 0 to 1
	KVTokens int64   `json:"kv_tokens,omitempty"` // the KV cache's capacity in tokens; 0: not reported
	AgeMS    int64   `json:"age_ms"`              // milliseconds since the scrape that read them
}

// Backends is the backend registry as the admin API needs it; cmd/saltus
// adapts *backend.Set to it. Every method: any goroutine.
type Backends interface {
	// List returns every backend, draining and unhealthy ones included.
	List() []BackendInfo
	// Add registers a backend by URL. Its error is the client's fault
	// (400) unless it wraps ErrUnavailable (503).
	Add(url string) (BackendInfo, error)
	// Remove forgets a backend at once; ErrNotFound for an unknown id.
	Remove(id int) error
	// Drain stops routing new requests to a backend; ErrNotFound for an
	// unknown id.
	Drain(id int) error
}

// Routes is the router as the admin API needs it; cmd/saltus adapts
// *shard.Router to it. Every method: any goroutine other than an event
// loop (Explain waits for a loop).
type Routes interface {
	// RouteStats returns a JSON-marshalable summary of the route tables.
	RouteStats() any
	// Explain returns the routing decision for an OpenAI request body sent
	// to path, without forwarding it. Its error is the client's fault
	// (400) unless it wraps ErrUnavailable (503).
	Explain(body []byte, path string) (any, error)
}

// Cluster is what a Routes may also implement: GET /admin/cluster's
// answer, nil when the router is not in a cluster ({"enabled":false}).
// Any goroutine.
type Cluster interface {
	ClusterStatus() any
}

// Discovery is what a Routes may also implement: GET /admin/discovery's
// answer, nil when no service discovery runs ({"enabled":false}). Any
// goroutine.
type Discovery interface {
	DiscoveryStatus() any
}

// Pools is what a Backends may also implement: GET /admin/pools's
// answer, the model pools requests are routed in (upstream/fleet). A
// Backends without it has no such endpoint (404). Any goroutine.
type Pools interface {
	Pools() PoolsInfo
}

// PoolsInfo is GET /admin/pools: the pools at one moment.
type PoolsInfo struct {
	// Pools has one entry per model name some backend lists or is
	// pinned to, by name.
	Pools []PoolInfo `json:"pools"`
	// Unknown are the backends whose models are not known (no GET
	// /v1/models answer yet, no pins): they are sent only the models no
	// pool serves.
	Unknown []PoolMember `json:"unknown"`
	// Backends says, per backend by ID, where its models come from.
	Backends []BackendModels `json:"backends"`
	// OtherQueue counts the requests queued for models without a pool
	// of their own (sent to the backends whose models are not known, or
	// past the bound on per-pool metrics: model "(other)" in /metrics);
	// absent while nothing was counted there.
	OtherQueue *PoolQueue `json:"other_queue,omitempty"`
}

// nonNil makes the lists "[]", not "null", in JSON. It writes into p's
// slices: p is a value Pools just built.
func (p PoolsInfo) nonNil() PoolsInfo {
	if p.Pools == nil {
		p.Pools = []PoolInfo{}
	}
	for i := range p.Pools {
		if p.Pools[i].Backends == nil {
			p.Pools[i].Backends = []PoolMember{}
		}
	}
	if p.Unknown == nil {
		p.Unknown = []PoolMember{}
	}
	if p.Backends == nil {
		p.Backends = []BackendModels{}
	}
	for i := range p.Backends {
		if p.Backends[i].Models == nil {
			p.Backends[i].Models = []string{}
		}
	}
	return p
}

// PoolInfo is one model's pool.
type PoolInfo struct {
	Model       string       `json:"model"`
	Parent      string       `json:"parent"`        // a LoRA adapter's base model; "" for a base model
	MaxModelLen int64        `json:"max_model_len"` // as the engine lists it; 0: not listed (a pin)
	Backends    []PoolMember `json:"backends"`      // by ID, routable or not
	Routable    int          `json:"routable"`      // how many of Backends are healthy and not draining now
	Requests    uint64       `json:"requests"`      // requests admitted to the pool since start (saltus_pool_requests_total)
	// Queue is the pool's gateway queue (requests waiting while every
	// engine of the pool is full); nil when the Backends does not report
	// queues.
	Queue *PoolQueue `json:"queue,omitempty"`
}

// PoolQueue is a pool's gateway queue: what waits now, and what became of
// the requests it took since start (saltus_queue_depth,
// saltus_queue_requests_total).
type PoolQueue struct {
	Depth int64 `json:"depth"` // requests waiting now
	// ByClass: Depth by priority band: high (priority < 0), normal (0 or
	// none), low (> 0).
	ByClass map[string]int64 `json:"by_class"`
	// OldestWaitMS: how long the request waiting longest has waited, in
	// milliseconds, as of the queue's last tick (50 ms); 0 when empty.
	OldestWaitMS int64 `json:"oldest_wait_ms"`
	// Since start: queued (every engine full), dispatched (a slot freed),
	// full (refused: the queue held its maximum), expired (refused: waited
	// its maximum), gone (the client left), shutdown (answered 503 when
	// saltus stopped).
	Queued     uint64 `json:"queued"`
	Dispatched uint64 `json:"dispatched"`
	Full       uint64 `json:"full"`
	Expired    uint64 `json:"expired"`
	Gone       uint64 `json:"gone"`
	Shutdown   uint64 `json:"shutdown"`
}

// PoolMember names a backend of a pool.
type PoolMember struct {
	ID   int    `json:"id"`
	Name string `json:"name,omitempty"` // as in BackendInfo
	URL  string `json:"url"`
}

// BackendModels is what is known of one backend's models.
type BackendModels struct {
	ID     int      `json:"id"`
	Name   string   `json:"name,omitempty"`
	URL    string   `json:"url"`
	Models []string `json:"models"` // the model names it serves, sorted
	// State: listed (from its GET /v1/models), pinned (--backend-models)
	// or unknown.
	State string `json:"state"`
	// Error is its last GET /v1/models failure ("" after a success).
	Error string `json:"error,omitempty"`
}

var (
	// ErrNotFound: no backend has the id. The API answers 404.
	ErrNotFound = errors.New("no such backend")
	// ErrUnavailable: the data plane cannot answer now (shutting down,
	// queue full). The API answers 503.
	ErrUnavailable = errors.New("unavailable")
)

// CheckBackendURL reports whether s is a backend address saltus can
// forward to: http://host:port or https://host:port with nothing after
// the port but an optional "/". cmd/saltus checks configured backends with it too, so the
// flag, the YAML file and the API accept the same addresses.
func CheckBackendURL(s string) error {
	const want = "want http://host:port or https://host:port"
	u, err := url.Parse(s)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without url.Error's repetition of s
		}
		return fmt.Errorf("%s, got %q: %v", want, s, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%s, got %q: scheme must be http or https", want, s)
	case u.Opaque != "" || u.Host == "":
		return fmt.Errorf("%s, got %q: no host", want, s)
	case u.User != nil:
		return fmt.Errorf("%s, got %q: user info is not supported", want, s)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("%s, got %q: nothing may follow the port", want, s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return fmt.Errorf("%s, got %q: %v", want, s, err)
	}
	if host == "" {
		return fmt.Errorf("%s, got %q: no host", want, s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%s, got %q: port must be a number in [1, 65535]", want, s)
	}
	return nil
}
