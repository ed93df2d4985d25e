// Package fleet knows which models each backend serves and groups the
// backends into pools, one per model name (a base model, an alias, or a
// LoRA adapter). It sits beside the upstream transport (upstream/backend):
// the router (shard) resolves each request's model to its pool before
// it decides, so every policy chooses only among engines that serve the
// model. Its state is owned by one goroutine (Run); the pools are an
// immutable Index behind an atomic pointer that any goroutine reads.
//
// A backend's models come from its GET /v1/models (vLLM lists its served
// names with "parent": null and each loaded LoRA adapter with "parent" =
// its base model), fetched at start, every Config.Interval, when the
// backend is added or comes back up, and when a caller asks (Refresh,
// after the router forwarded an adapter load; Kick, after an engine
// answered that it does not serve a model). Pins in configuration
// (Backend.PinnedModels) replace what a backend lists: for engines
// without the endpoint, or to keep a backend out of some pools. A backend
// whose models are not known (no answer yet, no pins) is in the Wild
// pool: the router sends it a model no known backend serves, and nothing
// else. A fetch that fails keeps the last list: a restarting engine comes
// back with its pools.
//
// # Concurrency
//
// Run (one goroutine) owns the entries and builds each Index; Index,
// Refresh and Kick are safe for concurrent use and never block a caller
// but Refresh's, which waits for its round. Pools and Indexes are
// immutable once published.
package fleet
