package fleet

import "github.com/saltus-lb/saltus/internal/promtext"

// The fleet's metrics: registered by New (the fleet-wide ones) and by
// syncSeries and build (one series per pool, unregistered when the pool
// is gone).
func init() {
	promtext.Describe(map[string]string{
		"saltus_fleet_pools":                "Model pools the fleet knows: model names (base models, aliases, LoRA adapters) some backend lists or is pinned to.",
		"saltus_fleet_unknown_backends":     "Backends whose models are not known (no GET /v1/models answer yet, no --backend-models pin): they are sent only models no pool serves.",
		"saltus_fleet_model_fetches_total":  "Fetches of a backend's GET /v1/models, by result: ok, error (no answer or a bad one: its last list is kept), unsupported (404, 405 or 501).",
		"saltus_fleet_models_ignored_total": "Models a backend listed that the fleet ignored, by reason: over_limit (past its bound of 4,096 models per backend), invalid_name (control characters or not UTF-8).",
		"saltus_fleet_refetch_total":        "Fetches of a backend's models asked because it answered 404 to a request of its pool (an adapter unloaded behind saltus's back), by result: kicked, suppressed (at most one per 250 ms).",
		"saltus_pool_backends":              "Backends in the model's pool: those that list the model or are pinned to it, routable or not.",
		"saltus_pool_routable_backends":     "Backends in the model's pool that are routable now: healthy and not draining.",
		"saltus_pool_requests_total":        "Requests admitted to the model's pool (routed to one of its backends); the series goes when the pool does.",
	})
}
