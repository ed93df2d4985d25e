package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// serviceLabel is the label the EndpointSlice controller sets to the
// Service's name on each of its slices.
const serviceLabel = "kubernetes.io/service-name"

// maxErrorBody bounds what is read of an error answer's body.
const maxErrorBody = 64 << 10

// Watcher watches one label selector's EndpointSlices (a Service's, or a
// model selector's) and hands the set of ready endpoints to Run's update
// function. Create the watchers a Config asks for with [New].
type Watcher struct {
	cfg       Config
	logger    *slog.Logger
	m         *watchMetrics
	api       *apiServer
	client    *http.Client
	namespace string
	base      string // the endpointslices collection's URL, without query
	selector  string // "labelSelector=...", URL-encoded
	service   string // the watched Service; "" for a model selector's watch
	model     string // the model the targets are pinned to; "" for the Service's watch
	what      string // the watch in errors: "service NS/NAME", "selector SEL (model M) in namespace NS"

	// Owned by Run's goroutine:
	slices    map[string]sliceView // by slice name
	rv        string               // the resourceVersion to watch from
	last      []Target             // the set last handed to update (without Models)
	delivered bool                 // update was called once
	fails     int                  // failures in a row: the backoff's exponent
	logged    string               // the last error logged at warn level,
	loggedAt  time.Time            // and when

	mu sync.Mutex // guards st
	st Status
}

// Status is what [Watcher.Status] returns: GET /admin/backends can show
// it as JSON.
type Status struct {
	// Service is the watched Service; "" (left out) for a model
	// selector's watch, which has Model and Selector instead.
	Service   string `json:"service,omitempty"`
	Model     string `json:"model,omitempty"`
	Selector  string `json:"selector,omitempty"` // the label selector, as configured
	Namespace string `json:"namespace"`
	Server    string `json:"server"` // the API server's URL
	Source    string `json:"source"` // "in-cluster", or the kubeconfig file and context
	// Connected is true while a watch is open on a current endpoint set.
	Connected       bool   `json:"connected"`
	ResourceVersion string `json:"resource_version"`
	Slices          int    `json:"slices"`
	// Endpoints counts the slices' endpoints by state; Ready is the
	// targets handed to update (after merging duplicates).
	Endpoints struct {
		Ready       int `json:"ready"`
		NotReady    int `json:"not_ready"`
		Terminating int `json:"terminating"`
		Unusable    int `json:"unusable"` // no matching port, or a bad address
	} `json:"endpoints"`
	Lists         int       `json:"lists"` // successful lists
	LastListTime  time.Time `json:"last_list_time,omitzero"`
	LastEventTime time.Time `json:"last_event_time,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
}

// failure is an error with its errors_total reason.
type failure struct {
	reason int
	err    error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func failf(reason int, format string, a ...any) error {
	return &failure{reason: reason, err: fmt.Errorf(format, a...)}
}

// errGone: the resourceVersion watched from is too old (410): list again.
var errGone = errors.New("resourceVersion expired (410 Gone)")

// errStalled is the cause a silent watch is cancelled with.
var errStalled = errors.New("watch stalled")

// New validates cfg, loads the API server's address and credentials
// (cfg.Kubeconfig, or the pod's service account; its errors name what is
// missing), and returns one Watcher per watch cfg asks for: the
// Service's first (when cfg.Service is set), then one per
// cfg.ModelSelectors entry, in order. It does not contact the API server:
// each Watcher's Run does. Metrics go to set: the Service's watch has the
// series without labels, a model selector's the same with labels model
// and selector. Any goroutine.
func New(cfg Config, logger *slog.Logger, set *metrics.Set) ([]*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	api, err := loadCredentials(cfg)
	if err != nil {
		return nil, err
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = api.namespace
	}
	if ns == "" {
		ns = "default"
	}
	if err := checkLabel(ns, false); err != nil {
		return nil, fmt.Errorf("discovery/kube: namespace %q (from %s): %v", ns, api.source, err)
	}
	if api.insecure {
		logger.Warn("TLS verification of the Kubernetes API server is off (insecure-skip-tls-verify in the kubeconfig)", "component", "discovery/kube", "server", api.url.Redacted())
	}
	if api.url.Scheme == "http" && (api.token != "" || api.tokenFile != "") {
		logger.Warn("the Kubernetes API token goes over plain http", "component", "discovery/kube", "server", api.url.Redacted())
	}
	var ws []*Watcher
	if cfg.Service != "" {
		w := newWatcher(cfg, api, ns, serviceLabel+"="+cfg.Service, set, "")
		w.service, w.what = cfg.Service, "service "+ns+"/"+cfg.Service
		w.logger = logger.With("component", "discovery/kube", "service", ns+"/"+cfg.Service)
		w.st.Service = cfg.Service
		ws = append(ws, w)
	}
	for _, e := range cfg.ModelSelectors {
		model, sel, _ := splitModelSelector(e) // Validate checked it
		w := newWatcher(cfg, api, ns, sel, set, fmt.Sprintf("model=%q,selector=%q", model, sel))
		w.model, w.what = model, fmt.Sprintf("selector %q (model %s) in namespace %s", sel, model, ns)
		w.logger = logger.With("component", "discovery/kube", "model", model, "selector", sel, "namespace", ns)
		w.st.Model, w.st.Selector = model, sel
		ws = append(ws, w)
	}
	return ws, nil
}

// newWatcher returns a Watcher of the slices labelSelector picks in
// namespace ns, with its own HTTP client; labels are its series' labels
// ("" none).
func newWatcher(cfg Config, api *apiServer, ns, labelSelector string, set *metrics.Set, labels string) *Watcher {
	proxy := http.ProxyFromEnvironment // as kubectl: HTTPS_PROXY, NO_PROXY
	if api.proxy != nil {
		proxy = http.ProxyURL(api.proxy)
	}
	transport := &http.Transport{
		Proxy:                 proxy,
		DialContext:           (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       api.tls,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.HeaderTimeout,
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
		// HTTP/1.1 (a custom TLS config and dialer leave HTTP/2 off): one
		// watch per connection, so a stalled watch is dropped with its
		// connection, not multiplexed with the next one.
	}
	w := &Watcher{
		cfg: cfg,
		m:   newWatchMetrics(set, labels),
		api: api,
		client: &http.Client{
			Transport: transport,
			// The API server does not redirect; following one could send
			// the token elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		namespace: ns,
		base:      api.url.String() + "/apis/discovery.k8s.io/v1/namespaces/" + url.PathEscape(ns) + "/endpointslices",
		selector:  "labelSelector=" + url.QueryEscape(labelSelector),
		slices:    map[string]sliceView{},
	}
	w.st.Namespace, w.st.Server, w.st.Source = ns, api.url.Redacted(), api.source
	return w
}

// Model is the model the watch's targets are pinned to; "" for the
// Service's watch. Any goroutine.
func (w *Watcher) Model() string { return w.model }

// Run lists the watch's EndpointSlices, then watches them, until ctx is
// done; it calls update with the complete set of ready endpoints (each
// pinned to the watch's model, if it has one) once after the first
// successful list (even an empty one) and then whenever the set changes. update runs on Run's goroutine, never concurrently;
// the slice it gets is its own. Failures are logged, counted and retried
// with a backoff; meanwhile the last set stands. Run once, on a
// supervised goroutine (rules.Group); it returns when ctx is done.
func (w *Watcher) Run(ctx context.Context, update func([]Target)) {
	defer w.client.CloseIdleConnections()
	listed := false
	for ctx.Err() == nil {
		if !listed {
			if err := w.list(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				w.failed(err)
				if !w.backoff(ctx) {
					return
				}
				continue
			}
			listed = true
			w.publish(update)
		}
		end := w.watch(ctx, update)
		if ctx.Err() != nil {
			return
		}
		if end.events > 0 {
			w.fails = 0 // the API server answered and we applied what it sent
		}
		switch {
		case end.err == nil: // the server ended the watch at timeoutSeconds
			if end.events > 0 || end.lasted >= w.cfg.WatchTimeout/2 {
				continue // resume at once
			}
			// A watch ended early with nothing in it (a proxy cutting
			// streams?): do not spin on it.
			w.logger.Debug("the watch ended early without an event", "after", end.lasted)
			if !w.backoff(ctx) {
				return
			}
		case errors.Is(end.err, errGone):
			w.m.relistGone.Inc()
			listed = false
			w.logger.Debug("relisting", "reason", end.err)
			// The first relist goes at once; a 410 again before any event
			// waits.
			if w.fails == 0 {
				w.fails++
			} else if !w.backoff(ctx) {
				return
			}
		default:
			w.failed(end.err)
			if end.relist {
				w.m.relistError.Inc()
				listed = false
			}
			if !w.backoff(ctx) {
				return
			}
		}
	}
}

// list replaces the endpoint set with a fresh list of the watch's
// slices. Run only.
func (w *Watcher) list(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ListTimeout)
	defer cancel()
	resp, err := w.do(ctx, w.selector)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return failf(reasonStalled, "no answer to the list of endpointslices within the ListTimeout (%v): %w", w.cfg.ListTimeout, err)
		}
		return err
	}
	defer resp.Body.Close() // a GET's body; nothing to flush
	if resp.StatusCode != http.StatusOK {
		return w.statusError("list", resp)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(w.cfg.MaxResponseBytes)+1))
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded): // the read may have seen an error or a clean EOF
		return failf(reasonStalled, "the list of endpointslices took longer than the ListTimeout (%v)", w.cfg.ListTimeout)
	case err != nil:
		return failf(reasonDisconnected, "cannot read the list of endpointslices: %w", err)
	case len(body) > w.cfg.MaxResponseBytes:
		return failf(reasonTooLarge, "the list of endpointslices is over %d bytes (MaxResponseBytes): refused", w.cfg.MaxResponseBytes)
	}
	var l sliceList
	if err := json.Unmarshal(body, &l); err != nil {
		return failf(reasonDecode, "bad list of endpointslices: %w", err)
	}
	if l.Metadata.ResourceVersion == "" {
		return failf(reasonDecode, "bad list of endpointslices: no metadata.resourceVersion")
	}
	slices.SortFunc(l.Items, func(a, b endpointSlice) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	views := make(map[string]sliceView, min(len(l.Items), w.cfg.MaxSlices))
	over := 0
	for i := range l.Items {
		s := &l.Items[i]
		if s.Metadata.Name == "" {
			return failf(reasonDecode, "bad list of endpointslices: item %d has no metadata.name", i)
		}
		if !w.mine(s) {
			continue
		}
		if len(views) >= w.cfg.MaxSlices {
			over++
			continue
		}
		views[s.Metadata.Name] = summarize(s, w.cfg.PortName, w.namespace)
	}
	if over > 0 {
		w.m.errors[reasonTooManySlices].Add(over)
		w.logger.Warn("the watch has more EndpointSlices than MaxSlices; the others are ignored", "max", w.cfg.MaxSlices, "ignored", over)
	}
	w.slices, w.rv = views, l.Metadata.ResourceVersion
	w.mu.Lock()
	w.st.Lists++
	w.st.LastListTime = time.Now()
	w.st.ResourceVersion = w.rv
	w.mu.Unlock()
	return nil
}

// mine reports whether s belongs to the watch (the label selector says so
// already; a proxy or a fake server may not filter). A model selector's
// is not evaluated here: the API server applies it, and sends DELETED
// for a slice whose labels no longer match.
func (w *Watcher) mine(s *endpointSlice) bool {
	return (w.service == "" || s.Metadata.Labels[serviceLabel] == w.service) &&
		(s.Metadata.Namespace == "" || s.Metadata.Namespace == w.namespace)
}

// watchEnd is how a watch ended.
type watchEnd struct {
	events int           // events applied (ERROR not counted)
	lasted time.Duration // from the request to the end
	err    error         // nil: the server ended the stream between events
	relist bool          // an event was lost: list again
}

// watch watches from w.rv, applying each event, until the stream ends.
// Run only.
func (w *Watcher) watch(ctx context.Context, update func([]Target)) watchEnd {
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	q := w.selector + "&watch=1&allowWatchBookmarks=true&resourceVersion=" + url.QueryEscape(w.rv) +
		"&timeoutSeconds=" + strconv.Itoa(int(w.cfg.WatchTimeout/time.Second))
	resp, err := w.do(ctx, q)
	if err != nil {
		return watchEnd{err: err, lasted: time.Since(start)}
	}
	defer resp.Body.Close() // a GET's body; nothing to flush
	if resp.StatusCode != http.StatusOK {
		return watchEnd{err: w.statusError("watch", resp), lasted: time.Since(start)}
	}
	w.setConnected(true)
	defer w.setConnected(false)
	idle := w.cfg.WatchTimeout + w.cfg.WatchIdleMargin
	stall := time.AfterFunc(idle, func() { cancel(errStalled) })
	defer stall.Stop()
	lines := newLineReader(&activityReader{r: resp.Body, timer: stall, idle: idle}, w.cfg.MaxResponseBytes)
	var end watchEnd
	for {
		line, err := lines.next()
		end.lasted = time.Since(start)
		switch {
		case err != nil && context.Cause(ctx) == errStalled: // whatever the read saw of the cancel (io.EOF too)
			end.err = failf(reasonStalled, "the watch sent nothing for %v (WatchTimeout + WatchIdleMargin): dropped", idle)
			return end
		case err == io.EOF:
			return end
		case errors.Is(err, errLineTooLong):
			end.err, end.relist = failf(reasonTooLarge, "a watch event is over %d bytes (MaxResponseBytes): refused", w.cfg.MaxResponseBytes), true
			return end
		case err != nil:
			end.err = failf(reasonDisconnected, "the watch broke: %w", err)
			return end
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ev, err := decodeEvent(line)
		if err != nil {
			end.err, end.relist = &failure{reason: reasonDecode, err: err}, true
			return end
		}
		w.m.events[ev.typ].Inc()
		switch ev.typ {
		case evError:
			st := ev.status
			if st.gone() {
				end.err = fmt.Errorf("%w: %s", errGone, st.Message)
				return end
			}
			end.err, end.relist = failf(reasonWatchError, "the watch sent an error: %d %s: %s", st.Code, st.Reason, st.Message), true
			return end
		case evBookmark:
			w.rv = ev.rv
		default:
			w.apply(ev)
			w.rv = ev.rv
			w.publish(update)
		}
		end.events++
		w.mu.Lock()
		w.st.LastEventTime = time.Now()
		w.st.ResourceVersion = w.rv
		w.mu.Unlock()
	}
}

// apply applies an ADDED, MODIFIED or DELETED event to the slices. Run
// only.
func (w *Watcher) apply(ev event) {
	s := ev.slice
	name := s.Metadata.Name
	if ev.typ == evDeleted || !w.mine(s) { // a slice that lost the label left the Service
		delete(w.slices, name)
		return
	}
	if _, ok := w.slices[name]; !ok && len(w.slices) >= w.cfg.MaxSlices {
		w.m.errors[reasonTooManySlices].Inc()
		w.logger.Warn("the watch has more EndpointSlices than MaxSlices; a new one is ignored", "max", w.cfg.MaxSlices, "slice", name)
		return
	}
	w.slices[name] = summarize(s, w.cfg.PortName, w.namespace)
}

// publish hands the ready set to update if it changed (or was never
// handed), and updates the gauges and the status. Run only.
func (w *Watcher) publish(update func([]Target)) {
	targets := mergeTargets(w.slices)
	var counts [numStates]int
	for _, v := range w.slices {
		for i := range counts {
			counts[i] += v.counts[i]
		}
	}
	counts[stReady] = len(targets)
	for i, c := range counts {
		w.m.endpoints[i].Set(float64(c))
	}
	w.mu.Lock()
	w.st.Slices = len(w.slices)
	w.st.Endpoints.Ready, w.st.Endpoints.NotReady = counts[stReady], counts[stNotReady]
	w.st.Endpoints.Terminating, w.st.Endpoints.Unusable = counts[stTerminating], counts[stUnusable]
	w.mu.Unlock()
	if w.delivered && slices.EqualFunc(targets, w.last, func(a, b Target) bool { return a.Name == b.Name && a.URL == b.URL }) {
		return
	}
	w.delivered, w.last = true, targets
	w.m.updates.Inc()
	w.logger.Info("kubernetes endpoints", "ready", len(targets), "not_ready", counts[stNotReady],
		"terminating", counts[stTerminating], "unusable", counts[stUnusable])
	out := slices.Clone(targets)
	if w.model != "" {
		for i := range out {
			out[i].Models = []string{w.model} // each its own: the receiver owns the list
		}
	}
	update(out)
}

// do sends a GET of the collection with query. Run only.
func (w *Watcher) do(ctx context.Context, query string) (*http.Response, error) {
	token, err := w.api.bearer()
	if err != nil {
		return nil, &failure{reason: reasonRequest, err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+"?"+query, nil)
	if err != nil {
		return nil, &failure{reason: reasonRequest, err: err}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "saltus (discovery/kube)")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, failf(reasonRequest, "cannot reach the Kubernetes API server (%s): %w", w.api.source, err)
	}
	return resp, nil
}

// statusError describes a list's or watch's error answer, from its
// metav1.Status body when it has one; a 410 wraps errGone.
func (w *Watcher) statusError(op string, resp *http.Response) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := ""
	var st apiStatus
	switch {
	case err != nil:
		msg = "(the body could not be read: " + err.Error() + ")"
	case json.Unmarshal(body, &st) == nil && st.Message != "":
		msg = st.Message
	default:
		msg = strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	if resp.StatusCode == http.StatusGone {
		return fmt.Errorf("%w: %s", errGone, msg)
	}
	hint := ""
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		hint = " (the API server refused the credentials of " + w.api.source + ")"
	case http.StatusForbidden:
		hint = fmt.Sprintf(" (saltus needs get, list and watch on endpointslices.discovery.k8s.io in namespace %s: docs/CONFIGURATION.md, Backends from Kubernetes)", w.namespace)
	}
	return failf(reasonStatus, "%s endpointslices of %s: HTTP %s: %s%s", op, w.what, resp.Status, msg, hint)
}

// failed counts and logs err: at warn level when it differs from the
// last one logged or a minute passed, else at debug (a long outage
// retries every BackoffMax). Run only.
func (w *Watcher) failed(err error) {
	reason := reasonRequest
	var f *failure
	if errors.As(err, &f) {
		reason = f.reason
	}
	w.m.errors[reason].Inc()
	now := time.Now()
	msg := err.Error()
	w.mu.Lock()
	w.st.LastError, w.st.LastErrorTime = msg, now
	w.mu.Unlock()
	if msg != w.logged || now.Sub(w.loggedAt) >= time.Minute {
		w.logger.Warn("kubernetes discovery failed; retrying (the last endpoint set stands)", "err", msg, "reason", reasonNames[reason], "in_a_row", w.fails+1)
		w.logged, w.loggedAt = msg, now
		return
	}
	w.logger.Debug("kubernetes discovery failed again", "err", msg, "in_a_row", w.fails+1)
}

// backoff waits before the next attempt: BackoffMin doubled per failure
// in a row, at most BackoffMax, less up to half at random. It reports
// false if ctx ended first. Run only.
func (w *Watcher) backoff(ctx context.Context) bool {
	w.fails++
	d := w.cfg.BackoffMin
	for i := 1; i < w.fails && d < w.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, w.cfg.BackoffMax)
	d -= rand.N(d/2 + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *Watcher) setConnected(c bool) {
	v := 0.0
	if c {
		v = 1
	}
	w.m.connected.Set(v)
	w.mu.Lock()
	w.st.Connected = c
	w.mu.Unlock()
}

// Status returns the watcher's [Status] (as any, for an admin endpoint
// that shows it as JSON). Any goroutine.
func (w *Watcher) Status() any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st
}

// activityReader re-arms the stall timer whenever bytes arrive.
type activityReader struct {
	r     io.Reader
	timer *time.Timer
	idle  time.Duration
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.timer.Reset(a.idle)
	}
	return n, err
}
