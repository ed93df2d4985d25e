package dataplane

import "testing"

func TestNormAddr(t *testing.T) {
	t.Parallel()
	f := func(in, want string) {
		t.Helper()
		if got := normAddr(in); got != want {
			t.Errorf("normAddr(%q) = %q, want %q", in, got, want)
		}
	}
	f("127.0.0.1:8000", "127.0.0.1:8000")
	f("[::ffff:127.0.0.1]:8000", "127.0.0.1:8000")
	f("[0:0:0:0:0:0:0:1]:8000", "[::1]:8000")
	f("[fe80::1%eth0]:8000", "[fe80::1]:8000")
	f("Engine-0.Example.:8000", "engine-0.example:8000")
	f("127.0.0.1", "")
	f(":8000", "")
	f("127.0.0.1:", "")
}

func TestCheckKVEventsListen(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "tcp://*:5557", "tcp://127.0.0.1:0"} {
		if err := CheckKVEventsListen(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"ipc:///tmp/x", "tcp://", "127.0.0.1:5557"} {
		if err := CheckKVEventsListen(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
