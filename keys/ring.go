package keys

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_keys_loaded":             "API keys in force (--api-keys-file and SALTUS_API_KEYS); 0 without keys.",
		"saltus_keys_reloads_total":      "Loads of a changed API key file (its periodic check, SIGHUP, POST /admin/reload), by result: ok (the new keys are in force), error (invalid: the keys in force stay).",
		"saltus_keys_unauthorized_total": "Requests refused 401 because keys are on, by reason: missing (no Authorization: Bearer nor x-api-key), unknown (a secret no key has).",
		"saltus_key_requests_total":      "Answers to requests admitted under an API key, by key (its name) and outcome: ok (2xx), error (any other status, the engine's or saltus's).",
		"saltus_key_tokens_total":        "Tokens used under an API key, by key and kind: prompt, completion (the engine's usage; without one, the prompt as saltus's tokenizer or its estimate counted it).",
		"saltus_key_refused_total":       "Requests of a known API key refused before anything was forwarded, by key and reason: rate_requests, rate_tokens (429), model_not_allowed (404).",
	})
}

// Config is the key layer's configuration. Keys are on when File or Env
// is set.
type Config struct {
	// File is the key list's path ("" none): a YAML or JSON list, read at
	// start, then again when its size or modification time changes (or
	// on Reload) and its content did.
	File string
	// Env is a key list given whole (the SALTUS_API_KEYS environment
	// variable's value; nil none), in the file's format. Its keys are
	// fixed for the process's life; a reload re-reads the file only.
	Env []byte
	// EnvName names Env in errors and logs. Default "SALTUS_API_KEYS".
	EnvName string
	// Interval is how often Watch looks at the file's size and
	// modification time. Default 2 s: a stat, no read, unless it changed.
	Interval time.Duration
}

// DefaultConfig returns the defaults: no keys.
func DefaultConfig() Config {
	return Config{
		EnvName:  "SALTUS_API_KEYS",
		Interval: 2 * time.Second, // a removed key is refused within 2 s of the file's change
	}
}

// Enabled reports whether keys are on.
func (c Config) Enabled() bool { return c.File != "" || len(c.Env) > 0 }

// Validate reports a bad field.
func (c Config) Validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("keys: Interval must be positive, got %v", c.Interval)
	}
	return nil
}

// Set is one immutable snapshot of the keys.
type Set struct {
	byHash map[[32]byte]*Key
	sorted []*Key // by name: the metrics' order
}

// Len is the number of keys.
func (s *Set) Len() int { return len(s.sorted) }

// Ring holds the keys in force and loads new ones. See the package doc.
type Ring struct {
	cfg    Config
	set    atomic.Pointer[Set] // never nil after New
	epoch  time.Time
	clock  func() int64 // nil: time.Since(epoch); tests set it
	logger *slog.Logger

	missing, unknown    *metrics.Counter
	reloadOK, reloadErr *metrics.Counter

	// mu serializes loads and guards the fields below.
	mu       sync.Mutex
	accounts map[string]*Account // by key name, kept across loads
	env      []Spec              // Config.Env's, parsed once
	stamp    fileStamp           // the file as last read
	lastErr  string              // the last load error logged: repeats are counted, not logged
}

// fileStamp is what Watch compares: the file's size and modification
// time (a stat), and the hash of its content once read.
type fileStamp struct {
	size  int64
	mtime time.Time
	sum   [32]byte
	read  bool
}

// New builds the Ring and loads cfg's keys: an invalid list or an
// unreadable file is an error (serve does not start). With keys off it
// holds no key and only registers its metrics (in set, which must not be
// nil), so that /metrics describes the same families either way.
func New(cfg Config, logger *slog.Logger, set *metrics.Set) (*Ring, error) {
	if cfg.EnvName == "" {
		cfg.EnvName = DefaultConfig().EnvName
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Ring{cfg: cfg, epoch: time.Now(), logger: logger.With("component", "keys"), accounts: map[string]*Account{}}
	r.set.Store(&Set{byHash: map[[32]byte]*Key{}})
	r.missing = set.NewCounter(`saltus_keys_unauthorized_total{reason="missing"}`)
	r.unknown = set.NewCounter(`saltus_keys_unauthorized_total{reason="unknown"}`)
	r.reloadOK = set.NewCounter(`saltus_keys_reloads_total{result="ok"}`)
	r.reloadErr = set.NewCounter(`saltus_keys_reloads_total{result="error"}`)
	set.NewGauge("saltus_keys_loaded", func() float64 { return float64(r.set.Load().Len()) })
	set.RegisterMetricsWriter(r.writeMetrics)
	if cfg.Enabled() {
		if len(cfg.Env) > 0 {
			specs, err := Parse(cfg.EnvName, cfg.Env)
			if err != nil {
				return nil, err
			}
			r.env = specs
		}
		r.mu.Lock()
		_, err := r.checkLocked(true)
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if r.set.Load().Len() == 0 {
			r.logger.Warn("API keys are on but none is configured: every request is refused 401", "file", cfg.File)
		}
	}
	return r, nil
}

// Enabled reports whether keys are on. Any goroutine.
func (r *Ring) Enabled() bool { return r.cfg.Enabled() }

// Now is the limiters' clock: monotonic nanoseconds. Any goroutine.
func (r *Ring) Now() int64 {
	if r.clock != nil {
		return r.clock()
	}
	return int64(time.Since(r.epoch))
}

// Len is the number of keys in force. Any goroutine.
func (r *Ring) Len() int { return r.set.Load().Len() }

// maxSecretLen bounds a presented secret: a longer one is unknown
// without being hashed (`saltus keys hash` refuses them too).
const maxSecretLen = 1024

// Secret returns the secret a request presents: the token of its
// Authorization header with the Bearer scheme (any case), else its
// x-api-key header (Anthropic's clients); "" for none.
func Secret(authorization, apiKey string) string {
	if scheme, tok, ok := strings.Cut(authorization, " "); ok && strings.EqualFold(scheme, "Bearer") {
		if tok = strings.TrimSpace(tok); tok != "" {
			return tok
		}
	}
	return strings.TrimSpace(apiKey)
}

// Lookup returns the key whose secret is secret, nil for none (""
// counted as missing, another as unknown). Any goroutine: no lock, one
// SHA-256 and a map lookup.
func (r *Ring) Lookup(secret string) *Key {
	if secret == "" {
		r.missing.Inc()
		return nil
	}
	if len(secret) <= maxSecretLen {
		if k := r.set.Load().byHash[HashSecret(secret)]; k != nil {
			return k
		}
	}
	r.unknown.Inc()
	return nil
}

// Watch checks the key file every Config.Interval until ctx ends, and
// loads it when it changed. Without a file it returns at once. On its own
// goroutine (a rules.Group's).
func (r *Ring) Watch(ctx context.Context) {
	if r.cfg.File == "" {
		return
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.mu.Lock()
			_, _ = r.checkLocked(false) // logged and counted by checkLocked
			r.mu.Unlock()
		}
	}
}

// Reload reads the key file now (SIGHUP, POST /admin/reload), whatever
// its size and time say, and loads it if its content changed. It reports
// whether it did, and the file's error (logged and counted; the keys in
// force stay). Any goroutine but a loop (it reads a file).
func (r *Ring) Reload() (changed bool, err error) {
	if r.cfg.File == "" {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkLocked(true)
}

// checkLocked loads the file if it changed (force: read it whatever its
// stat says). At start (no set loaded from it yet) an error is returned
// as is; later it is logged once per distinct error and counted.
func (r *Ring) checkLocked(force bool) (bool, error) {
	starting := !r.stamp.read
	fail := func(err error) (bool, error) {
		if starting {
			return false, err
		}
		r.reloadErr.Inc()
		if msg := err.Error(); msg != r.lastErr {
			r.lastErr = msg
			r.logger.Error("API key file not loaded; the keys in force stay", "file", r.cfg.File, "err", err)
		}
		return false, err
	}
	var (
		data []byte
		st   fileStamp
	)
	if r.cfg.File != "" {
		fi, err := os.Stat(r.cfg.File)
		if err != nil {
			return fail(fmt.Errorf("api-keys-file: %w", err))
		}
		st = fileStamp{size: fi.Size(), mtime: fi.ModTime(), read: true}
		if !force && st.size == r.stamp.size && st.mtime.Equal(r.stamp.mtime) {
			return false, nil
		}
		if data, err = readBounded(r.cfg.File); err != nil {
			return fail(fmt.Errorf("api-keys-file: %w", err))
		}
		st.sum = sha256.Sum256(data)
		if !starting && st.sum == r.stamp.sum {
			r.stamp = st // touched, not changed
			return false, nil
		}
	}
	specs, err := Parse(r.cfg.File, data)
	if err != nil {
		r.stamp = st // the same bad content is not parsed (nor logged) again
		return fail(err)
	}
	set, added, removed, err := r.buildLocked(specs)
	if err != nil {
		r.stamp = st
		return fail(err)
	}
	r.stamp, r.lastErr = st, ""
	r.set.Store(set)
	if !starting {
		r.reloadOK.Inc()
		r.logger.Info("API keys reloaded", "file", r.cfg.File, "keys", set.Len(), "added", added, "removed", removed)
	} else {
		r.logger.Info("API keys loaded", "file", r.cfg.File, "keys", set.Len())
	}
	return true, nil
}

// readBounded reads a key file of at most MaxFileBytes.
func readBounded(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close() //saltus:allow R5 read only: a close error loses nothing
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: over the bound of %d bytes", name, MaxFileBytes)
	}
	return data, nil
}

// buildLocked makes the Set of the environment's keys and file's: names
// and hashes unique across both, at most MaxKeys. A key whose name was
// loaded before keeps its Account; the others' are dropped.
func (r *Ring) buildLocked(file []Spec) (*Set, int, int, error) {
	if n := len(r.env) + len(file); n > MaxKeys {
		return nil, 0, 0, fmt.Errorf("%d keys in %s and %s together, over the bound of %d", n, r.cfg.EnvName, r.cfg.File, MaxKeys)
	}
	envName := map[string]bool{}
	envHash := map[[32]byte]bool{}
	for _, s := range r.env {
		envName[s.Name], envHash[s.Hash] = true, true
	}
	var errs []error
	for i, s := range file {
		switch {
		case envName[s.Name]:
			errs = append(errs, fmt.Errorf("%s: line %d: keys[%d].name: %q is a key of %s already", r.cfg.File, s.Line, i, s.Name, r.cfg.EnvName))
		case envHash[s.Hash]:
			errs = append(errs, fmt.Errorf("%s: line %d: keys[%d].hash: the secret of a key of %s already", r.cfg.File, s.Line, i, r.cfg.EnvName))
		}
		if len(errs) >= maxErrors {
			break
		}
	}
	if len(errs) > 0 {
		return nil, 0, 0, errors.Join(errs...)
	}
	set := &Set{byHash: make(map[[32]byte]*Key, len(r.env)+len(file)), sorted: make([]*Key, 0, len(r.env)+len(file))}
	accounts := make(map[string]*Account, len(r.env)+len(file))
	added := 0
	for _, s := range slices.Concat(r.env, file) {
		a := r.accounts[s.Name]
		if a == nil {
			a = new(Account)
			added++
		}
		accounts[s.Name] = a
		k := newKey(s, a)
		set.byHash[s.Hash] = k
		set.sorted = append(set.sorted, k)
	}
	slices.SortFunc(set.sorted, func(a, b *Key) int { return strings.Compare(a.Name, b.Name) })
	removed := 0
	for name := range r.accounts {
		if accounts[name] == nil {
			removed++
		}
	}
	r.accounts = accounts
	return set, added, removed, nil
}

// writeMetrics writes the per-key families: each key's series once it
// has had a request (the families' metadata always, so that /metrics
// describes them with keys off too).
func (r *Ring) writeMetrics(w io.Writer) {
	keys := r.set.Load().sorted
	active := func(a *Account) bool {
		for i := range a.requests {
			if a.requests[i].Load() > 0 {
				return true
			}
		}
		for i := range a.refused {
			if a.refused[i].Load() > 0 {
				return true
			}
		}
		return false
	}
	metrics.WriteMetadataIfNeeded(w, "saltus_key_requests_total", "counter")
	for _, k := range keys {
		if active(k.acct) {
			for o := range numOutcomes {
				fmt.Fprintf(w, "saltus_key_requests_total{key=%q,outcome=%q} %d\n", k.Name, outcomeNames[o], k.acct.requests[o].Load())
			}
		}
	}
	metrics.WriteMetadataIfNeeded(w, "saltus_key_tokens_total", "counter")
	for _, k := range keys {
		if active(k.acct) {
			for i := range numKinds {
				fmt.Fprintf(w, "saltus_key_tokens_total{key=%q,kind=%q} %d\n", k.Name, kindNames[i], k.acct.tokens[i].Load())
			}
		}
	}
	metrics.WriteMetadataIfNeeded(w, "saltus_key_refused_total", "counter")
	for _, k := range keys {
		if active(k.acct) {
			for i := range numReasons {
				fmt.Fprintf(w, "saltus_key_refused_total{key=%q,reason=%q} %d\n", k.Name, reasonNames[i], k.acct.refused[i].Load())
			}
		}
	}
}
