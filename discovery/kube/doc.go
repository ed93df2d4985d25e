// Package kube finds saltus's backends in Kubernetes: it watches one
// Service's EndpointSlices (discovery.k8s.io/v1) and reports the Service's
// ready endpoints as targets ("http://IP:port"), which `saltus serve
// --discovery k8s` turns into the backend set. It sits beside the request
// path, not on it: it only changes which backends exist. A [Watcher]'s
// state is owned by the goroutine that runs [Watcher.Run].
//
// # Model selectors
//
// Besides (or instead of) the Service, each Config.ModelSelectors entry
// MODEL=SELECTOR is a Watcher of its own over the namespace's
// EndpointSlices that the label selector picks (slices carry their
// Service's labels, so it picks Services by label); its targets are
// pinned to MODEL (Target.Models). [New] returns every watch's Watcher;
// the caller merges their lists (dataplane: one backend per URL, pinned
// to the union of its watches' models).
//
// # Protocol
//
// Run lists the slices labelled kubernetes.io/service-name=SERVICE (or
// those a model selector picks) in the namespace, then watches them from the list's resourceVersion
// (watch=1, allowWatchBookmarks=true, timeoutSeconds=WatchTimeout),
// applying ADDED, MODIFIED and DELETED events and taking BOOKMARKs'
// resourceVersions. A watch the server ends is resumed at once from the
// last resourceVersion; one that breaks is resumed after a backoff
// (exponential, jittered, at most BackoffMax). A 410 Gone, as an answer
// or as an ERROR event, means that resourceVersion expired: list again.
// Any other ERROR event, bad JSON, an invalid object or an event over the
// size bound lose an event: log, count, back off, list again. Until a
// list or watch succeeds again the last endpoint set stands (a stale set
// beats none: the backend set's health checks catch endpoints that died
// meanwhile).
//
// Plain net/http and encoding/json, not k8s.io/client-go (DEPENDENCIES.md
// says why): the two requests above are the whole API used.
//
// # Endpoints
//
// An endpoint is a target when conditions.ready is not false (a missing
// ready counts as ready, as the API documents) and conditions.terminating
// is not true, its slice has the port (Config.PortName), and its first
// address is valid for the slice's addressType (IPv4, IPv6 or FQDN; the
// API says the others are fungible). Targets are merged across slices:
// one per URL and one per name, sorted by name (a dual-stack pod is one
// target, its IPv4 address). Target.Name is the pod's name (targetRef),
// else the hostname, else the address, made to fit a backend name.
//
// # Bounds
//
// Every answer is bounded: a list and each watch event by
// MaxResponseBytes (one event is one line of the stream), an error body
// by 64 KiB, the slices kept by MaxSlices, each over-the-bound case
// refused and counted. Time is bounded too: ConnectTimeout for a connect
// and TLS handshake, HeaderTimeout for a response head, ListTimeout for a
// whole list, and a watch silent for WatchTimeout + WatchIdleMargin is
// dropped (a connection that died without a reset).
//
// # Credentials
//
// In a pod (Config.Kubeconfig ""): the API server from
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the service
// account's CA, namespace and token (the token re-read on every request:
// bound tokens rotate). With a kubeconfig: its current context's cluster
// (server, certificate-authority or -data, insecure-skip-tls-verify,
// tls-server-name, proxy-url), user (token, tokenFile, client-certificate
// and client-key or their -data) and namespace. exec and auth-provider
// plugins and basic auth are refused with an error naming them. TLS is
// verified unless the kubeconfig says insecure-skip-tls-verify (logged
// as a warning).
//
// # Concurrency
//
//   - Run: one goroutine per Watcher, the caller's (a rules.Group one);
//     it owns the slices, the resourceVersion and the last set, and calls
//     update on itself, so never concurrently for one Watcher (the
//     Watchers of one Config do call theirs concurrently). It starts no goroutine of its own:
//     the stall timer is a time.AfterFunc that only cancels the watch's
//     context, and net/http's connection goroutines end with the
//     connections, which Run closes when it returns.
//   - Status: any goroutine (a mutex guards the status).
//   - Metrics: atomics, set by Run, read by the scraper.
package kube
