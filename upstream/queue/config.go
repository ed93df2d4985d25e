package queue

import (
	"fmt"
	"time"
)

// Config sizes a Queue. It is immutable once passed to [New].
type Config struct {
	// MaxEntries bounds the requests waiting in the queue; a Push past it is
	// refused and the caller answers 429 with Retry-After at once. Default
	// 1,024: it absorbs a burst of a few hundred clients arriving together
	// at a full pool, at 64 bytes per entry plus the caller's item and
	// 96 bytes per tenant record plus its map slot (TestSizes). Entries the
	// pool cannot dispatch within MaxWait only wait to be expired: a pool
	// that finishes 17 requests a second dispatches 1,024 in one default
	// MaxWait. It also bounds the tenants' fair-share records (see
	// [Queue]). At most 2^30.
	MaxEntries int
	// MaxWait bounds how long a request waits: [Queue.Expire] returns the
	// ones that waited longer and the caller answers them 503 with
	// Retry-After. Default 60s: a chat client that has had no first token
	// for a minute is better told to back off than held, and the slot it
	// waits for may never come while a pool is saturated. There is no "no
	// limit" value: every queue fed by client input has a bound
	// (rules/RULES.md, R4); set hours if that is what you want.
	MaxWait time.Duration
	// MaxExpirePerCall bounds the entries one Expire call returns, so a
	// burst that arrived together does not make one tick answer all of
	// them: the rest go on the next calls. Default 256: with the loop's
	// 50 ms tick a full default queue drains in 4 ticks (200 ms late at
	// most), and one tick writes at most 256 refusals.
	MaxExpirePerCall int
}

// DefaultConfig returns the defaults documented on [Config].
func DefaultConfig() Config {
	return Config{
		MaxEntries:       1024,
		MaxWait:          60 * time.Second,
		MaxExpirePerCall: 256,
	}
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	switch {
	case c.MaxEntries < 1 || c.MaxEntries > 1<<30:
		return fmt.Errorf("queue: MaxEntries must be in [1, 2^30], got %d", c.MaxEntries)
	case c.MaxWait <= 0:
		return fmt.Errorf("queue: MaxWait must be positive, got %v", c.MaxWait)
	case c.MaxExpirePerCall < 1:
		return fmt.Errorf("queue: MaxExpirePerCall must be at least 1, got %d", c.MaxExpirePerCall)
	}
	return nil
}
