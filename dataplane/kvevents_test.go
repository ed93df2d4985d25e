package dataplane

import (
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/upstream/backend"
)

// TestKVEndpoint: a backend named by kv-events (name or URL) gets its
// entry's endpoint; the others get their host at kv-events-port, or none.
func TestKVEndpoint(t *testing.T) {
	t.Parallel()
	list := []string{"gpu-a=http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://[fd00::3]:8000"}
	st := backendSettings{kv: []string{"gpu-a=tcp://10.0.0.1:5557", "http://10.0.0.2:8000=tcp://10.9.9.9:6000"}}
	f := func(u string, port int, want string) {
		t.Helper()
		norm, _, err := backend.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		st.kvPort = port
		if got := kvEndpoint(&backend.Backend{URL: norm}, list, st); got != want {
			t.Errorf("%s (port %d): %q, want %q", u, port, got, want)
		}
	}
	f("http://10.0.0.1:8000", 0, "tcp://10.0.0.1:5557")
	f("http://10.0.0.2:8000", 7000, "tcp://10.9.9.9:6000")
	f("http://[fd00::3]:8000", 0, "")
	f("http://[fd00::3]:8000", 5557, "tcp://[fd00::3]:5557")
	f("http://10.1.1.1:8000", 5557, "tcp://10.1.1.1:5557") // discovered: not in the list
	if err := CheckKVEvents(list, st.kv, 5557); err != nil {
		t.Errorf("valid entries refused: %v", err)
	}
	for _, tc := range []struct {
		entry string
		port  int
		want  string
	}{
		{"gpu-b=tcp://10.0.0.1:5557", 0, `no configured backend is named "gpu-b"`},
		{"gpu-a", 0, "want BACKEND=tcp://HOST:PORT"},
		{"=tcp://10.0.0.1:5557", 0, "want BACKEND=tcp://HOST:PORT"},
		{"gpu-a=udp://10.0.0.1:5557", 0, "want BACKEND=tcp://HOST:PORT"},
		{"gpu-a=tcp://10.0.0.1:5557", 70000, "kv-events-port"},
	} {
		err := CheckKVEvents(list, []string{tc.entry}, tc.port)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q port %d: %v, want %q", tc.entry, tc.port, err, tc.want)
		}
	}
}

// TestKVReplayEndpoint: a backend named by kv-events-replay gets its
// entry's endpoint; the others get their publisher's host at
// kv-events-replay-port, or none.
func TestKVReplayEndpoint(t *testing.T) {
	t.Parallel()
	list := []string{"gpu-a=http://10.0.0.1:8000", "http://10.0.0.2:8000"}
	st := backendSettings{kvReplay: []string{"gpu-a=tcp://10.0.0.1:5558"}}
	f := func(u, pub string, port int, want string) {
		t.Helper()
		norm, _, err := backend.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		st.kvReplayPort = port
		if got := kvReplayEndpoint(&backend.Backend{URL: norm}, pub, list, st); got != want {
			t.Errorf("%s (port %d): %q, want %q", u, port, got, want)
		}
	}
	f("http://10.0.0.1:8000", "tcp://10.0.0.1:5557", 0, "tcp://10.0.0.1:5558")
	f("http://10.0.0.1:8000", "tcp://10.0.0.1:5557", 6000, "tcp://10.0.0.1:5558") // named: the entry wins
	f("http://10.0.0.2:8000", "tcp://10.9.9.9:5557", 0, "")
	f("http://10.0.0.2:8000", "tcp://10.9.9.9:5557", 5558, "tcp://10.9.9.9:5558") // the publisher's host
	f("http://[fd00::3]:8000", "tcp://[fd00::3]:5557", 5558, "tcp://[fd00::3]:5558")
	if err := CheckKVEventsReplay(list, st.kvReplay, 5558); err != nil {
		t.Errorf("valid entries refused: %v", err)
	}
	for _, tc := range []struct {
		entry string
		port  int
		want  string
	}{
		{"gpu-b=tcp://10.0.0.1:5558", 0, `no configured backend is named "gpu-b"`},
		{"gpu-a", 0, "want BACKEND=tcp://HOST:PORT"},
		{"gpu-a=udp://10.0.0.1:5558", 0, "want BACKEND=tcp://HOST:PORT"},
		{"gpu-a=tcp://10.0.0.1:5558", -1, "kv-events-replay-port"},
	} {
		err := CheckKVEventsReplay(list, []string{tc.entry}, tc.port)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q port %d: %v, want %q", tc.entry, tc.port, err, tc.want)
		}
	}
}

func TestRankEndpoint(t *testing.T) {
	for _, c := range []struct {
		ep   string
		r    int
		want string
		err  bool
	}{
		{"tcp://10.0.0.1:5557", 0, "tcp://10.0.0.1:5557", false},
		{"tcp://10.0.0.1:5557", 3, "tcp://10.0.0.1:5560", false},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558", false},
		{"", 2, "", false},
		{"tcp://10.0.0.1:65535", 1, "", true},
		{"tcp://10.0.0.1", 1, "", true},
	} {
		got, err := rankEndpoint(c.ep, c.r)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("rankEndpoint(%q, %d) = %q, %v; want %q, error %v", c.ep, c.r, got, err, c.want, c.err)
		}
	}
	for n, ok := range map[int]bool{-1: false, 0: true, 1: true, MaxKVEventsRanks: true, MaxKVEventsRanks + 1: false} {
		if err := CheckKVEventsRanks(n); (err == nil) != ok {
			t.Errorf("CheckKVEventsRanks(%d) = %v", n, err)
		}
	}
}
