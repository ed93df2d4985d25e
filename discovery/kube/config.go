package kube

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Config says which EndpointSlices to watch (a Service's, and those of
// each model selector) and how to reach the API server. Zero values are
// not defaults: start from [DefaultConfig]. Immutable once passed to
// [New].
type Config struct {
	// Service is the Service whose EndpointSlices are watched: the slices
	// labelled kubernetes.io/service-name=Service (--k8s-service). Its
	// endpoints serve what their GET /v1/models lists (not pinned).
	// Default "": none; Service or ModelSelectors is required. A DNS-1035
	// label (lowercase letters, digits and '-', at most 63, starting with
	// a letter), as Service names are.
	Service string
	// ModelSelectors pin endpoints to models by label
	// (--k8s-model-selector, repeated): "MODEL=SELECTOR" entries, SELECTOR
	// a Kubernetes label selector ("app=vllm,tier=a", "tier in (a,b)")
	// sent as the labelSelector of a list and watch of the namespace's
	// EndpointSlices; slices carry their Service's labels, so a selector
	// picks Services by their labels. Each entry is a watch of its own,
	// whose ready endpoints are pinned to MODEL ([Target].Models): they
	// serve exactly the models pinned to them (the union over the entries
	// that find them), not what their /v1/models lists. The split is at
	// the first '=' (a model name holds none). The selector's syntax is
	// checked only loosely (printable ASCII, no space around it, at most
	// maxSelectorLen bytes): the API server parses it, and a 400 it
	// answers is logged and counted (errors{reason="status"}), retried
	// with the backoff. Default: none (an empty list, as a config file's
	// `k8s-model-selector: []` decodes); at most maxModelSelectors
	// entries, each a watch, a connection and its own metric series.
	ModelSelectors []string
	// Namespace is the Service's namespace (--k8s-namespace). Default "":
	// in a pod, the pod's own (the service account's namespace file); with
	// a kubeconfig, its current context's namespace; else "default".
	Namespace string
	// PortName picks the EndpointSlice port the targets use
	// (--k8s-port-name): the port of that name, for a Service that names
	// its ports (vLLM's "http" beside a "metrics" one). Default "": the
	// slice's only port, or its first if it has several (the Service's
	// first port: the EndpointSlice controller keeps the Service's order).
	// Only TCP ports count. A slice without the port contributes no
	// target, counted (saltus_discovery_k8s_endpoints{state="unusable"}).
	PortName string
	// Kubeconfig is a kubeconfig file to read the API server and
	// credentials from (--k8s-kubeconfig), its current context. Default
	// "": in-cluster, from KUBERNETES_SERVICE_HOST and
	// KUBERNETES_SERVICE_PORT and the pod's service account in
	// /var/run/secrets/kubernetes.io/serviceaccount (token, ca.crt,
	// namespace).
	Kubeconfig string

	// BackoffMin is the first wait after a failed list or watch; each
	// failure in a row doubles it, up to BackoffMax, and each wait is
	// jittered down by up to half (routers restarted together do not
	// hammer the API server in step). Default 500ms.
	BackoffMin time.Duration
	// BackoffMax bounds the wait between attempts. Default 30s: an API
	// server back from an outage is seen within half a minute.
	BackoffMax time.Duration

	// MaxResponseBytes bounds a list answer, a single watch event and an
	// error answer's body; over it the answer is refused, counted
	// (errors{reason="too_large"}), and the watcher relists after a
	// backoff. Default 16 MiB: an EndpointSlice holds at most 1,000
	// endpoints (100 as the controller fills them), a few hundred bytes
	// each, so this is tens of thousands of endpoints.
	MaxResponseBytes int
	// MaxSlices bounds the EndpointSlices kept. Default 1,000 (100,000
	// endpoints as the controller fills slices). Over it a new slice is
	// ignored, counted (errors{reason="too_many_slices"}).
	MaxSlices int

	// ConnectTimeout bounds a TCP connect and a TLS handshake. Default 10s.
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for a response head, list or watch
	// (the API server answers a watch's head at once). Default 10s.
	HeaderTimeout time.Duration
	// ListTimeout bounds a whole list, body included. Default 60s.
	ListTimeout time.Duration
	// WatchTimeout is the watch's timeoutSeconds: the API server ends a
	// watch after it, and the watcher resumes from the last
	// resourceVersion at once. Default 5m (client-go's informers use 5 to
	// 10 minutes). Whole seconds, at least 1s.
	WatchTimeout time.Duration
	// WatchIdleMargin is how much longer than WatchTimeout a watch may
	// send no byte before it is dropped as stalled (counted
	// errors{reason="stalled"}) and resumed after a backoff: a watch whose
	// connection died without a reset (a NAT dropped it) would otherwise
	// wait forever. Default 30s.
	WatchIdleMargin time.Duration

	// inClusterDir replaces /var/run/secrets/kubernetes.io/serviceaccount
	// (tests).
	inClusterDir string
	// getenv replaces os.Getenv for KUBERNETES_SERVICE_HOST/PORT (tests).
	getenv func(string) string
}

// serviceAccountDir is where the kubelet mounts a pod's service account.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// DefaultConfig returns the defaults documented on [Config]; Service or
// ModelSelectors is still to be set.
func DefaultConfig() Config {
	return Config{
		BackoffMin:       500 * time.Millisecond,
		BackoffMax:       30 * time.Second,
		MaxResponseBytes: 16 << 20,
		MaxSlices:        1000,
		ConnectTimeout:   10 * time.Second,
		HeaderTimeout:    10 * time.Second,
		ListTimeout:      60 * time.Second,
		WatchTimeout:     5 * time.Minute,
		WatchIdleMargin:  30 * time.Second,
		ModelSelectors:   []string{}, // as a config file's `k8s-model-selector: []` decodes
	}
}

// Limits of MaxResponseBytes: below 64 KiB one ordinary slice may not
// fit; above 1 GiB is no bound.
const (
	minResponseBytes = 64 << 10
	maxResponseBytes = 1 << 30
)

// Validate reports every invalid field by name.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("discovery/kube: "+format, a...))
	}
	if c.Service == "" && len(c.ModelSelectors) == 0 {
		bad("Service (--k8s-service) or ModelSelectors (--k8s-model-selector) is required: the name of the Service whose endpoints are the backends, or MODEL=SELECTOR label selectors of Services serving MODEL")
	} else if c.Service != "" {
		if err := checkLabel(c.Service, true); err != nil {
			bad("Service (--k8s-service) %q: %v", c.Service, err)
		}
	}
	if len(c.ModelSelectors) > maxModelSelectors {
		bad("ModelSelectors (--k8s-model-selector): at most %d entries (each is a watch), got %d", maxModelSelectors, len(c.ModelSelectors))
	}
	seen := make(map[string]int, len(c.ModelSelectors))
	for i, e := range c.ModelSelectors {
		if _, _, err := splitModelSelector(e); err != nil {
			bad("ModelSelectors (--k8s-model-selector) entry %d %q: %v", i+1, e, err)
		} else if j, dup := seen[e]; dup {
			bad("ModelSelectors (--k8s-model-selector) entry %d %q repeats entry %d", i+1, e, j)
		} else {
			seen[e] = i + 1
		}
	}
	if c.Namespace != "" {
		if err := checkLabel(c.Namespace, false); err != nil {
			bad("Namespace (--k8s-namespace) %q: %v", c.Namespace, err)
		}
	}
	if c.PortName != "" {
		if err := checkLabel(c.PortName, false); err != nil {
			bad("PortName (--k8s-port-name) %q: %v", c.PortName, err)
		}
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			bad("%s must be positive, got %v", name, d)
		}
	}
	positive("BackoffMin", c.BackoffMin)
	positive("BackoffMax", c.BackoffMax)
	positive("ConnectTimeout", c.ConnectTimeout)
	positive("HeaderTimeout", c.HeaderTimeout)
	positive("ListTimeout", c.ListTimeout)
	if c.BackoffMin > 0 && c.BackoffMax < c.BackoffMin {
		bad("BackoffMax (%v) must be at least BackoffMin (%v)", c.BackoffMax, c.BackoffMin)
	}
	if c.WatchTimeout < time.Second || c.WatchTimeout%time.Second != 0 {
		bad("WatchTimeout must be whole seconds, at least 1s (it is sent as timeoutSeconds), got %v", c.WatchTimeout)
	}
	if c.WatchIdleMargin < 0 {
		bad("WatchIdleMargin must not be negative, got %v", c.WatchIdleMargin)
	}
	if c.MaxResponseBytes < minResponseBytes || c.MaxResponseBytes > maxResponseBytes {
		bad("MaxResponseBytes must be in [%d, %d], got %d", minResponseBytes, maxResponseBytes, c.MaxResponseBytes)
	}
	if c.MaxSlices < 1 {
		bad("MaxSlices must be at least 1, got %d", c.MaxSlices)
	}
	return errors.Join(errs...)
}

// Bounds of ModelSelectors.
const (
	// maxModelSelectors bounds the entries: each is a watch (a goroutine
	// and an open connection to the API server) and 21 metric series.
	maxModelSelectors = 64
	// maxSelectorLen bounds a selector: it is a query parameter and a
	// metric label value. Kubernetes label keys are at most 317 bytes
	// (a 253-byte prefix, '/', a 63-byte name) and values 63: a selector
	// of a few requirements fits.
	maxSelectorLen = 1024
	// maxModelLen bounds a model name (a metric label value too).
	maxModelLen = 256
)

// splitModelSelector splits a ModelSelectors entry "MODEL=SELECTOR" at
// its first '=' and checks both sides: the model printable without
// spaces; the selector printable ASCII without spaces around it (the
// API server checks its grammar).
func splitModelSelector(e string) (model, selector string, err error) {
	model, selector, ok := strings.Cut(e, "=")
	switch {
	case !ok || model == "" || selector == "":
		return "", "", errors.New("want MODEL=SELECTOR, e.g. llama-3-8b=app=vllm,tier=a")
	case len(model) > maxModelLen:
		return "", "", fmt.Errorf("the model is over %d bytes", maxModelLen)
	case strings.IndexFunc(model, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 || !utf8.ValidString(model):
		return "", "", errors.New("the model must be printable, without spaces")
	case len(selector) > maxSelectorLen:
		return "", "", fmt.Errorf("the selector is over %d bytes", maxSelectorLen)
	case strings.TrimSpace(selector) != selector:
		return "", "", errors.New("the selector must not start or end with a space")
	}
	for i := 0; i < len(selector); i++ {
		if c := selector[i]; c < 0x20 || c > 0x7e {
			return "", "", fmt.Errorf("the selector must be printable ASCII, found %q", c)
		}
	}
	return model, selector, nil
}

// checkLabel reports whether s is a DNS-1123 label (lowercase letters,
// digits and '-', 1 to 63, starting and ending with a letter or digit),
// and with letterFirst a DNS-1035 one (starting with a letter).
func checkLabel(s string, letterFirst bool) error {
	if len(s) > 63 {
		return fmt.Errorf("must be at most 63 characters, got %d", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("only lowercase letters, digits and '-' are allowed, found %q", c)
		}
	}
	if s[0] == '-' || s[len(s)-1] == '-' {
		return errors.New("must start and end with a letter or digit")
	}
	if letterFirst && !('a' <= s[0] && s[0] <= 'z') {
		return errors.New("must start with a letter")
	}
	return nil
}

func (c Config) env(key string) string {
	if c.getenv != nil {
		return c.getenv(key)
	}
	return os.Getenv(key)
}

func (c Config) saDir() string {
	if c.inClusterDir != "" {
		return c.inClusterDir
	}
	return serviceAccountDir
}
