package shard

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkDecodeOnLoop is what a chat body of n bytes costs the loop
// that decodes and renders it (stages 2-3 with the loop's reused parser
// and Scratch, the none template): the measurement behind
// Config.OffloopBytes. The bodies are short messages, the dearest shape
// per byte short of tiny values.
func BenchmarkDecodeOnLoop(b *testing.B) {
	for _, n := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
		var msgs strings.Builder
		for i := 0; msgs.Len() < n-100; i++ { // the body stays under n
			if i > 0 {
				msgs.WriteByte(',')
			}
			fmt.Fprintf(&msgs, `{"role":"user","content":"message number %d"}`, i)
		}
		body := []byte(`{"model":"m","messages":[` + msgs.String() + `]}`)
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			e := newEnv(b, envOpts{loops: 1, backends: 1, maintain: 3600e9})
			j := &job{r: e.r, route: routeChat}
			var ds decodeScratch
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := j.prepare(body, &ds); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
