package tree

import (
	"fmt"
	"time"
)

// Config sizes a Tree. It is immutable once passed to [New].
type Config struct {
	// MaxBlocks bounds the stored blocks (sum of edge lengths). Default
	// 1,000,000: about 16M tokens of prefixes at block size 16. Over the
	// bound, least recently used leaves are evicted, remote-only ones first.
	MaxBlocks int
	// MaxHolders bounds the backends remembered per node. Default 4: a hot
	// prefix may live on a few backends; more holders cost 16 bytes each per
	// node. A new holder on a full node evicts an expired or removed holder,
	// else the least recently used remote one, else the least recently used
	// local one. At most 255.
	MaxHolders int
	// TTL expires holders not refreshed by an insert for this long. Default
	// 1h: vLLM keeps finished blocks only until memory is needed, so an old
	// route is a guess at best.
	TTL time.Duration
	// MaxBackends bounds backend indices: valid ones are 0..MaxBackends-1.
	// Default 1024. At most 65536.
	MaxBackends int
}

// DefaultConfig returns the defaults documented on [Config].
func DefaultConfig() Config {
	return Config{
		MaxBlocks:   1_000_000,
		MaxHolders:  4,
		TTL:         time.Hour,
		MaxBackends: 1024,
	}
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	switch {
	case c.MaxBlocks < 1:
		return fmt.Errorf("tree: MaxBlocks must be at least 1, got %d", c.MaxBlocks)
	case c.MaxBlocks > 1<<31-2:
		return fmt.Errorf("tree: MaxBlocks must be below 2^31, got %d", c.MaxBlocks)
	case c.MaxHolders < 1 || c.MaxHolders > 255:
		return fmt.Errorf("tree: MaxHolders must be in [1, 255], got %d", c.MaxHolders)
	case c.TTL <= 0:
		return fmt.Errorf("tree: TTL must be positive, got %v", c.TTL)
	case c.MaxBackends < 1 || c.MaxBackends > 1<<16:
		return fmt.Errorf("tree: MaxBackends must be in [1, 65536], got %d", c.MaxBackends)
	}
	return nil
}
