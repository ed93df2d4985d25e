package shard

import (
	"fmt"
	"strings"
	"testing"
)

// scanBodies are the shapes BenchmarkScanJSON and the zero-allocation
// test scan: a 4 KB chat (mostly two long strings), 1 MB of tiny values
// (the shape of the 3 GB body), 1 M token ids, 10 k short messages, and a
// 1 MB prompt with an escape every 12 bytes.
func scanBodies() []struct{ name, body string } {
	system := strings.Repeat(systemA+" ", 3000/len(systemA)+1)[:3000]
	ids := strings.Repeat("12345,", 1_000_000)
	var msgs strings.Builder
	for i := range 10_000 {
		if i > 0 {
			msgs.WriteByte(',')
		}
		fmt.Fprintf(&msgs, `{"role":"user","content":"message %d with \"quotes\""}`, i)
	}
	return []struct{ name, body string }{
		{"chat4K", chatBody("system", system, "user", strings.Repeat("Describe the lamp. ", 52))},
		{"tinyValues1M", `{"model":"m","junk":[` + strings.Repeat("1,", 512<<10) + `1]}`},
		{"tokenIDs1M", `{"model":"m","prompt_token_ids":[` + ids[:len(ids)-1] + `]}`},
		{"messages10k", `{"model":"m","messages":[` + msgs.String() + `]}`},
		{"escapes1M", `{"model":"m","prompt":"` + strings.Repeat(`a line of the prompt, \"quoted\",\n`, 1<<20/36) + `"}`},
	}
}

// BenchmarkScanJSON is the structural check every chat and completion
// body passes before it is parsed (BodyLimits.check), in MB/s.
func BenchmarkScanJSON(b *testing.B) {
	l := DefaultBodyLimits()
	for _, c := range scanBodies() {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, e := scanJSON(body, l.MaxValues, l.MaxDepth); e.kind != scanOK {
					b.Fatal(e)
				}
			}
		})
	}
}

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
