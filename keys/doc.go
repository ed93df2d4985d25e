// Package keys is saltus's optional API-key layer: the set of client
// keys (each a tenant name, the SHA-256 of its secret, the models it may
// use, its requests and tokens per minute and its fair-share weight), the
// loader of the key file, and each key's rate limiters. It sits at the
// very front of the request path: the router asks it who a request's
// `Authorization: Bearer` or `x-api-key` secret belongs to before it reads
// the body, then charges the key's limits at admission and corrects the
// tokens when the engine's usage comes back. Without a key file nor
// SALTUS_API_KEYS there is no Ring and nothing of this runs.
//
// # Keys at rest
//
// A key file holds no secret: each key is `sha256:<hex>` of its secret
// (`saltus keys hash` prints it from stdin), looked up by the hash of the
// secret a client presents, in a map. A wrong secret's hash finds nothing
// and compares nothing byte by byte, so the lookup's time says nothing of
// how close a guess was.
//
// # Limits
//
// Each limit is a generic cell rate algorithm (GCRA, the leaky bucket as
// a meter): one atomic "theoretical arrival time" per limiter, advanced
// by a compare-and-swap by cost × (1 minute / limit). A key starts with a
// whole minute's allowance and earns it back continuously, as OpenAI's
// limits behave; a request that does not fit is refused at once with the
// time until it would. Corrections (the engine's usage against the
// reservation) move the same time back or forward, so a key that used
// more than it reserved pays it from its next requests.
//
// # Concurrency
//
// A Ring is safe for concurrent use. The key set is an immutable snapshot
// behind an atomic.Pointer: a lookup from any event loop takes no lock.
// Limiters and per-key counters are atomics, shared by every loop. Loads
// (start, the file watch, a reload) serialize on the Ring's mutex, off
// the loops; a load keeps the Account (limiters and counters) of every
// key whose name it keeps, so a reload does not reset a key's limits.
// Watch runs on a goroutine of the caller's rules.Group.
package keys
