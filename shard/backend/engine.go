package backend

import (
	"sync/atomic"
	"time"
)

// EngineLoad is what a backend's engine last reported about its own load
// on its Prometheus /metrics (vLLM's names: vllm:num_requests_waiting,
// vllm:num_requests_running, vllm:kv_cache_usage_perc), when the engine
// metrics are scraped.
type EngineLoad struct {
	Waiting int64   // requests queued in the engine, not yet scheduled
	Running int64   // requests the engine is running (prefill or decode)
	KVUsage float64 // fraction of the KV cache in use, 0 to 1
	// KVTokens is the KV cache's capacity in tokens (vllm:cache_config_info:
	// num_gpu_blocks × block_size, summed over its series); 0: not served.
	KVTokens int64
	// At is when the values were read; Until is when they go stale
	// (Engine reports nothing after it).
	At, Until time.Time
}

// engineState holds the last EngineLoad of a backend. Any goroutine.
type engineState struct {
	load atomic.Pointer[EngineLoad]
}

// Engine returns the backend's last engine load and true while it is
// fresh (scraped, and not past its Until); the zero value and false when
// the engine is not scraped, the last scrape failed for too long, or the
// values are stale: a decision then uses saltus's own in-flight counts
// only. Any goroutine.
func (b *Backend) Engine() (EngineLoad, bool) {
	l := b.engine.load.Load()
	if l == nil || !time.Now().Before(l.Until) {
		return EngineLoad{}, false
	}
	return *l, true
}

// SetEngine records an engine load read from the backend (the scraper,
// or a test). Any goroutine.
func (b *Backend) SetEngine(l EngineLoad) { b.engine.load.Store(&l) }
