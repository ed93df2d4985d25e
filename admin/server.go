package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/rules"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_admin_requests_total": "Requests to the admin listener, by endpoint and HTTP status code.",
	})
}

// maxAddBody bounds the body of POST /admin/backends: {"url": "..."}.
const maxAddBody = 64 << 10

// defaultExplainPath is the API path /admin/explain assumes without ?path=.
const defaultExplainPath = "/v1/chat/completions"

// Server is the admin listener. Create it with [New].
type Server struct {
	cfg      Config
	backends Backends
	routes   Routes
	set      *metrics.Set // nil: only process metrics
	logger   *slog.Logger
	srv      *http.Server

	// tokenSum is the sha256 of the bearer token in force (cfg's, then
	// SetBearerToken's), compared in constant time; nil: no auth.
	tokenSum atomic.Pointer[[32]byte]
	draining atomic.Bool

	mu      sync.Mutex // guards the fields below
	ln      net.Listener
	g       *rules.Group
	started bool
	closed  bool
}

// New returns a Server for cfg that is not listening yet. b and r must not
// be nil; set may be nil (then /metrics has only process metrics). It
// registers the counters saltus_admin_requests_total{endpoint,code} in set.
func New(cfg Config, b Backends, r Routes, set *metrics.Set, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if b == nil || r == nil {
		return nil, errors.New("admin: Backends and Routes must not be nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Prometheus and Grafana read a family's type from its # TYPE line
	// (counter rates, histogram_quantile); the library writes them only
	// when asked, process-wide. /metrics is the only exposition saltus has.
	metrics.ExposeMetadata(true)
	s := &Server{cfg: cfg, backends: b, routes: r, set: set, logger: logger}
	s.setToken(cfg.BearerToken)
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

func (s *Server) setToken(token string) {
	if token == "" {
		s.tokenSum.Store(nil)
		return
	}
	s.tokenSum.Store(new(sha256.Sum256([]byte(token))))
}

// SetBearerToken replaces the bearer token the admin endpoints require
// ("" = no auth) for the requests that follow (a configuration reload).
// The token is checked as Config.BearerToken is. Any goroutine.
func (s *Server) SetBearerToken(token string) error {
	c := s.cfg
	c.BearerToken = token
	if err := c.Validate(); err != nil {
		return err
	}
	s.setToken(token)
	return nil
}

// Start listens on cfg.Listen and serves in one goroutine; the listener is
// bound when it returns. Any goroutine; once.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return errors.New("admin: Start called twice or after Shutdown")
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("admin: cannot listen on %s: %w", s.cfg.Listen, err)
	}
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	s.ln, s.started = ln, true
	s.g = rules.NewGroup(context.Background())
	s.g.Go("admin-http", func(context.Context) {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("admin listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	})
	s.logger.Info("admin listening", "addr", ln.Addr().String(), "auth", s.tokenSum.Load() != nil, "tls", s.cfg.TLS != nil,
		"client_certs", s.cfg.TLS != nil && s.cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert)
	return nil
}

// Addr returns the address listened on (the port chosen for ":0"), or
// cfg.Listen before Start. Any goroutine.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return s.cfg.Listen
	}
	return s.ln.Addr().String()
}

// SetDraining makes /ready answer 503 from now on: the first step of a
// graceful shutdown, so that load balancers in front stop sending new
// connections. It cannot be undone. Any goroutine.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Shutdown stops listening, waits for requests in progress to end or ctx
// to be done (then closes their connections), and joins the serving
// goroutine. It returns ctx's error if it had to cut connections. Calling
// it before Start or twice does nothing. Any goroutine.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.started || s.closed {
		s.closed = true
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	g := s.g
	s.mu.Unlock()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		// ctx ran out with requests still running: cut them.
		_ = s.srv.Close() // the error is the listener's close error, already closed by Shutdown
	}
	g.Stop()
	// Serve has returned or returns at once after Shutdown/Close; the
	// wait cannot hang, so it needs no deadline.
	_ = g.Wait(context.Background())
	return err
}

// endpoint names a route; its name is the "endpoint" label of the
// request counter, so the label's values are bounded.
type endpoint int

const (
	epUnknown endpoint = iota
	epMetrics
	epHealth
	epReady
	epBackends
	epBackend
	epDrain
	epRoutes
	epExplain
	epPprof
	epCluster
	epReload
	epDiscovery
	epDashboard     // the page and its assets: no token
	epDashboardData // GET /admin/dashboard.json
	epPools
)

var endpoints = [...]struct {
	name  string
	allow string // the Allow header: methods accepted
}{
	epUnknown:       {"unknown", ""},
	epMetrics:       {"metrics", "GET, HEAD"},
	epHealth:        {"health", "GET, HEAD"},
	epReady:         {"ready", "GET, HEAD"},
	epBackends:      {"backends", "GET, HEAD, POST"},
	epBackend:       {"backend", "DELETE"},
	epDrain:         {"drain", "POST"},
	epRoutes:        {"routes", "GET, HEAD"},
	epExplain:       {"explain", "POST"},
	epPprof:         {"pprof", "GET, HEAD, POST"},
	epCluster:       {"cluster", "GET, HEAD"},
	epReload:        {"reload", "POST"},
	epDiscovery:     {"discovery", "GET, HEAD"},
	epDashboard:     {"dashboard", "GET, HEAD"},
	epDashboardData: {"dashboard_data", "GET, HEAD"},
	epPools:         {"pools", "GET, HEAD"},
}

// route maps a request path to its endpoint and, for per-backend routes,
// the id segment (unparsed).
func route(path string) (endpoint, string) {
	switch path {
	case "/metrics":
		return epMetrics, ""
	case "/health":
		return epHealth, ""
	case "/ready":
		return epReady, ""
	case "/admin/backends":
		return epBackends, ""
	case "/admin/routes":
		return epRoutes, ""
	case "/admin/explain":
		return epExplain, ""
	case "/admin/cluster":
		return epCluster, ""
	case "/admin/reload":
		return epReload, ""
	case "/admin/discovery":
		return epDiscovery, ""
	case "/admin/dashboard.json":
		return epDashboardData, ""
	case "/admin/pools":
		return epPools, ""
	}
	if rest, ok := strings.CutPrefix(path, "/dashboard"); ok {
		if _, _, asset := dashboardAsset(rest); asset || rest == "/" {
			return epDashboard, rest
		}
		return epUnknown, ""
	}
	if strings.HasPrefix(path, "/debug/pprof/") {
		return epPprof, path[len("/debug/pprof/"):]
	}
	rest, ok := strings.CutPrefix(path, "/admin/backends/")
	if !ok || rest == "" {
		return epUnknown, ""
	}
	if id, ok := strings.CutSuffix(rest, "/drain"); ok && id != "" && !strings.Contains(id, "/") {
		return epDrain, id
	}
	if strings.Contains(rest, "/") {
		return epUnknown, ""
	}
	return epBackend, rest
}

func allowed(allow, method string) bool {
	for m := range strings.SplitSeq(allow, ", ") {
		if m == method {
			return true
		}
	}
	return false
}

// statusWriter remembers the status written, for the request counter.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// ServeHTTP answers one admin request. Any goroutine.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	ep, id := route(r.URL.Path)
	w := &statusWriter{ResponseWriter: rw}
	s.serve(w, r, ep, id)
	if s.set != nil {
		if w.status == 0 {
			w.status = http.StatusOK
		}
		s.set.GetOrCreateCounter(fmt.Sprintf(`saltus_admin_requests_total{endpoint=%q,code="%d"}`, endpoints[ep].name, w.status)).Inc()
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, ep endpoint, id string) {
	// Every endpoint but /health and the dashboard's page needs the
	// token, unknown paths included, so that the API's shape is not
	// probed without it. The page and its assets carry no data: its data
	// comes from /admin/dashboard.json, with the token.
	if sum := s.tokenSum.Load(); ep != epHealth && ep != epDashboard && sum != nil && !s.authorized(w, r, sum) {
		return
	}
	pools, hasPools := s.backends.(Pools)
	if ep == epPprof && !s.cfg.Pprof || ep == epReload && s.cfg.Reload == nil || ep == epPools && !hasPools {
		ep = epUnknown // off: as if it did not exist
	}
	if ep == epUnknown {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no admin endpoint %s", r.URL.Path))
		return
	}
	if !allowed(endpoints[ep].allow, r.Method) {
		w.Header().Set("Allow", endpoints[ep].allow)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
			fmt.Sprintf("%s %s is not allowed; allowed: %s", r.Method, r.URL.Path, endpoints[ep].allow))
		return
	}
	switch ep {
	case epMetrics:
		s.serveMetrics(w)
	case epHealth:
		writeText(w, http.StatusOK, "ok\n")
	case epReady:
		s.serveReady(w)
	case epBackends:
		if r.Method == http.MethodPost {
			s.serveAdd(w, r)
		} else {
			s.serveList(w)
		}
	case epBackend:
		s.serveRemove(w, id)
	case epDrain:
		s.serveDrain(w, id)
	case epRoutes:
		writeJSON(w, http.StatusOK, s.routes.RouteStats())
	case epCluster:
		writeJSON(w, http.StatusOK, s.clusterStatus())
	case epDiscovery:
		var st any = map[string]bool{"enabled": false}
		if d, ok := s.routes.(Discovery); ok {
			if v := d.DiscoveryStatus(); v != nil {
				st = v
			}
		}
		writeJSON(w, http.StatusOK, st)
	case epDashboard:
		serveDashboard(w, id)
	case epDashboardData:
		s.serveDashboardData(w)
	case epPools:
		writeJSON(w, http.StatusOK, pools.Pools().nonNil())
	case epExplain:
		s.serveExplain(w, r)
	case epPprof:
		servePprof(w, r, id)
	case epReload:
		res, err := s.cfg.Reload()
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_config", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	default:
		panic(fmt.Sprintf("BUG: admin: endpoint %d has no handler", ep))
	}
}

// clusterStatus is GET /admin/cluster's answer.
func (s *Server) clusterStatus() any {
	if c, ok := s.routes.(Cluster); ok {
		if v := c.ClusterStatus(); v != nil {
			return v
		}
	}
	return map[string]bool{"enabled": false}
}

// authorized checks the bearer token; it answers 401 itself when it
// returns false.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, want *[32]byte) bool {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		// Hashing first makes the comparison constant-time in the
		// token's length too (ConstantTimeCompare returns early on a
		// length mismatch).
		sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			return true
		}
	}
	challenge := `Bearer realm="saltus-admin"`
	msg := "this endpoint needs an Authorization: Bearer <admin token> header"
	if h != "" {
		challenge += `, error="invalid_token"`
		msg = "invalid admin token"
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeError(w, http.StatusUnauthorized, "unauthorized", msg)
	return false
}

// servePprof answers /debug/pprof/{name}: the index, the CPU profile, the
// execution trace, symbol lookup, or a named runtime profile (heap,
// goroutine, allocs, block, mutex, threadcreate).
func servePprof(w http.ResponseWriter, r *http.Request, name string) {
	switch name {
	case "":
		pprof.Index(w, r)
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Handler(name).ServeHTTP(w, r) // an unknown name: 404 "Unknown profile"
	}
}

func (s *Server) serveMetrics(w http.ResponseWriter) {
	var buf bytes.Buffer
	if s.set != nil {
		s.set.WritePrometheus(&buf)
	}
	metrics.WriteProcessMetrics(&buf)
	// Every # HELP line gets its family's text (promtext says why here).
	out := promtext.Annotate(make([]byte, 0, buf.Len()+buf.Len()/2), buf.Bytes())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out) // a write error means the scraper left; nothing to do
}

func (s *Server) serveReady(w http.ResponseWriter) {
	switch {
	case s.draining.Load():
		writeText(w, http.StatusServiceUnavailable, "draining\n")
	case s.cfg.Ready != nil:
		if err := s.cfg.Ready(); err != nil {
			writeText(w, http.StatusServiceUnavailable, err.Error()+"\n")
		} else {
			writeText(w, http.StatusOK, "ok\n")
		}
	case !Routable(s.backends.List()):
		writeText(w, http.StatusServiceUnavailable, "no routable backend\n")
	default:
		writeText(w, http.StatusOK, "ok\n")
	}
}

// Routable reports whether list has a healthy backend that is not
// draining: the readiness /ready uses when Config.Ready is nil.
func Routable(list []BackendInfo) bool {
	for _, b := range list {
		if b.Healthy && !b.Draining {
			return true
		}
	}
	return false
}

func (s *Server) serveList(w http.ResponseWriter) {
	list := s.backends.List()
	if list == nil {
		list = []BackendInfo{} // "[]", not "null"
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) serveAdd(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, min(maxAddBody, s.cfg.MaxBodyBytes))
	if !ok {
		return
	}
	var req struct {
		URL *string `json:"url"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request",
			fmt.Sprintf(`body must be a JSON object {"url": "http://host:port"}: %v`, err))
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, "invalid_request", "body must hold one JSON object and nothing after it")
		return
	}
	if req.URL == nil {
		writeError(w, http.StatusBadRequest, "invalid_request", `body has no "url"`)
		return
	}
	if err := CheckBackendURL(*req.URL); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "url: "+err.Error())
		return
	}
	info, err := s.backends.Add(*req.URL)
	if err != nil {
		writeMappedError(w, err, fmt.Sprintf("cannot add backend %s", *req.URL))
		return
	}
	s.logger.Info("backend added", "id", info.ID, "backend", info.URL)
	w.Header().Set("Location", "/admin/backends/"+strconv.Itoa(info.ID))
	writeJSON(w, http.StatusCreated, info)
}

// parseID parses a backend id from the path; it answers 400 itself when
// it returns false.
func parseID(w http.ResponseWriter, s string) (int, bool) {
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("backend id must be a non-negative integer, got %q", s))
		return 0, false
	}
	return id, true
}

func (s *Server) serveRemove(w http.ResponseWriter, idText string) {
	id, ok := parseID(w, idText)
	if !ok {
		return
	}
	if err := s.backends.Remove(id); err != nil {
		writeMappedError(w, err, fmt.Sprintf("cannot remove backend %d", id))
		return
	}
	s.logger.Info("backend removed", "id", id)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) serveDrain(w http.ResponseWriter, idText string) {
	id, ok := parseID(w, idText)
	if !ok {
		return
	}
	if err := s.backends.Drain(id); err != nil {
		writeMappedError(w, err, fmt.Sprintf("cannot drain backend %d", id))
		return
	}
	s.logger.Info("backend draining", "id", id)
	// 202: draining has begun; requests in flight to it go on.
	var out any = map[string]any{"id": id, "draining": true} // if removed meanwhile
	for _, b := range s.backends.List() {
		if b.ID == id {
			out = b
			break
		}
	}
	writeJSON(w, http.StatusAccepted, out)
}

func (s *Server) serveExplain(w http.ResponseWriter, r *http.Request) {
	path := defaultExplainPath
	if q := r.URL.Query(); q.Has("path") {
		path = q.Get("path")
		if !strings.HasPrefix(path, "/v1/") {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("path must be an API path like /v1/completions, got %q", path))
			return
		}
	}
	body, ok := readBody(w, r, s.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' || !json.Valid(body) {
		writeError(w, http.StatusBadRequest, "invalid_request", "body must be a JSON object: the OpenAI request body to explain")
		return
	}
	d, err := s.routes.Explain(body, path)
	if err != nil {
		writeMappedError(w, err, "cannot explain")
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// readBody reads a body of at most limit bytes; it answers 413 or 400
// itself when it returns false.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("body is larger than %d bytes", limit))
		} else {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("cannot read body: %v", err))
		}
		return nil, false
	}
	return body, true
}

// writeMappedError answers err from Backends or Routes: ErrNotFound is
// 404, ErrUnavailable 503, anything else the client's fault, 400.
func writeMappedError(w http.ResponseWriter, err error, what string) {
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s: %v", what, err))
	case errors.Is(err, ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("%s: %v", what, err))
	default:
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("%s: %v", what, err))
	}
}

type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	var e errorBody
	e.Error.Message, e.Error.Type, e.Error.Code = msg, typ, status
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		var e errorBody
		e.Error.Message, e.Error.Type, e.Error.Code = "cannot encode the answer: "+err.Error(), "internal_error", status
		b, _ = json.Marshal(e) // strings and an int always marshal
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b) // a write error means the client left; nothing to do
}

func writeText(w http.ResponseWriter, status int, s string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, s) // a write error means the prober left; nothing to do
}
