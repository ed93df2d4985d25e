package keys

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkAuthorize is what a keyed request costs saltus on its loop
// before any body work: the secret from the headers, its SHA-256 and
// lookup, and the charge of one request and its tokens against limits
// (every loop charges the same key: RunParallel).
func BenchmarkAuthorize(b *testing.B) {
	cfg := DefaultConfig()
	var text string
	for i := range 1000 {
		text += keyYAML("k"+strconv.Itoa(i), "sk-secret-"+strconv.Itoa(i), "  rpm: 100000000\n  tpm: 100000000\n")
	}
	cfg.File = writeKeys(b, "", text)
	r, _, clock := newTestRing(b, cfg)
	const header = "Bearer sk-secret-500"
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := r.Lookup(Secret(header, ""))
			if k == nil {
				b.Fatal("key not found")
			}
			// Each admission 1 ms later: the limits refill faster than charged.
			if a := k.Admit(clock.Add(int64(time.Millisecond)), 1500); a.Refused != NotRefused {
				b.Fatalf("refused: %+v", a)
			}
		}
	})
}
