package gossip

import (
	"cmp"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// lagRing keeps the last lagSamples route message lags. Guarded by
// Node.mu.
type lagRing struct {
	v   [lagSamples]time.Duration
	n   int // samples written, ever
	max time.Duration
}

const lagSamples = 1024

func (l *lagRing) add(d time.Duration) {
	d = max(d, 0) // clocks a little apart
	l.v[l.n%lagSamples] = d
	l.n++
	l.max = max(l.max, d)
}

// quantile of the samples kept; 0 without any.
func (l *lagRing) quantile(q float64) time.Duration {
	k := min(l.n, lagSamples)
	if k == 0 {
		return 0
	}
	s := slices.Clone(l.v[:k])
	slices.Sort(s)
	return s[min(k-1, int(q*float64(k)))]
}

// Status is GET /admin/cluster's answer.
type Status struct {
	Enabled   bool     `json:"enabled"` // true: GET /admin/cluster without a cluster says false
	Node      string   `json:"node"`
	Addr      string   `json:"addr"`
	Encrypted bool     `json:"encrypted"`
	Members   []Member `json:"members"`
	Routes    struct {
		Sent     uint64            `json:"sent"`
		Received uint64            `json:"received"`
		Dropped  map[string]uint64 `json:"dropped"`
		Snapshot struct {
			Sent     uint64 `json:"sent"`
			Received uint64 `json:"received"`
		} `json:"snapshot"`
	} `json:"routes"`
	// Lag is the route messages' delay from the sender's clock to this
	// router's over the last 1,024 (convergence: a route is matchable
	// here once its message arrived and its owner shard ran the insert,
	// microseconds later).
	Lag struct {
		Samples int     `json:"samples"`
		P50MS   float64 `json:"p50_ms"`
		P99MS   float64 `json:"p99_ms"`
		MaxMS   float64 `json:"max_ms"`
	} `json:"lag"`
	QueueDepth int `json:"queue_depth"`
	Outbox     int `json:"outbox"`
}

// Member is one node as this router sees it.
type Member struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"` // alive, suspect, dead, left
	Self  bool   `json:"self,omitempty"`
	// LastContactMS: milliseconds since its last message (load reports
	// come every LoadInterval); -1 never.
	LastContactMS  int64  `json:"last_contact_ms"`
	RoutesReceived uint64 `json:"routes_received"`
	InFlight       uint64 `json:"in_flight"` // its last load report, summed over backends
}

// Status reports the members and the traffic. Any goroutine.
func (n *Node) Status() Status {
	s := Status{Enabled: true}
	s.Node, s.Addr, s.Encrypted = n.name, n.Addr(), n.cfg.Key != nil
	now := time.Now()
	s.Members = append(s.Members, Member{Name: n.name, Addr: s.Addr, State: "alive", Self: true, LastContactMS: 0})
	n.mu.Lock()
	for name, p := range n.peers {
		m := Member{Name: name, Addr: p.addr, State: p.state, LastContactMS: -1, RoutesReceived: p.routesIn}
		if !p.lastContact.IsZero() {
			m.LastContactMS = now.Sub(p.lastContact).Milliseconds()
		}
		for _, l := range p.load {
			m.InFlight += uint64(l.InFlight)
		}
		s.Members = append(s.Members, m)
	}
	s.Lag.Samples = min(n.lags.n, lagSamples)
	s.Lag.P50MS = ms(n.lags.quantile(0.5))
	s.Lag.P99MS = ms(n.lags.quantile(0.99))
	s.Lag.MaxMS = ms(n.lags.max)
	n.mu.Unlock()
	slices.SortFunc(s.Members[1:], func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	s.Routes.Sent = n.m.routesSent.Get()
	s.Routes.Received = n.m.routesReceived.Get()
	s.Routes.Dropped = map[string]uint64{}
	for i, name := range routeDropNames {
		s.Routes.Dropped[name] = n.m.routesDropped[i].Get()
	}
	s.Routes.Snapshot.Sent = n.m.snapshotSent.Get()
	s.Routes.Snapshot.Received = n.m.snapshotReceived.Get()
	s.QueueDepth = n.queue.NumQueued()
	s.Outbox = len(n.outbox)
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// stateName is memberlist's state as GET /admin/cluster shows it.
func stateName(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return "unknown"
}
