// Package admin is saltus's control-plane listener: Prometheus metrics,
// liveness and readiness probes, and the operator API that lists, adds,
// drains and removes backends, shows the model pools and the route table's
// statistics, and explains the routing decision for a request body without
// forwarding it.
//
// # Place in the request path
//
// None: it serves on its own address (--admin-listen), apart from the data
// plane's event loops, with net/http, because control-plane traffic is rare
// and small and net/http's timeouts and body limits are well understood.
// It imports nothing of the serving path; cmd/saltus adapts the shard
// router and the backend set to the [Backends] and [Routes] interfaces.
//
// # Endpoints
//
//	GET    /metrics                     Prometheus text: the given *metrics.Set, then process and Go metrics, with # HELP (promtext) and # TYPE
//	GET    /health                      200 "ok" while the process lives; never needs the token
//	GET    /ready                       200 "ok"; 503 after SetDraining, or while Config.Ready says why not (default: no backend routable)
//	GET    /admin/backends              200, JSON array of BackendInfo
//	POST   /admin/backends              body {"url":"http://host:port"} (or https://) → 201 BackendInfo; 400 bad input
//	POST   /admin/backends/{id}/drain   202 BackendInfo (or {"id":N} if gone meanwhile); 404 unknown id
//	DELETE /admin/backends/{id}         204; 404 unknown id
//	GET    /admin/routes                200, JSON of Routes.RouteStats()
//	POST   /admin/explain[?path=/v1/…]  body: an OpenAI request body → 200 JSON decision; 400 bad body
//	GET    /admin/cluster               200, JSON: members, state, last contact, routes sent/received/dropped, lag; {"enabled":false} without a cluster
//	GET    /admin/pools                 200, JSON PoolsInfo: the model pools, the backends whose models are unknown, each backend's models; 404 when Backends does not implement Pools
//	GET    /admin/dashboard.json        200, JSON DashboardData: /metrics' saltus_* families parsed, backends, route stats, cluster, pools
//	GET    /dashboard                   200, the dashboard page (and /dashboard/app.js, /dashboard/style.css; /dashboard/ redirects); no token needed
//
// GET endpoints also answer HEAD. A wrong method is 405 with an Allow
// header; an unknown path is 404. Errors have a JSON body in the OpenAI
// shape: {"error":{"message":…,"type":…,"code":<status>}}. With a bearer
// token configured, every endpoint but /health and the dashboard's page
// and assets (which carry no data) needs "Authorization: Bearer <token>" (compared in constant time); without it
// the answer is 401 with a WWW-Authenticate header.
//
// With Config.TLS the listener speaks HTTPS (crypto/tls under net/http;
// the handshake bounded by ReadHeaderTimeout); its certificate comes from
// the config's GetCertificate (cmd/saltus: a reloadable tlsconf.Holder)
// and, with ClientAuth RequireAndVerifyClientCert, clients must present a
// certificate of its ClientCAs.
//
// # Concurrency
//
// A Server is safe for concurrent use: net/http runs each request on its
// own goroutine, the draining flag is atomic, and the Backends and Routes
// given to [New] must be safe for concurrent use. Start, SetDraining,
// Shutdown and Addr: any goroutine. The one serving goroutine starts
// through a rules.Group and Shutdown joins it.
package admin
