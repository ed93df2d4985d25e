package gossip

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a router's cluster membership. Zero values are not
// defaults: start from DefaultConfig. Immutable once passed to Start.
type Config struct {
	// Bind is the host:port memberlist listens on, UDP and TCP both
	// (--cluster-bind). "" disables the cluster. Port 0 picks a free one
	// (tests).
	Bind string
	// Advertise is the host:port peers reach this node at, when it is not
	// Bind (NAT, a container's published port); "" = Bind's (memberlist
	// picks a private address for 0.0.0.0).
	Advertise string
	// Join lists peers to join at start (--join), host:port each; a peer
	// that does not answer is retried every ReconnectInterval. Empty: this
	// node starts a cluster others join.
	Join []string
	// Key encrypts and authenticates every message (AES-GCM, memberlist's
	// keyring): 16, 24 or 32 bytes, from --cluster-key-file (base64).
	// nil: plaintext, and any node that can reach Bind may join; the
	// docs/CLUSTER.md says to set it beyond a test bench.
	Key []byte
	// NodeName names this node in the cluster; unique per cluster.
	// Default "": the host name and Bind's port ("host-7946").
	NodeName string

	// BatchInterval is how long a route change waits for others to share
	// a message with. Default 10ms: a route learned on one router is
	// matched on the others within ~2 intervals (the p99 bound is
	// 100 ms), and at 10 ms a busy router's changes fill batches anyway.
	BatchInterval time.Duration
	// BatchBytes bounds one route message (a batch fills at it). Default
	// 1,200: a message is one UDP packet of memberlist's UDPBufferSize
	// (1,400) with its headers (label, encryption: 29); a chain longer
	// than fits (~145 blocks) is split into parts the receivers join
	// again.
	BatchBytes int
	// Outbox bounds the route changes waiting to be batched, the queue
	// the event loops hand them to without waiting. Default 16,384; when
	// full a change is dropped and counted (peers then learn the route
	// from their own traffic or the next push-pull).
	Outbox int
	// QueueLimit bounds memberlist's broadcast queue
	// (TransmitLimitedQueue, which has no bound of its own), in messages:
	// the load reports go through it. Default 1,024; over it the most
	// retransmitted messages are pruned, counted.
	QueueLimit int
	// GossipInterval is memberlist's gossip period: how often queued
	// broadcasts (load reports, membership changes) go to GossipNodes
	// random peers. Default 50ms (memberlist's LAN default is 200ms), so
	// a load report is at most LoadInterval + ~50 ms old.
	//
	// Route batches do not wait for it: memberlist retransmits a
	// broadcast a fixed number of times, least sent first, and does not
	// relay user messages, so under a steady flow some batches never
	// reached one of two peers (measured: 3 of 60 routes missing after 2 s
	// at 100 routes/s, their p99 44 s, healed only by push-pull). Each
	// batch is sent at once to every alive member instead (memberlist's
	// SendBestEffort: one encrypted UDP packet per peer), as Ranvier
	// does; what UDP loses the periodic push-pull brings.
	GossipInterval time.Duration
	// GossipNodes is memberlist's fan-out per gossip round. Default 3
	// (memberlist's LAN default).
	GossipNodes int

	// LoadInterval is how often this router reports its per-backend load
	// (requests in flight, pending prefill, footprint and pinned tokens)
	// through the broadcast queue, whether or not it changed. Default
	// 250ms (the bound). Besides, a load that changed is sent at
	// once to every peer each BatchInterval (Node.sendLoadChange), so a
	// decision sees the fleet's load about one BatchInterval old.
	LoadInterval time.Duration
	// LoadTTL drops a peer's load report not refreshed for this long, so
	// a peer that died stops counting before memberlist declares it dead.
	// Default 1s (4 reports).
	LoadTTL time.Duration

	// SnapshotRoutes bounds the routes a node sends in memberlist's
	// push-pull exchange on a join, most recently used first; the
	// periodic exchange (every PushPullInterval with a random peer) sends
	// a tenth of it. Default 20,000.
	SnapshotRoutes int
	// SnapshotBytes bounds that message. Default 4 MiB (memberlist
	// refuses remote states over 20 MiB).
	SnapshotBytes int
	// PushPullInterval is memberlist's full state exchange period.
	// Default 30s (memberlist's LAN default): it heals what broadcasts
	// lost (a partition, drops); a snapshot costs up to SnapshotBytes.
	PushPullInterval time.Duration
	// ReconnectInterval is how often Join peers that are not members are
	// joined again: after a partition longer than memberlist's gossip to
	// the dead (30 s) the two sides no longer talk by themselves, and a
	// rejoin's push-pull brings their routes back. Default 10s.
	ReconnectInterval time.Duration

	// MaxPending bounds the split routes waiting for their other parts.
	// Default 1,024; the oldest goes first, counted.
	MaxPending int
	// PartTimeout drops a split route whose parts did not all arrive
	// within it. Default 2s (memberlist retransmits a broadcast over a
	// few gossip rounds).
	PartTimeout time.Duration
	// MaxPeers bounds the peers whose load and status this node keeps.
	// Default 1,024.
	MaxPeers int

	// tune adjusts memberlist's config last (tests: faster failure
	// detection, a transport that drops packets).
	tune func(*memberlist.Config)
}

// DefaultConfig returns the defaults documented on Config: no cluster
// (Bind "").
func DefaultConfig() Config {
	return Config{
		Join:              []string{}, // as a config file's `join: []` decodes
		BatchInterval:     10 * time.Millisecond,
		BatchBytes:        1200,
		Outbox:            16384,
		QueueLimit:        1024,
		GossipInterval:    50 * time.Millisecond,
		GossipNodes:       3,
		LoadInterval:      250 * time.Millisecond,
		LoadTTL:           time.Second,
		SnapshotRoutes:    20000,
		SnapshotBytes:     4 << 20,
		PushPullInterval:  30 * time.Second,
		ReconnectInterval: 10 * time.Second,
		MaxPending:        1024,
		PartTimeout:       2 * time.Second,
		MaxPeers:          1024,
	}
}

// Enabled reports whether c asks for a cluster.
func (c Config) Enabled() bool { return c.Bind != "" }

// Validate reports every invalid field by name. A disabled cluster with
// Join or Key set is an error: they would be ignored.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("gossip: "+format, a...)) }
	if !c.Enabled() {
		if len(c.Join) > 0 || c.Key != nil || c.Advertise != "" || c.NodeName != "" {
			bad("cluster-bind is required for join, cluster-key-file, cluster-advertise and node-name")
		}
		return errors.Join(errs...)
	}
	if _, _, err := splitHostPort(c.Bind); err != nil {
		bad("cluster-bind %q: %v", c.Bind, err)
	}
	if c.Advertise != "" {
		if _, _, err := splitHostPort(c.Advertise); err != nil {
			bad("cluster-advertise %q: %v", c.Advertise, err)
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			bad("join %q: want host:port: %v", j, err)
		}
	}
	if c.Key != nil && len(c.Key) != 16 && len(c.Key) != 24 && len(c.Key) != 32 {
		bad("the cluster key must be 16, 24 or 32 bytes (AES-128/192/256), got %d", len(c.Key))
	}
	if len(c.NodeName) > 255 {
		bad("node-name must be at most 255 bytes, got %d", len(c.NodeName))
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			bad("%s must be positive, got %v", name, d)
		}
	}
	positive("BatchInterval", c.BatchInterval)
	positive("GossipInterval", c.GossipInterval)
	positive("LoadInterval", c.LoadInterval)
	positive("PushPullInterval", c.PushPullInterval)
	positive("ReconnectInterval", c.ReconnectInterval)
	positive("PartTimeout", c.PartTimeout)
	if c.LoadTTL < c.LoadInterval {
		bad("LoadTTL (%v) must be at least LoadInterval (%v)", c.LoadTTL, c.LoadInterval)
	}
	if c.BatchBytes < 512 || c.BatchBytes > 60000 {
		bad("BatchBytes must be in [512, 60000], got %d", c.BatchBytes)
	}
	for name, v := range map[string]int{"Outbox": c.Outbox, "QueueLimit": c.QueueLimit, "GossipNodes": c.GossipNodes,
		"SnapshotRoutes": c.SnapshotRoutes, "MaxPending": c.MaxPending, "MaxPeers": c.MaxPeers} {
		if v < 1 {
			bad("%s must be at least 1, got %d", name, v)
		}
	}
	if c.SnapshotBytes < 1<<10 || c.SnapshotBytes > 16<<20 {
		bad("SnapshotBytes must be in [1 KiB, 16 MiB] (memberlist refuses states over 20 MiB), got %d", c.SnapshotBytes)
	}
	return errors.Join(errs...)
}

func splitHostPort(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("want host:port: %w", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("port %q is not in [0, 65535]", port)
	}
	return host, p, nil
}

// LoadKey reads a cluster key file: the key in standard base64 (what
// `saltus cluster-key` prints, like `consul keygen`), surrounding
// whitespace ignored, decoding to 16, 24 or 32 bytes.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the cluster key file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("cluster key file %s is empty", path)
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("cluster key file %s: not base64: %w", path, err)
	}
	if len(key) != 16 && len(key) != 24 && len(key) != 32 {
		return nil, fmt.Errorf("cluster key file %s: the key must decode to 16, 24 or 32 bytes, got %d", path, len(key))
	}
	return key, nil
}

// NewKey returns a new random 32-byte cluster key in the key file's
// format (`saltus cluster-key`).
func NewKey() string {
	var k [32]byte
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.StdEncoding.EncodeToString(k[:])
}
